"""Each published GPSIMD constant in the generation files, pinned with its public source."""

from __future__ import annotations

import pytest

from nkisim.hw import load_target


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_published_constants(target: str) -> None:
    hw = load_target(target)
    g = hw.gpsimd_cores
    # NKI architecture guides, GpSimd Engine: 8 fully programmable 512-bit vector processors per NeuronCore
    assert g.cores == 8
    assert g.simd_bits == 512
    # 16 fp32, 32 fp16, 64 int8 lanes per instruction (same guide)
    assert (g.lanes(4), g.lanes(2), g.lanes(1)) == (16, 32, 64)
    # TCM: 64 KiB per processor with 3-cycle latency (trainium_inferentia2_arch.rst)
    assert g.tcm_bytes == 64 * 1024
    assert g.tcm_latency_cycles == 3
    # custom-op API reference: tcm_malloc pool of 16 KB; stream accessors take 4 KB each; only 4 fast
    assert g.tcm_pool_bytes == 16 * 1024
    assert g.stream_buffer_bytes == 4 * 1024
    assert g.fast_streams == 4
    # developer guide: stack in local memory up to ~8 KB; -DSTACK_SIZE at most 400 KB; 10 functions per library
    assert g.local_stack_bytes == 8 * 1024
    assert g.max_stack_bytes == 400 * 1024
    assert g.max_functions == 10
    # API reference, printf: NEURON_RT_GPSIMD_STDOUT_QUEUE_SIZE_BYTES is a power of two <= 131072
    assert g.stdout_queue_bytes == 131072


def test_clock_per_generation() -> None:
    """GpSimd clock: 1.4 GHz on Trn1/Inf2, 1.2 GHz on Trn2 and Trn3 (arch guides' frequency tables)."""
    assert load_target("trn1").gpsimd.clock_ghz == 1.4
    assert load_target("trn2").gpsimd.clock_ghz == 1.2
    assert load_target("trn3").gpsimd.clock_ghz == 1.2


def test_derived_per_element_costs_match_the_published_mlp_figures() -> None:
    """docs/gpsimd.md: from 8.10 / 220.74 / 269.94 it/s on 196,608 fp32 ReLU elements per inference."""
    ms = {k: 1000.0 / v for k, v in {"element": 8.10, "tcm": 220.74, "mc": 269.94}.items()}
    relu_tcm_ms = (ms["tcm"] - ms["mc"]) * 8 / 7  # ideal 8x scaling of the ReLU part
    rest_ms = ms["tcm"] - relu_tcm_ms
    elements = 32 * 4096 + 32 * 2048
    tcm_cycles = relu_tcm_ms * 1e6 / elements * 1.4
    element_cycles = (ms["element"] - rest_ms) * 1e6 / elements * 1.4
    g = load_target("trn1").gpsimd_cores
    # element accessor ReLU: a read and a write, plus zeros() and the copy of the returned tensor
    assert 2 * g.element_access_cycles + 2 * g.aten_cycles_per_element == pytest.approx(element_cycles, rel=0.01)
    # TCM ReLU on 1024-element blocks: two transfers and one vector max per block
    per_block = 2 * (g.tcm_dma_setup_cycles + 4096 / g.tcm_dma_bytes_per_cycle) + 64 * g.simd_op_cycles + 3
    assert per_block / 1024 == pytest.approx(tcm_cycles, rel=0.01)


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_estimated_constants(target: str) -> None:
    """The constants nobody publishes, pinned at the values docs/gpsimd.md gives ([estimate] in the TOML)."""
    hw = load_target(target)
    g = hw.gpsimd_cores
    # launch overhead: 2 us on every generation, in cycles of that generation's GpSimd clock
    assert g.launch_overhead_cycles / hw.gpsimd.clock_ghz == pytest.approx(2000.0)
    # one 512-bit vector instruction per cycle; 64-cycle setup per HBM<->TCM transfer
    assert g.simd_op_cycles == 1 and g.tcm_dma_setup_cycles == 64
    # the stack: 1 cycle per element in local memory, 40 in NeuronCore memory ("longer access latency")
    assert (g.local_stack_access_cycles, g.remote_stack_access_cycles) == (1, 40)
    # ATen work on HBM tensors per element, and a printf call ("significantly degrades performance")
    assert (g.aten_cycles_per_element, g.printf_cycles) == (8, 2000)


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_stream_cost_lies_between_tcm_and_element_costs(target: str) -> None:
    """[derived] a stream element costs the TCM latency plus its share of refilling a 4 KB buffer at the
    TCM transfer rate: 3 + (64 + 4096 / 1.22) / 1024 = 6.34 cycles (the TOML rounds to 6.5)."""
    g = load_target(target).gpsimd_cores
    per_fp32 = g.stream_buffer_bytes // 4
    refill = (g.tcm_dma_setup_cycles + g.stream_buffer_bytes / g.tcm_dma_bytes_per_cycle) / per_fp32
    assert g.stream_access_cycles == pytest.approx(g.tcm_latency_cycles + refill, rel=0.05)
    # the API reference orders the accessors: standard slowest, stream in between, TCM fastest
    assert g.element_access_cycles > g.stream_access_cycles > g.tcm_latency_cycles


def test_per_cycle_constants_are_the_same_on_every_generation() -> None:
    """docs/gpsimd.md: calibrated on trn1; trn2 and trn3 differ only in the clock (so in launch cycles)."""
    trn1 = load_target("trn1").gpsimd_cores.model_dump(exclude={"launch_overhead_cycles"})
    for target in ("trn2", "trn3"):
        assert load_target(target).gpsimd_cores.model_dump(exclude={"launch_overhead_cycles"}) == trn1
