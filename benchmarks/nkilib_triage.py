"""Why nki-library suite tests fail or are skipped on nkisim: the triage table of ``nkilib_suite.py``.

:data:`TRIAGE` holds a pattern on a failure's "test id: message" and a verdict with its reason, each
found by running and reading the failing test (see docs/nkilib-conformance.md for the verdicts);
:data:`SKIP_REASONS` names why tests were skipped. The first matching entry wins.
"""

from __future__ import annotations

import re

#: The suite skips tests with large shapes in simulation mode unless this is "1" (test/utils/simulation_setup.py).
RUN_ALL_ENV = "NKILIB_SIMULATION_RUN_ALL"

#: Why a test was skipped, by a pattern on its skip message: (pattern, reason). The first match wins.
SKIP_REASONS: list[tuple[str, str]] = [
    (
        r"Skipping slow simulation test",
        f"suite: its large-shape skip in simulation mode ({RUN_ALL_ENV} not set)",
    ),
    (r"trace_only test", "nkisim: a trace_only test needs NKI's compiler tracer, which a simulation run has not"),
    (r"[Pp]latform|\b[Tt][Rr][Nn]\d\b", "suite: the test excludes this platform"),
    (
        r"^Model coverage test$|^failing determinism check$",
        "suite: marked xfail by the suite ('Model coverage test', 'failing determinism check'), which counts "
        "neither its pass nor its failure (core/moe's test_moe_tkg_model; one measured, "
        "[_MODEL_WIP_vnc-2_t-1_h-4096_i-1536_e-2_..._dtype-float16_...] on trn2: its float32 golden reaches "
        "295,700, beyond float16's 65,504, so 2,700 of the kernel's 4,096 float16 outputs are inf)",
    ),
]

#: The later suite's own word on the MX scale, for the failures whose goldens take the OCP one.
LATER_MX_GOLDEN = (
    ". nki-library's later test/utils/mx_utils.py (commit e9ef98f) makes this doubled scale its golden's default: "
    "get_mx_max_exp(mx_alt_emax=True) gives e4m3fn 7 and e5m2 14, 'matching the neuronxcc compiler default'"
)

#: (pattern on "test id: message", verdict, why). Verdicts: "nkisim" (nkisim is wrong: fixed or to fix),
#: "unmodelled" (the kernel relies on something nkisim does not model yet), "suite" (the test or its
#: reference is broken), "timeout" (slower than --timeout), "memory" (the machine ran out of memory), "disk" (the
#: machine's disk was full). First match wins.
#: How a worker that died shows in a test's message (pytest-xdist's words), whatever stopped it.
CRASH = r"crashed while running|node down|Not properly terminated"

TRIAGE: list[tuple[str, str, str]] = [
    (
        r"No space left on device",
        "disk",
        "the disk was full when the test wrote its inputs and outputs: 73 GiB of outputs left by earlier tests whose "
        "xdist worker the OOM killer had ended, which teardown never removed. They are removed now, the plugin "
        "removes a killed test's outputs itself, and nkilib_suite.py refuses to start with less than 20 GiB free; "
        "not a result of nkisim's. To be run again",
    ),
    (
        r"which needs trn2 or trn3|needs NeuronCore-v3 or newer|needs \w+, which trn2 "
        r"|exceed the 196608 bytes of a SBUF partition",
        "suite",
        "the suite runs this kernel on trn1, but the kernel needs NeuronCore-v3 features (an LNC=2 launch, "
        "tensor_copy on the Scalar Engine, double-row matmul, an indirect DMA transpose, or trn2's larger SBUF "
        "in its own address plan); nkisim rejects it with the generation named, as the compiler would, and the "
        "test does not exclude trn1",
    ),
    (
        r"test_moe_tkg_bfloat16\[vnc-2_[^\]]*\]: AssertionError$",
        "suite",
        "negative members (a configuration the kernel must reject) run on trn1 with two NeuronCores: nkisim stops "
        "the launch first ('kernel[2] runs on 2 NeuronCores (LNC=2), which needs lnc2_collectives, which trn2 and "
        "trn3 have'), and the suite's harness then asserts the compiler's kernel-validation text ('[NCC_INKI016] "
        "Kernel validation exception:', test/utils/ranged_test_harness.py:272), which only the kernel's own check "
        "gives. The test does not exclude trn1, which has one NeuronCore per logical core",
    ),
    (
        r"would take \d+ bytes of this machine's memory to simulate",
        "memory",
        "nkisim declined an HBM tensor larger than the host memory free at that moment, with its typed error "
        "instead of the OOM killer (another run on the machine held the rest); not a wrong result",
    ),
    (
        r"output_proj_cte_\w+_sweep\[invalid_.*crashed while running",
        "memory",
        "negative configurations (B*S over the kernel's documented 131072, which the kernel rejects in its "
        "first checks) whose inputs the suite generates before the kernel runs: np.random.random_sample draws "
        "float64, then casts to bf16, float32 and bf16 again. Measured alone (ru_maxrss) for "
        "B=3, S=13097, N=17, D=116, the generator peaks at 1.36 GB for a 0.155 GB input; scaled to the crashed "
        "B=57 that is ~26 GB, and 19-20 GB for the [84-13097-838-12-81] and [98-12043-478-*] members, more "
        "than this 24 GB machine holds before nkisim runs",
    ),
    (
        r"moe_blockwise_mm_kernel_lnc2\[BWMMFunc\.SHARD_ON_INTERMEDIATE-3072-1024-64-512-8-3072-.*crashed while",
        "memory",
        "the suite's input generator draws the gate/up weights, [64 experts, 3072, 2, 3072], as float64 "
        "(np.random.uniform, 9 GiB) before casting them to bf16; measured alone (RSS sampled every 0.3 s) it "
        "reaches 12.3 GiB before the kernel runs, the simulation phase holds 10.7 GiB (the suite's 3.6 GB of bf16 "
        "weights, nkisim's HBM copy of them, the rest), and the test peaks at 13.1 GiB. Two such workers do not "
        "fit in this 24 GB machine. Run alone it passes, in 705 s (over the 150 s --timeout)",
    ),
    (
        r"mx_bf16_static_dequant.*cannot bind inputs to qkv\(",
        "suite",
        "test_qkv_cte_mx_bf16_static_dequant passes is_input_swizzled to nkilib's qkv() (core/qkv/qkv.py), which "
        "at nki-library commit d2ad3a5 has no such parameter (only qkv_cte.py's kernel does): Python rejects the "
        "call before the kernel runs",
    ),
    (
        r"mxfp8_static_dequant.*'module' object is not callable",
        "suite",
        "core/qkv/qkv_cte.py (nki-library commit d2ad3a5) does 'from ..utils import stream_shuffle_broadcast', "
        "which imports the module (core/utils/__init__.py does not re-export the function), then calls it on "
        "its MX static-dequant path: a TypeError on any runtime",
    ),
    (
        r"test_qkv_cte_mxfp8_unit\[2-1-512-1024-5-5-128-NormType\.RMS_NORM-False-False-False-QKVOutputLayout\.NBSd"
        r".*Validation failed",
        "suite",
        "the suite's golden quantizes the activations with the OCP sample scale (quantize_mx_golden in "
        "core/mlp/test_mlp_common.py at d2ad3a5: largest exponent minus 8 for e4m3fn), while nki.isa.quantize_mx, "
        "as documented (Neuron 2.32) and modelled here, uses a block scale two times larger, so every value keeps "
        "one mantissa bit less. Recomputed from the test's own inputs: a golden with the OCP scale matches the "
        "suite's to 0.14% (mean), nkisim's output is 2.4% from it (5.13% at the largest element, over the test's "
        "5% tolerance), and 0.8% from the same golden with the doubled scale and the kernel's bf16 normalisation. "
        "Its mxfp8_unit siblings without the H-dim 4h transpose sit at 2.0-2.5% mean and pass" + LATER_MX_GOLDEN,
    ),
    (
        r"test_qkv_cte_mxfp8_unit\[2-1-2048-16384-2-1-128-NormType\.NO_NORM-False-True-False.*Stack out of memory",
        "suite",
        "the kernel's own SBUF plan overflows its own allocator (nkilib's SbufManager over nki's "
        "total_available_sbuf_size, 256 KiB a partition on trn3): _multi_buffering_degree_for_seqlen_mx projects "
        "182,016 bytes for S_shard 1024, H 16384, a swizzled bf16 input and a bias, then the stack allocations "
        "exceed 262,144 and the kernel's kernel_assert fails before any instruction of nkisim is involved "
        "(measured by wrapping the function in the test run)",
    ),
    (
        r"test_attention_bwd\[b-1_qh-((16|32|64)_kvh-\d+_s-8192|64_kvh-\d+_s-4096)_.*crashed while running",
        "memory",
        "the suite's torch reference holds several float32 [B, Hq, S, S] tensors at once: compute_o_lse "
        "(core/attention/attention_bwd_torch.py, nki-library commit d2ad3a5) computes the forward scores in full, "
        "then masked_fill, the softmax and softmax_dx make more of the same size. Measured with memray on "
        "[b-1_qh-8_kvh-2_s-8192_dh-128_...sinks-0] on trn2, which passes: a 10.5 GiB peak, 10.0 GiB of it five such "
        "tensors of 2 GiB (softmax, mixed_precision_matmul, softmax_dx), nkisim under 0.1 GiB. Each is 8 GiB for 32 "
        "heads at S = 8192 and 4 GiB for 64 heads at S = 4096, more than this 24 GB machine holds (run alone with "
        "-n 1, the worker was killed at 23.5 GB with 32 heads at S = 8192, and at 23.9 GB for "
        "[b-1_qh-64_kvh-8_s-4096_dh-64_..._sinks-1]; its sinks-0 siblings passed alone, in 217-263 s)",
    ),
    (
        r"(B-7_T-4096_V-32128_dtype-bfloat16_PB-128_CS-16384|B-1_T-10240_V-201088_dtype-bfloat16_PB-128_CS-16384"
        r"|B-4_T-2048_V-151936_dtype-bfloat16_PB-128_CS-16384|B-16_T-2048_V-32128_dtype-float32_PB-128_CS-8192)"
        r"_reduction-mean\].*crashed while",
        "memory",
        "killed for memory on trn2 even when run alone (-n 1): the logits hold 0.92 to 2.06 billion elements "
        "(B x T x V); the suite's input generation alone peaked at 10.7 GB for 1.05 billion (memray, cross-entropy "
        "forward B=4, T=8192, V=32128), about 10 bytes an element, so these need about 9 to 21 GB before the "
        "kernel runs on a 24 GB machine. Their smaller siblings, re-run alone, pass",
    ),
    (
        r"test_attn_blk_model\[MODEL_WIP_\w+-131072-131072-.*crashed while running",
        "memory",
        "the test's torch golden over a 131072-position KV cache outgrows this 24 GB machine before the kernel "
        "runs: measured alone, the process is in _golden_ref_via_torch (attention_tkg_torch.py) at 8.8 GB after "
        "30 s and 14.8 GB after 50 s, and is killed at 24.3 GB after 71 s",
    ),
    (
        r"test_attn_blk_model\[.*Incorrect shape for weight scale for row quantization, expected \(128, \d+\), "
        r"got \(128, 1\)",
        "suite",
        "the same defect on the output projection: for quantized configurations test_attention_block_tkg.py:683 "
        "builds the output weight scale as one value broadcast to (128, 1), and output_projection_tkg.py:411 "
        "(nki-library commit d2ad3a5) asserts a per-column (128, H) scale for row quantization; the kernel rejects "
        "its input before computing (seen with batches of 256 and 512)",
    ),
    (
        r"test_attn_blk_model\[MODEL_WIP_GENERALITY_\d+-\d+-128-\d+-None-(10240|262144)-\d+-.*crashed while running",
        "memory",
        "killed at 24 GB with one worker (-n 1, nothing else running): the test's torch golden for these batches "
        "and KV lengths outgrows the machine. Sampled with py-spy on one of them while it grew: at 12.8 GB and at "
        "17.0 GB the worker was in the suite's _golden_ref_via_torch (test_attention_block_tkg.py:987, called at "
        "line 1133 before the kernel runs)",
    ),
    (
        r"test_attn_blk_model\[MODEL_WIP_GENERALITY_1024-1-128-5376-None-32768-32768-.*Unable to allocate 32\.0 GiB",
        "memory",
        "the suite's input generator asks numpy for a float64 array of shape (1048576, 32, 128), 32 GiB, before the "
        "kernel runs (uniform_activation, test_attention_block_tkg.py:517, from generate_kernel_inputs at line 619; "
        "seen in the traceback of a run alone), more than this 24 GB machine has",
    ),
    (
        r"test_attn_blk_model\[MODEL_WIP_GENERALITY_128-\d+-128-4096-None-262144-262144-.*Unable to allocate 32\.0 GiB "
        r"for an array with shape \(128, 1, 262144, 128\) and data type float64",
        "memory",
        "the suite asks numpy for a float64 KV cache of shape (128, 1, 262144, 128), 32 GiB, before the kernel runs "
        "(the message names the array), more than this 24 GB machine has",
    ),
    (
        r"test_attn_blk_model\[MODEL_WIP_GENERALITY_(128|256)-.*attention_block_tkg\.py:1121: nisa\.nc_matmul "
        r"\[Tensor, trn\d\]: moving free size (1024|2048) exceeds 512 for a float32 dst",
        "suite",
        "the configuration is past the kernel's own limits: _rms_norm_inplace (attention_block_tkg.py:1119-1121, "
        "nki-library commit d2ad3a5) multiplies the whole [128, B*S] tile in one nc_matmul into a [128, B*S] float32 "
        "PSUM tile, without tiling B*S; for these batches B*S is 1024 or 2048, over the published gemm_moving_fmax of "
        "512 (and the 2 KiB PSUM bank) for a float32 destination, so the Tensor Engine cannot issue it",
    ),
    (
        r"test_attn_blk_model\[MODEL_WIP_GENERALITY_128-16-128-4096-None-32768-32768-.*you tried to allocate "
        r"34359738368 bytes",
        "memory",
        "torch refused a 32 GiB allocation in the suite's run (a 24 GB machine). Run alone, the test reaches "
        "the kernel, which then issues an nc_matmul whose moving free size is 2048 (attention_block_tkg.py:1121, "
        "_rms_norm_inplace), over the published gemm_moving_fmax of 512 for a float32 PSUM destination: nkisim "
        "refuses it with a ShapeError, so this configuration would fail on the kernel's own matmul too",
    ),
    (
        r"test_attn_blk_model\[MODEL_WIP_GENERALITY_(16|32)-(8|16)-128-4096-None-262144-262144-.*you tried to "
        r"allocate (34359738368|68719476736) bytes",
        "memory",
        "torch refused a 32 GiB (batch x KV heads of 256: 32 x 8, 16 x 16) or 64 GiB (32 x 16) allocation in the "
        "suite's golden for a 262144-position KV cache, before the kernel runs: run alone, the 32 x 8 member fails "
        "in _golden_ref_via_torch (test_attention_block_tkg.py:987) at attention_tkg_torch.py:380, the full score "
        "matrix k_prior.permute(0, 1, 3, 2) @ q (nki-library commit d2ad3a5), more than this 24 GB machine has",
    ),
    (
        CRASH,
        "memory",
        "the xdist worker was killed for memory (24 GB machine; two workers at once, or one for the largest). "
        "Measured with memray on "
        "smaller members of the same families, the peaks are the suite's own: rmsnorm-quant [32768, 16384] peaks "
        "at 17.4 GB in its golden and np.isclose comparison, while the whole simulation phase holds 6.7 GB; "
        "cross-entropy forward B=4, T=8192, V=32128 peaks at 10.7 GB generating its inputs, the simulation phase "
        "4.7 GB (nkisim's own share is about one copy of the inputs); the crashed configurations are 2-4 times "
        "larger. Not a wrong result: they need a larger machine or -n 1",
    ),
    (
        r"test_cross_entropy_backward\W.*reduction-sum\]: .*[Vv]alidation failed for \['grad_logits_hbm'\]",
        "suite",
        "the kernel overwrites its logits with the gradient (inplace=True, its default, documented as 'logits_hbm "
        "is overwritten'); a simulator updates the caller's array as the kernel says, and the test's lazy golden is "
        "computed after the run from that same array, so the golden is the gradient of the kernel's output. "
        "Checked on [B-4_T-4096_V-32128 float32 CS-8192 sum] by saving both: nkisim's grad_logits is within 3e-8 "
        "of a float64 softmax(logits) - onehot(target) of the original logits, and the golden is within 7e-9 of "
        "the same formula applied to nkisim's output. With reduction 'mean' the error is scaled by 1/(B*T) and "
        "falls inside the tolerance, so those members pass",
    ),
    (
        r"test_ranged_attn_cte_sweep_cp_manual\[\w+-True-\d-1-1-32768-None-None-32-31-128-(2|127)-.*[Vv]alidation "
        r"failed for \['out'\]",
        "suite",
        "a kernel defect: for a sliding window <= 128 attention_cte.py sets use_swa_optimized_allocation, which gives "
        "exp_sb and exp_tp_sb two buffers for a section's four 2048-key tiles (tiles 0/2 and 1/3 share one), on the "
        "premise that a Q group needs at most two adjacent tiles. With strided Q slicing a group spans 4096 "
        "positions, and _has_any_compute_swa assumes rank 0 for its lower bound, so the exp of tile 1's last 512 "
        "keys is computed too, and of those the P@V keeps the last 128-key V tile; tile 3's exp overwrites that "
        "block before the P@V of tile 1 reads it, in program order, as hardware would execute it. Checked on "
        "[True-True-2-...-32-31-128-2-...] against a float64 reference: nkisim's output equals the reference plus, "
        "for each row with keys in a section's last 128, those softmax weights times the V rows 4096 earlier (to "
        "5e-3; the failing rows are off by up to 0.98), i.e. rows 252-255 of every 256",
    ),
    (
        r"(PSUM|SBUF) is full",
        "unmodelled",
        "these kernels do not fit even after nkisim's compiler-style liveness retry (tiles freed after their last "
        "use, automatic tiles kept off explicit ones) and spilling of automatic SBUF and PSUM tiles: what remains "
        "is explicitly placed tiles (or a run recorded before spilling was modelled, or, before the retry raised "
        "host memory errors itself, a retry that ran out of host memory); the compiler packs them tighter than "
        "nkisim's next-fit allocator (fragmentation, per-instruction placement) - not diagnosed further",
    ),
    (
        r"(PSUM|SBUF) address .* overlaps live",
        "unmodelled",
        "an explicitly placed tile overlaps an automatic one that is still used later; the compiler would move the "
        "automatic tile, which nkisim does only when eager allocation also runs out",
    ),
    (
        r"test_quantize_mx_hw\[",
        "suite",
        "the suite's golden (mx_torch_common.quantize_to_mx) computes the OCP sample scale "
        "2^(floor(log2 amax) - Emax); the nki.isa reference of quantize_mx (2026-07) says the instruction's block "
        "scale is twice that, 2^(floor(log2 amax) - (Emax - 1)), which nkisim follows: every scale byte is one "
        "more than the golden's and every value half" + LATER_MX_GOLDEN,
    ),
    (
        r"test_mxfp_load_performance\[\d+\].*Validation failed for \['out_data_hbm', 'out_scale_hbm'\]",
        "suite",
        "two assumptions of the test's exact (0 tolerance) golden in experimental/mxfp_subkernels/test_mxfp_load.py "
        "at d2ad3a5: it quantizes with quantize_mx_golden's OCP sample scale (largest exponent minus 8), where "
        "nki.isa.quantize_mx, as documented (Neuron 2.32) and modelled here, uses a block scale two times larger; and "
        "it expects zeros in the 112 scale rows per block the kernel never writes (only rows 0-3, 32-35, 64-67, "
        "96-99 are quantize_mx's), which are uninitialised SBUF (nkisim's poison, 0xFF). The kernel's DMA, strided "
        "nc_transpose and PSUM copy match numpy bit for bit, and quantize_mx's data and scales equal the suite's own "
        "quantize_mx_golden called with the doubled scale (custom_mx_max_exp 7), bit for bit" + LATER_MX_GOLDEN,
    ),
    (
        r"test_rmsnorm_mx_quantize_tkg(_residual)?\[.*Validation failed for \['out_scale'\]",
        "suite",
        "two differences on the golden's side, measured on [128-1-3072-2880] (and on the residual variant "
        "[256-1-1024]: 57,344 scales unwritten, the other 8,192 all exactly +1): the test's wrapper writes the scale "
        "rows 32q+0..3 of each quadrant into a kernel-made HBM tensor and leaves the other 112 rows unwritten, "
        "which nkisim fills with 0xFF (docs/semantics.md) and the golden expects as 0 (86,016 elements); and the "
        "written scales are quantize_mx's documented block scale, one more than the golden's OCP scale (as in "
        "test_quantize_mx_hw), where the golden's float32-to-fp16 rounding crosses a power of two the +1 becomes "
        "+2, beyond the tolerance" + LATER_MX_GOLDEN,
    ),
    (
        r"\.ap: partition step \d+ must be \d+, the elements per partition of Tensor\(mlp_gate_up_sbuf_fp32",
        "suite",
        "the kernel breaks .ap's documented rule: mlp_tkg's gate/up bias step calls "
        "TensorView(output_tile).slice(...).get_view() on a view that is itself an .ap view of the fused "
        "[T, 2I] buffer, so TensorView derives strides from the view's shape and asks for "
        "pattern=[[I, T], [1, I]]; the NKI access-pattern guide says .ap addresses the storage and its partition "
        "step must be the storage's elements per partition (2I), and older releases forbid .ap on an .ap view "
        "(docs/timing.md, 'Not timed'). The same configurations stop on trn2",
    ),
    (
        r"test_attn_blk_\w+\[.*(weight scale for row quantization, expected \(128, \d+\), got \(128, 3\)"
        r"|The size of tensor a \(\d+\) must match the size of tensor b \(3\))",
        "suite",
        "for quantized configurations test_attention_block_tkg.py:557-558 builds the QKV weight scale as one "
        "value per projection, broadcast to (128, 3); the qkv kernel's row quantization asserts a per-column "
        "(128, I) scale, and the test's torch golden fails broadcasting the same (128, 3) against the I columns",
    ),
    (
        r"test_attn_blk_\w+\[[^\]]*-bfloat16-1-\d-[^\]]*\].*Validation failed for \[[^\]]*X_out",
        "suite",
        "STATIC fp8 quantization (the '-bfloat16-1-' field) with a quantized KV cache: every element passes the "
        "allclose check, only the cosine >= 0.99 check fails (0.989 on [MODEL_WIP_OPTIMAL_8-16-...], 0.97-0.99 "
        "per rank with KV data parallelism). The fp32 golden never rounds the activations to fp8 before the fp8 "
        "QKV matmul, which the kernel must do; the near-argmax softmax of these configurations turns that into "
        "whole heads whose top-2 scores nearly tie picking the other key. The golden with only that rounding "
        "added misses the same check on the same 7 of 8 ranks; the wrong heads spread over every rank and batch "
        "group, not whole KV-parallel blocks as a collective fault would",
    ),
    (
        r"test_attn_blk_model\[[^\]]*-bfloat16-1-2-[^\]]*-True-default-[^\]]*\].*Validation failed for \['K_cache'\]",
        "suite",
        "STATIC fp8 QKV with a quantized KV cache: only the new token's K row misses the allclose check (atol 16, "
        "rtol 0.07, every element must pass), in 7, 25 and 49 elements for batch 1, 8 and 16, all among the few the "
        "golden leaves unsaturated by fp8's 240 (109 of 128 saturate in batch 1); V and X_out pass, and so does the "
        "sibling without quantization. The fp32 golden skips roundings the kernel does by design: bf16 after the "
        "RMSNorm and after the input scale, fp8 before the QKV matmul, bf16 after it, and bf16 at each of RoPE's "
        "four products and two sums (RoPE_sbuf computes in the tile's bf16; V takes no RoPE). With only the fp8 "
        "rounding added to the golden (wrapping the suite's torch reference, nothing in nkisim changed) 2, 12 and "
        "22 elements miss; with all of them, 0-2; with the two LNC shards' halves of H also summed in bf16, as the "
        "kernel does, all five pass the suite's own validation",
    ),
    (
        r"KeyError: 'mask_out_hbm'",
        "suite",
        "test_gen_mask_tkg.py:422 reads kernel_input['mask_out_hbm'] while its input generator (line 363) names the "
        "key 'mask_out_hbm.must_alias_input' (nki-library commit d2ad3a5 changed only the reader); the KeyError is "
        "raised in the test's output descriptor before any simulation. With the key looked up under either name, "
        "all 117 TestGenMaskTkg tests pass on trn3 with rtol=atol=0",
    ),
    (
        r"mlp\.py\W+line \d+.*IndentationError|IndentationError: unexpected indent"
        r"|core\.mlp\.test_mlp_(cte|tkg): collection failure"
        r"|experimental\.transformer\.test_transformer_tkg: collection failure",
        "suite",
        "the checkout's src/nkilib_src/nkilib/core/mlp/mlp.py does not parse (a docstring closed too early, "
        "nki-library commit d2ad3a5), so every test that imports it fails to collect (test_transformer_tkg.py "
        "imports it through experimental/transformer/transformer_tkg.py)",
    ),
    (
        r"The size of tensor a \(1280\) must match the size of tensor b \(3\)",
        "suite",
        "the test's golden fails: test_attention_block_tkg.py:1133 runs the torch reference before the kernel, and "
        "its QKV step (core/qkv/qkv_tkg_torch.py:166) cannot broadcast this configuration's tensors; nkisim "
        "never runs",
    ),
    (
        r"experimental\.subkernels\.test_topk_reduce: collection failure"
        r"|No module named 'nkilib_src\.nkilib\.experimental\.subkernels'",
        "suite",
        "the test imports nkilib_src.nkilib.experimental.subkernels, a package the checkout does not contain "
        "(nki-library commit d2ad3a5 has no src/nkilib_src/nkilib/experimental/subkernels)",
    ),
    (
        r"core\.qkv\.test_qkv_tkg: collection failure|name 'Platforms' is not defined",
        "suite",
        "test_qkv_tkg.py uses Platforms in a decorator (line 929) without importing it (nki-library commit "
        "d2ad3a5), so the file raises NameError when collected",
    ),
    (
        r"test_router_topk_sweep\[\d+-8192-128-8-sigmoid-True-True-False-True-0-1-False-False-True-False\]",
        "suite",
        "a tie the fp32 reference breaks: the kernel picks its top 8 with max8/nc_find_index8 on the bf16 sigmoid "
        "affinities, where experts 21 and 53 of token 205 both round to 0.50390625, and nc_find_index8 returns the "
        "first occurrence (21); the golden sorts the fp32 logits, where 53 is larger (the test draws T at random "
        "for this configuration: seen with T=780 on trn2 and T=659 on trn3, re-run on trn3 with T pinned to 659, "
        "where token 205 is the only one of 659 whose experts differ, 21 for 53, both bf16 logits 0.50390625)",
    ),
    (
        r"fp8_kv_cache_quantization\[.*Validation failed for \['[kv]_cache'\]",
        "suite",
        "one fp8 step at rounding ties the golden does not model: the kernel rounds Q/K/V to bf16 in SBUF, then "
        "multiplies by reciprocal(scale) into float8_e4m3, while the golden divides the float32 product by the "
        "scale. With scale 2.5 many bf16 values land on a tie between two fp8 values. Checked on a failing draw "
        "(the test's generator is a default argument shared by every test in the process, so its data depend on "
        "which tests ran before): every v_cache element equals bf16(v) * f32(1/2.5) rounded to fp8; 4,271 of "
        "131,072 differ from the golden by one fp8 step, 1,061 of them by more than the 10% tolerance",
    ),
    (
        # not MX weights (an x4 dtype): the near-ties were measured with bfloat16 and float8 weights
        r"test_moe_block_kernel_model\[(?!.*_x4')(.*_ae-[01]_.*_rd-bfloat16)\]: .*Validation failed for \['out'\]$",
        "suite",
        "the golden routes each token on the float32 logits of its float32 RMSNorm output; the kernel, with "
        "router_mm_dtype=bfloat16 (these tests' rd-bfloat16), rounds that output to bfloat16 for the router matmul "
        "(moe_block_tkg.py: router_in) and picks the top k of the float32 logits of the rounded input (max8, "
        "nc_find_index8). Where a token's k-th and (k+1)-th experts are nearer than the rounding moves them, the "
        "two pick different experts and that token's output differs wholly. Measured by saving the kernel's "
        "router input: on [ae-0_ba-4_sq-4_hi-3072_ha-2880_im-720_..._wd-bfloat16] it equals bfloat16(the golden's "
        "RMSNorm output) in all 49,152 elements, and for token 11 the golden's 4th and 5th experts, 20 and 48, "
        "are 8.8e-5 apart while rounding moves their difference by -4.6e-4, so the kernel picks 48; on "
        "[ae-1_ba-1024_sq-1_hi-4096_ha-None_im-192_..._wd-float8_e4m3] it differs from bfloat16(golden) in 73 "
        "of 4,194,304 elements, by one bfloat16 step. Each of the 34 failures of trn2's second core/moe_block "
        "run fails when run alone and passes when the golden routes the differing tokens as the kernel does (31 "
        "by exchanging one token's k-th and (k+1)-th experts, gaps of 6e-6 to 3e-3 relative; 3 by the top k "
        "computed from the kernel's own router input). The nine failures of earlier runs (all-expert mode, 1 to "
        "4 local experts) were checked by saving both outputs: one to three tokens differ in each, each with "
        "its k-th and (k+1)-th experts swapped or tied once rounded to bfloat16, and every other token is within "
        "0.58% of the golden. The suite's generator is shared by the tests of a process, so whether a test's "
        "draw meets such a near-tie depends on the tests run before it",
    ),
    (
        r"test_moe_block_kernel_unit\[ln-2_ae-0_ba-1_sq-[14]_hi-3072_ha-(None|2880)_im-(192|384)_.*"
        r"_wd-\[\('float(4_e2m1fn|8_e4m3fn)_x4'"
        r".*Validation failed for \['out'\]$",
        "suite",
        "the kernel multiplies never-written memory by zero on purpose: down_projection_mx_shard_H.py (nki-library "
        "commit d2ad3a5) says that when I % 512 != 0 'the final I512 tile of inter_sb will contain garbage', which "
        "nc_matmul_mx reads on all 128 partitions, and that the last tile of the weights and their scales is "
        "memset so that 'the garbage does not matter'. Here I = 384, so partitions 96-127 of that tile are never "
        "written; with I = 192, partitions 48-127 (nkisim reports it: uninitialized-read at "
        "gate_up_projection_mx_shard_H.py:446, used by quantize_mx at down_projection_mx_shard_H.py:76). New "
        "on-chip memory holds NaN in nkisim, as in nki.simulate, which fills new float allocations with NaN, and "
        "NaN x 0 is NaN: every output element is NaN (checked by saving the outputs of the I = 192 case, 3,072 "
        "of 3,072, and of the 4-token I = 384 case, 12,288 of 12,288). On hardware the result depends on what "
        "SBUF held before (finite values give 0). Seen with MXFP4 and MXFP8 weights, 1 and 4 tokens",
    ),
    (
        r"test_moe_block_kernel_model\[.*_wd-\[\('float(4_e2m1fn|8_e4m3fn)_x4'.*_bi-0_.*"
        r"InferenceException: 'NoneType' object has no attribute 'dtype'$",
        "suite",
        "the kernel's MX selective-expert path needs a gate/up bias and the model configuration gives none (bi-0): "
        "gate_up_projection_mx_shard_H.py:325 (nki-library commit d2ad3a5), reached from moe_block_tkg.py:316 "
        "through selective_expert_mx_impl.py:313, allocates the bias tile with dtype=gate_up_bias.dtype and "
        "gate_up_bias is None; the AttributeError is the kernel's own Python, before its first bias instruction",
    ),
    (
        r"test_moe_block_kernel_model\[.*_im-360_.*_wd-\[\('float4_e2m1fn_x4'.*MX4 MLP Proj requires I512 tile "
        r"remainder \(360\) to be divisible by 32",
        "suite",
        "a model configuration the kernel rejects: its I = 360 leaves an I512-tile remainder of 360, and "
        "projection_mx_constants.py:109 (nki-library commit d2ad3a5) kernel_asserts that the remainder be a "
        "multiple of 32 (_q_width x _q_height) for MXFP4 quantization; the test expects the kernel to run",
    ),
    (
        r"test_moe_block_kernel_model\[MODEL_WIP_OPTIMAL_ln-2_ae-1_.*_hi-3072_ha-2880_im-2880_.*"
        r"_wd-\[\('float4_e2m1fn_x4'.*Validation failed for \['out'\]$",
        "suite",
        "the all-expert MX kernel quantizes partitions it never writes: gate_up_projection_mx.py:285 (nki-library "
        "commit d2ad3a5) pads the last intermediate tile's partition count to a size quantize_mx takes ('Extra "
        "zero-padded partitions are harmless: downstream weight is zero-padded') but writes no zeros there. With "
        "I = 2880 the tile's last 320 intermediate values fill 80 partitions, padded to 96, so partitions 80-95 "
        "are never written (nkisim reports it: uninitialized-read at gate_up_projection_mx.py:285, and at "
        "down_projection_mx.py:349 for nc_matmul_mx). They hold NaN in nkisim, as in nki.simulate, and NaN x 0 "
        "is NaN. Checked by saving the outputs of [ba-4_sq-4_..._le-1]: all 49,152 elements are NaN, where the "
        "golden is all zeros (no token picks the one local expert). On hardware the result depends on what SBUF "
        "held before",
    ),
    (
        r"test_moe_block_kernel_model\[MODEL_WIP_OPTIMAL_ln-2_ae-1_.*_hi-(7168|4096)_ha-None_im-(2048|1536)_.*"
        r"_wd-\[\('float8_e4m3fn_x4'.*Validation failed for \['out'\]$",
        "suite",
        "the test's tolerance is below its golden's own MX quantization error: the all-expert MXFP8 kernel "
        "quantizes the hidden state and the intermediate to MXFP8, and the golden (moe_tkg_torch.py "
        "_moe_tkg_mx_ref at nki-library commit d2ad3a5) quantizes them too, each with its own rounding, then "
        "compares the largest difference with 5% of the largest output. Measured on "
        "[ba-4_sq-4_hi-4096_..._le-1], with the test's MX weights drawn from a fixed seed (it draws them before "
        "seeding, so each run differs) and the golden run a second time without its activation quantization: "
        "the golden is 5.1-5.3% RMS per routed token from that unquantized result (largest difference 5.7% of the "
        "largest output), nkisim 4.5% (4.4%), and the two 4.9-5.2% apart (5.7%). On "
        "[ba-256_..._hi-7168_..._le-2] both route the same 16 tokens, each 4-6% RMS apart, failing at 5.49%; the "
        "same configuration with MXFP4 weights passes at 4.64%",
    ),
    (
        # the recorded message stops inside the signature; the reproduction ends "got an unexpected keyword
        # argument 'weight_dtype'"
        r"test_moe_cte_unified\[.*_wdt-\[\('float(4_e2m1fn|8_e4m3fn|8_e5m2)_x4'.*cannot bind inputs to moe_cte\(",
        "suite",
        "the test calls the unified moe_cte kernel with an argument it does not take: for MX weights "
        "test_moe_cte_unified.py builds its inputs with test_utils.build_moe_bwmm_mx_cte (nki-library commit "
        "d2ad3a5), which adds 'weight_dtype' for the blockwise MX kernels' signatures, and simulation_setup.py:92 "
        "passes every input as a keyword; moe_cte (moe_cte.py:253) has no weight_dtype parameter, so binding the "
        "call fails before the kernel runs, as it would in any Python call",
    ),
    (
        r"test_moe_tkg_mx\[.*InferenceException: 'Tensor' object has no attribute 'base_tensor'$",
        "suite",
        "the test calls moe_tkg's MX paths with plain tensors where they expect nkilib TensorViews: "
        "gate_up_projection_mx.py:354 (all-expert, via all_expert_mx_impl.py:772) and "
        "gate_up_projection_mx_shard_H.py:282 (selective-expert, via selective_expert_mx_impl.py:313) at "
        "nki-library commit d2ad3a5 read weight.base_tensor, an attribute of nkilib's TensorView "
        "(core/utils/tensor_view.py) that NKI's tensor does not have (its documented attributes: buffer, dtype, "
        "name, ndim, offset, reinterpret_cast, shape, size, strides). The moe_block tests, whose wrapper passes "
        "TensorView(weights).reinterpret_cast(mx_dtype), reach the same code; test_moe_tkg.py passes the "
        "uint16/uint32 weight arrays as they are",
    ),
    (
        r"test_moe_bwmm_mx_cte_unit\[2-3072-(1024-384-128-256-2-.*-True-None|4096-384-2-256-2-.*-False-2)\]"
        r".*Validation failed for \['output'\]$",
        "suite",
        "the same never-written partitions the kernel multiplies by zero on purpose (down_projection_mx_shard_H.py at "
        "nki-library commit d2ad3a5: when I % 512 != 0 'the final I512 tile of inter_sb will contain garbage'), "
        "here in the block-sharded MX CTE kernel with I = 384: partitions 96-127 of its up-projection tile "
        "bfloat16[128, 1024] are never written (nkisim reports it: uninitialized-read at "
        "bwmm_shard_on_block_mx.py:1206, used by quantize_mx at down_projection_mx_shard_H.py:76), and NaN x 0 "
        "is NaN. Checked by saving the outputs of the MXFP4 (uint16 weights) case: all 3,145,728 elements of the "
        "first core's accumulation are NaN; the second's, which the golden holds as zeros, are zeros; and of the "
        "4,096-token case with two static blocks: all 12,582,912 of the first core's are NaN, the second's zeros",
    ),
    (
        r"test_moe_bwmm_mx_cte_unit\[2-3072-10240-384-128-.*Timeout \(?>",
        "timeout",
        "the suite's generate_stabilized_mx_data (test/integration/nkilib/utils/tensor_generators.py at "
        "d2ad3a5) loops in Python over every 8x4 scaling block (11.5 us a block, measured here); this "
        "configuration's hidden states and gate/up and down weights (128 experts, H 3072, I 384, 10,240 "
        "tokens) hold 15.1 million blocks, about 174 s before the kernel runs, which then simulates the MX "
        "matmuls of all 128 experts. Sampled with py-spy for 420 s (the dtype0 member alone, an nki-library run "
        "on the other core), 4,111 samples: all of them in pytest's start or the suite's input generation, "
        "none in a kernel",
    ),
    (
        r"test_moe_bwmm_mx_(cte|shard_I)_unit\[.*Timeout \(?>",
        "timeout",
        "the suite's generate_stabilized_mx_data (test/integration/nkilib/utils/tensor_generators.py at d2ad3a5) "
        "draws the MX weights in a Python loop over every 8x4 scaling block before the kernel runs. Sampled with "
        "py-spy for 120 s in both workers of a trn3 core/moe run (-n 2) while two such tests ran: 2,219 of one "
        "worker's 2,294 samples were that generator; of the other's 2,257, 822 the generator, 248 the suite's "
        "golden and about 580 nkisim's MX matmul (nc_matmul_mx, its dequantization, bfloat16 widening and the "
        "PSUM accumulate)",
    ),
    (
        r"Timeout \(?>",
        "timeout",
        "the test exceeded the per-test time limit (--timeout, these runs' own: the suite sets none) on a 2-core "
        "machine, most runs with a second worker or run beside it; not a wrong result. Sampled with py-spy: in "
        "rmsnorm-quant [32768, 8192] nkisim is 24% of the test's time, the suite's input generator, golden and "
        "np.isclose the rest; in the attention-block tests (trn2, experimental/transformer, one worker, 150 s) the "
        "suite's torch golden and reference held 78% of the samples and nkisim about 15%; in the top-k sweeps max8 "
        "and the top-8 matching were most of it until they became one compiled pass each "
        "(test_topk_sweep[1024-5-4058-2048-2]: 148 s, then 86 s)",
    ),
]


def triage(row: dict[str, str]) -> tuple[str, str]:
    text = f"{row['id']}: {row['message']}"
    for pattern, verdict, why in TRIAGE:
        if re.search(pattern, text):
            return verdict, why
    return "untriaged", re.sub(r"\d+", "#", row["message"])  # one group per message shape


def skip_reason(row: dict[str, str]) -> str:
    """Why a skipped test was skipped (:data:`SKIP_REASONS`, else the suite's own message)."""
    for pattern, reason in SKIP_REASONS:
        if re.search(pattern, row["message"]):
            return reason
    return "suite: " + re.sub(r"\d+", "#", row["message"] or "no reason given")
