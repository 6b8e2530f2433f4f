"""Rules and cost paths the other GPSIMD test modules do not reach: element loops on TCM and the
stack, registration mistakes, stream and ATen misuse, holes between cores' output parts."""

from __future__ import annotations

import numpy as np
import pytest

from nkisim import gpsimd
from tests.gpsimd.kernels import library, negate_tcm, same_shape, tcm_blocks

F32 = np.float32
CLOCK_GHZ = 1.4  # trn1 GpSimd clock (NKI architecture guide)


def run1(kernel, *inputs, **options):
    return gpsimd.run(library("edge_ops", kernel, **options), list(inputs))


def busy_ns(result: gpsimd.GpsimdResult, opcode: str) -> float:
    return sum(r.duration_ns for r in result.profile.instructions if r.opcode == opcode)


# -- element loops on TCM and on the stack (the C++ tutorial's TCM ReLU loops per element) ----


def test_element_loop_on_a_tcm_buffer_costs_the_tcm_latency_per_access() -> None:
    """Hand count: 100 reads and 100 writes of TCM, 3 cycles each (TCM latency, arch guide)."""

    def loop(ctx, t):
        buf = ctx.tcm_malloc(100 * 4)
        t.tcm_accessor().tensor_to_tcm(buf, 0, 100)
        for i in range(100):
            buf[i] = max(buf[i], 0.0)
        ctx.get_dst_tensor().tcm_accessor().tcm_to_tensor(buf, 0, 100)
        return ctx.get_dst_tensor()

    x = np.linspace(-2, 2, 100, dtype=F32)
    result = run1(loop, x)
    assert np.array_equal(result.outputs, np.maximum(x, 0))
    assert busy_ns(result, "tcm_compute") == pytest.approx(200 * 3 / CLOCK_GHZ)


@pytest.mark.parametrize(("cflags", "cycles"), [((), 1), (("-DSTACK_SIZE=20000",), 40)])
def test_element_loop_on_a_stack_array_costs_its_placement(cflags: tuple[str, ...], cycles: int) -> None:
    """50 scalar writes and 50 reads of a stack array: 1 cycle each locally, 40 in NeuronCore memory."""

    def loop(ctx, t):
        local = ctx.stack_array((50,), np.float32)
        for i in range(50):
            local[i] = float(i)
        total = 0.0
        for i in range(50):
            total += float(local[i])
        return ctx.get_dst_tensor().fill_(total)

    result = run1(loop, np.zeros(1, F32), extra_cflags=cflags)
    assert result.outputs[0] == sum(range(50))
    assert busy_ns(result, "stack_access") == pytest.approx(100 * cycles / CLOCK_GHZ)


def test_fancy_indexed_tcm_reads_are_charged_as_vector_work() -> None:
    """buf[mask] touches 40 fp32 = 3 SIMD words (+ the TCM latency)."""

    def gather(ctx, t):
        buf = ctx.tcm_malloc(64 * 4)
        t.tcm_accessor().tensor_to_tcm(buf, 0, 64)
        picked = buf[np.arange(64) < 40]
        out = ctx.get_dst_tensor()
        out.fill_(float(picked.view(np.ndarray).sum()))
        return out

    result = run1(gather, np.ones(64, F32))
    assert result.outputs[0] == 40.0
    assert busy_ns(result, "tcm_compute") == pytest.approx((3 + 3) / CLOCK_GHZ)


def test_tcm_malloc_of_nothing_is_none_and_freeing_none_is_harmless() -> None:
    def kernel(ctx, t):
        assert ctx.tcm_malloc(0) is None and ctx.tcm_malloc(2, np.float32) is None
        ctx.tcm_free(None)
        return negate_tcm(ctx, t)

    assert np.array_equal(run1(kernel, np.ones(3, F32)).outputs, -np.ones(3, F32))


# -- registration mistakes -------------------------------------------------------------------


def test_stack_size_must_be_positive() -> None:
    with pytest.raises(gpsimd.GpsimdLibraryError) as info:
        gpsimd.Library("zero_stack", extra_cflags=["-DSTACK_SIZE=0"])
    assert str(info.value).startswith("test_edge_cases.py:") and "-DSTACK_SIZE=0 must be positive" in str(info.value)


def test_a_single_flag_string_is_accepted() -> None:
    assert gpsimd.Library("one_flag", extra_cflags="-DSTACK_SIZE=0x5000").stack_size == 0x5000


@pytest.mark.parametrize(
    ("name", "rule"),
    [("not-an-id", "must be an identifier"), ("shape", "clashes with a Library attribute"), ("_x", "clashes")],
)
def test_operator_names(name: str, rule: str) -> None:
    lib = gpsimd.Library("names_ops")
    with pytest.raises(gpsimd.GpsimdLibraryError) as info:
        lib.kernel(name)(negate_tcm)
    assert rule in str(info.value) and str(info.value).startswith("test_edge_cases.py:")


def test_backward_of_an_unknown_operator() -> None:
    lib = gpsimd.Library("bw_ops")
    lib.shape("fwd")(same_shape)
    lib.kernel("fwd")(negate_tcm)
    with pytest.raises(gpsimd.GpsimdLibraryError, match="no operator 'grad' in library 'bw_ops'"):
        lib.backward("fwd", "grad")


def test_run_needs_an_operator_handle() -> None:
    with pytest.raises(gpsimd.GpsimdArgumentError) as info:
        gpsimd.run(negate_tcm, [np.ones(2, F32)])  # the kernel function, not lib.<op>
    assert "run() expects an operator handle lib.<op>, got function" in str(info.value)
    assert str(info.value).startswith("test_edge_cases.py:")


def test_negative_sizes_are_rejected() -> None:
    from nkisim.gpsimd.tensor import check_sizes

    with pytest.raises(gpsimd.GpsimdArgumentError, match=r"has a negative size in \[4, -1\]"):
        check_sizes((4, -1), "the output")


def test_bad_stdout_queue_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_RT_GPSIMD_STDOUT_QUEUE_SIZE_BYTES", "1000")
    with pytest.raises(ValueError, match="must be 0 or a power of two up to 131072"):
        run1(negate_tcm, np.ones(2, F32))


# -- streams and ATen misuse ------------------------------------------------------------------


def test_write_after_close() -> None:
    def kernel(ctx, t):
        out = ctx.get_dst_tensor()
        w = out.write_stream()
        w.write(1.0)
        w.close()
        w.write(2.0)
        return out

    with pytest.raises(gpsimd.GpsimdStreamError) as info:
        run1(kernel, np.zeros(2, F32))
    assert "write() on a closed stream accessor" in str(info.value) and "[core 0]" in str(info.value)


@pytest.mark.parametrize(
    ("second", "rule"),
    [
        ("t.read_stream()", "a read stream on a tensor with a standard accessor or an open write stream"),
        ("t.write_stream()", "a write stream on a tensor with another open accessor"),
    ],
)
def test_a_stream_next_to_an_open_write_stream_is_incoherent(second: str, rule: str) -> None:
    namespace: dict[str, object] = {}
    source = f"def k(ctx, t):\n    w = t.write_stream()\n    {second}\n    return ctx.get_dst_tensor()\n"
    exec(compile(source, "streams.py", "exec"), namespace)
    with pytest.raises(gpsimd.GpsimdCoherenceError) as info:
        run1(namespace["k"], np.zeros(4, F32))
    assert rule in str(info.value) and str(info.value).startswith("streams.py:3:")


def test_an_aten_op_needs_a_tensor() -> None:
    def kernel(ctx, t):
        ctx.add(1.0, 2.0)
        return ctx.get_dst_tensor()

    with pytest.raises(gpsimd.GpsimdArgumentError) as info:
        run1(kernel, np.zeros(2, F32))
    assert "add needs a tensor operand" in str(info.value) and "test_edge_cases.py:" in str(info.value)


def test_an_out_variant_with_other_sizes_does_not_broadcast() -> None:
    def kernel(ctx, t):
        small = ctx.zeros([2], t.dtype)
        ctx.abs_out(small, ctx.ones(t.sizes(), t.dtype))
        return ctx.get_dst_tensor()

    with pytest.raises(gpsimd.GpsimdBroadcastError, match=r"abs_out: result sizes \[2\] differ from \[4\]"):
        run1(kernel, np.zeros(4, F32))


def test_scalar_and_shape_helpers() -> None:
    """The C++ accessors of Scalar and Tensor: to_int, size(d), dim(), scalar_type()."""
    seen: dict[str, object] = {}

    def kernel(ctx, t, s):
        seen.update(
            n=s.to_int(), size=t.size(1), dim=t.dim(), dtype=t.scalar_type(), policy=t.get_accessor_coherence_policy()
        )
        return negate_tcm(ctx, t)

    op = library("helpers_ops", kernel, shape=lambda t, s: gpsimd.zeros(t.sizes(), t.dtype))
    gpsimd.run(op, [np.ones((2, 3), F32), gpsimd.Scalar(7.9)])
    assert seen == {"n": 7, "size": 3, "dim": 2, "dtype": np.dtype(F32), "policy": gpsimd.CoherencePolicy.COHERENT}
    assert repr(gpsimd.Scalar(2)) == "Scalar(2)"


# -- multicore: a hole between two cores' parts -------------------------------------------------


def test_a_hole_between_two_cores_parts_is_reported() -> None:
    """Core 3 skips its first 4 elements: 8 cores x 16 elements of 128, so elements 48..51 stay unwritten."""

    def holey(ctx, t):
        cpu = ctx.get_cpu_id()
        start = cpu * 16 + (4 if cpu == 3 else 0)
        tcm_blocks(ctx, t, start, cpu * 16 + 16, lambda b: None, block=16)
        return ctx.get_dst_tensor()

    with pytest.raises(gpsimd.GpsimdRaceError) as info:
        gpsimd.run(library("hole_ops", holey, multicore=True), [np.ones(128, F32)])
    assert "output elements 48..51 were written by no core" in str(info.value)
    assert "test_edge_cases.py:" in str(info.value)
