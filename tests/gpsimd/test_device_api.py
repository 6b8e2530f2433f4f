"""The device-side API: element, stream and TCM accessors, tcm_malloc, ATen subset, printf, coherence."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nkisim import gpsimd
from tests.gpsimd.kernels import library, tcm_blocks

F32 = np.float32


def run1(kernel, *inputs, **options):
    return gpsimd.run(library("api_ops", kernel, **options), list(inputs))


# -- element accessor ----------------------------------------------------------------------


def test_element_accessor_2d_indices() -> None:
    def transpose_add(ctx, t):
        out = ctx.get_dst_tensor()
        a, o = t.accessor(), out.accessor()
        rows, cols = t.sizes()
        for i in range(rows):
            for j in range(cols):
                o[i, j] = a[i, j] + a[rows - 1 - i, j]
        return out

    x = np.arange(12, dtype=F32).reshape(3, 4)
    assert np.array_equal(run1(transpose_add, x).outputs, x + x[::-1])


@pytest.mark.parametrize("index", [5, -1, (0, 0)])
def test_element_accessor_out_of_bounds(index: object) -> None:
    def reach(ctx, t):
        return t.accessor()[index]

    with pytest.raises(gpsimd.GpsimdBoundsError) as info:
        run1(reach, np.zeros(5, F32))
    text = str(info.value)
    assert "test_device_api.py:" in text and "[core 0]" in text and "outside the tensor's sizes [5]" in text


def test_kernel_reading_tensor_as_numpy_is_refused() -> None:
    def sneaky(ctx, t):
        np.asarray(t)

    with pytest.raises(gpsimd.GpsimdUndefinedBehavior, match="through accessor"):
        run1(sneaky, np.zeros(5, F32))


def test_python_error_in_kernel_names_the_line() -> None:
    def broken(ctx, t):
        return 1 / 0

    with pytest.raises(gpsimd.GpsimdError) as info:
        run1(broken, np.zeros(5, F32))
    assert "test_device_api.py:" in str(info.value) and "ZeroDivisionError" in str(info.value)


# -- stream accessors ----------------------------------------------------------------------


def stream_square(ctx, t):
    out = ctx.get_dst_tensor()
    r, w = t.read_stream(), out.write_stream()
    for _ in range(t.numel()):
        v = r.read()
        w.write(v * v)
    r.close()
    w.close()
    return out


def test_streams_compute_and_flush_on_close() -> None:
    x = np.linspace(-3, 3, 50, dtype=F32)
    assert np.allclose(run1(stream_square, x).outputs, x * x)


def test_write_stream_flushes_only_on_close() -> None:
    def peek(ctx, t):
        out = ctx.get_dst_tensor()
        w = out.write_stream()
        for _ in range(t.numel()):
            w.write(5.0)
        out.set_accessor_coherence_policy(gpsimd.CoherencyEnforcer.Policy.INCOHERENT_QUIET)
        before = out.accessor()[0]
        w.close()
        ctx.printf("%f %f\n", before, out.accessor()[0])
        return out

    assert run1(peek, np.zeros(3, F32)).stdout == "0.000000 5.000000\n"


def test_write_stream_flushed_when_the_kernel_ends() -> None:
    def unclosed(ctx, t):
        out = ctx.get_dst_tensor()
        w = out.write_stream()
        for _ in range(t.numel()):
            w.write(2.0)
        return out

    assert np.array_equal(run1(unclosed, np.zeros(4, F32)).outputs, np.full(4, 2.0, F32))


@pytest.mark.parametrize(
    ("body", "rule"),
    [
        ("r = t.read_stream()\n    [r.read() for _ in range(t.numel() + 1)]", "read() past the end"),
        ("w = ctx.get_dst_tensor().write_stream()\n    [w.write(1.0) for _ in range(t.numel() + 1)]", "write() past"),
        ("r = t.read_stream()\n    r.close()\n    r.read()", "read() on a closed stream"),
        ("r = t.read_stream()\n    r.close()\n    r.close()", "already closed"),
    ],
)
def test_stream_misuse(body: str, rule: str) -> None:
    namespace: dict[str, object] = {}
    exec(compile(f"def k(ctx, t):\n    {body}\n", "stream_kernel.py", "exec"), namespace)
    with pytest.raises(gpsimd.GpsimdStreamError) as info:
        run1(namespace["k"], np.zeros(4, F32))
    assert rule in str(info.value) and "stream_kernel.py:" in str(info.value) and "[core 0]" in str(info.value)


def test_fifth_stream_runs_at_standard_accessor_speed() -> None:
    """Hand-computed: 4 streams get TCM buffers and cost stream cycles; the 5th costs element cycles."""
    flags: list[bool] = []

    def five(ctx, t):
        streams = [t.read_stream() for _ in range(5)]
        flags.extend(s.fast for s in streams)
        for s in streams:
            s.read()
        for s in streams:
            s.close()
        return ctx.get_dst_tensor()

    result = run1(five, np.zeros(4, F32))
    assert flags == [True, True, True, True, False]
    g = result.profile.hw.gpsimd_cores
    by_op = {r.opcode: 0.0 for r in result.profile.instructions}
    for r in result.profile.instructions:
        by_op[r.opcode] += r.duration_ns
    assert by_op["stream_access"] == pytest.approx(4 * g.stream_access_cycles / 1.4)
    assert by_op["element_access"] == pytest.approx(g.element_access_cycles / 1.4)


def test_streams_share_the_tcm_pool() -> None:
    """A 16 KB tcm_malloc leaves no room for a stream's 4 KB buffer: the stream is slow."""
    seen: list[bool] = []

    def crowded(ctx, t):
        big = ctx.tcm_malloc(16 * 1024)
        s = t.read_stream()
        seen.append(s.fast)
        s.close()
        ctx.tcm_free(big)
        s2 = t.read_stream()
        seen.append(s2.fast)
        s2.close()
        return ctx.get_dst_tensor()

    run1(crowded, np.zeros(4, F32))
    assert seen == [False, True]


# -- coherence -----------------------------------------------------------------------------


def mixed(ctx, t):
    out = ctx.get_dst_tensor()
    w = out.write_stream()
    out.accessor()
    w.close()
    return out


def test_mixing_accessors_is_an_error_under_coherent_policy() -> None:
    with pytest.raises(gpsimd.GpsimdCoherenceError) as info:
        run1(mixed, np.zeros(4, F32))
    assert "not coherent" in str(info.value) and "test_device_api.py:" in str(info.value)


@pytest.mark.parametrize("policy", ["INCOHERENT_VERBOSE", "INCOHERENT_QUIET"])
def test_incoherent_policies(policy: str) -> None:
    def relaxed(ctx, t):
        out = ctx.get_dst_tensor()
        out.set_accessor_coherence_policy(gpsimd.CoherencyEnforcer.Policy[policy])
        w = out.write_stream()
        out.accessor()
        w.close()
        return out

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run1(relaxed, np.zeros(4, F32))
    assert len(caught) == (1 if policy == "INCOHERENT_VERBOSE" else 0)


def test_many_readers_are_coherent() -> None:
    def readers(ctx, t):
        a, b = t.read_stream(), t.read_stream()
        a.read(), b.read()
        a.close(), b.close()
        return ctx.get_dst_tensor()

    run1(readers, np.zeros(4, F32))


# -- TCM -----------------------------------------------------------------------------------


def test_tcm_pool_is_16kb_and_returns_none_when_exhausted() -> None:
    got: list[object] = []

    def alloc(ctx, t):
        a = ctx.tcm_malloc(8 * 1024)
        b = ctx.tcm_malloc(8 * 1024)
        c = ctx.tcm_malloc(4)
        got.extend([a.size, b.size, c])
        ctx.tcm_free(a)
        d = ctx.tcm_malloc(4 * 1024, gpsimd.kHalf)
        got.extend([d.size, d.dtype])
        return ctx.get_dst_tensor()

    run1(alloc, np.zeros(4, F32))
    assert got == [2048, 2048, None, 2048, np.dtype(np.float16)]


def test_tcm_free_of_a_foreign_buffer_is_undefined() -> None:
    def bad_free(ctx, t):
        ctx.tcm_free(np.zeros(4, F32))

    with pytest.raises(gpsimd.GpsimdUndefinedBehavior) as info:
        run1(bad_free, np.zeros(4, F32))
    assert "tcm_free" in str(info.value) and "[core 0]" in str(info.value)


def test_double_free_is_undefined() -> None:
    def twice(ctx, t):
        b = ctx.tcm_malloc(64)
        ctx.tcm_free(b)
        ctx.tcm_free(b)

    with pytest.raises(gpsimd.GpsimdUndefinedBehavior, match="already freed"):
        run1(twice, np.zeros(4, F32))


@pytest.mark.parametrize(
    ("offset", "count", "error", "rule"),
    [
        (8, 4, gpsimd.GpsimdBoundsError, "reach past the end of the tensor"),
        (0, 300, gpsimd.GpsimdBoundsError, "do not fit the 256-element TCM buffer"),
        (-1, 2, gpsimd.GpsimdBoundsError, "negative offset"),
    ],
)
def test_tensor_to_tcm_bounds(offset: int, count: int, error: type, rule: str) -> None:
    def copy(ctx, t):
        buf = ctx.tcm_malloc(1024)
        t.tcm_accessor().tensor_to_tcm(buf, offset, count)

    with pytest.raises(error) as info:
        run1(copy, np.zeros(10, F32))
    assert rule in str(info.value) and "test_device_api.py:" in str(info.value)


def test_tcm_transfer_needs_a_tcm_buffer_of_the_tensor_dtype() -> None:
    def not_tcm(ctx, t):
        t.tcm_accessor().tensor_to_tcm(np.zeros(4, F32), 0, 4)

    def wrong_dtype(ctx, t):
        t.tcm_accessor().tensor_to_tcm(ctx.tcm_malloc(64, gpsimd.kInt), 0, 4)

    with pytest.raises(gpsimd.GpsimdUndefinedBehavior, match="not TCM memory"):
        run1(not_tcm, np.zeros(4, F32))
    with pytest.raises(gpsimd.GpsimdArgumentError, match="TCM buffer of int32 for a float32 tensor"):
        run1(wrong_dtype, np.zeros(4, F32))


@settings(max_examples=25, deadline=None)
@given(
    shape=st.lists(st.integers(1, 40), min_size=1, max_size=3),
    dtype=st.sampled_from([np.float32, np.float16, np.int32, np.int16, np.int8]),
    block=st.sampled_from([7, 64, 1024]),
)
def test_tcm_blocks_match_numpy(shape: list[int], dtype: type, block: int) -> None:
    """Any shape (flattened offsets), dtype and block size: the TCM copy-negate-copy equals numpy."""
    rng = np.random.default_rng(len(shape) * block)
    x = (rng.standard_normal(shape) * 20).astype(dtype)

    def kernel(ctx, t):
        tcm_blocks(ctx, t, 0, t.numel(), lambda b: np.negative(b, out=b), block=block)
        return ctx.get_dst_tensor()

    assert np.array_equal(run1(kernel, x).outputs, np.negative(x))


# -- factories and ATen --------------------------------------------------------------------


def test_factory_functions() -> None:
    seen = {}

    def factories(ctx, t):
        seen["zeros"] = ctx.zeros([2, 3], gpsimd.kInt)
        seen["ones"] = ctx.ones([4], gpsimd.kHalf)
        seen["full"] = ctx.full([2], 7.5, gpsimd.kFloat)
        seen["eye"] = ctx.eye(3, 2, gpsimd.kFloat)
        seen["empty"] = ctx.empty(5, gpsimd.kByte)
        return ctx.get_dst_tensor()

    run1(factories, np.zeros(1, F32))
    assert seen["zeros"].sizes() == (2, 3) and seen["zeros"].dtype == np.int32
    assert np.array_equal(seen["ones"]._data, np.ones(4, np.float16))
    assert np.array_equal(seen["full"]._data, [7.5, 7.5])
    assert np.array_equal(seen["eye"]._data, np.eye(3, 2))
    assert seen["empty"].numel() == 5


def test_factory_dtype_is_checked() -> None:
    def bad(ctx, t):
        ctx.zeros([2], np.float64)

    with pytest.raises(gpsimd.GpsimdArgumentError, match="float64"):
        run1(bad, np.zeros(1, F32))


ATEN_CASES = {
    "abs": (lambda c, a, b: c.abs(a), lambda a, b: np.abs(a)),
    "exp": (lambda c, a, b: c.exp(a), lambda a, b: np.exp(a)),
    "log2": (lambda c, a, b: c.log2(c.abs(a)), lambda a, b: np.log2(np.abs(a))),
    "floor": (lambda c, a, b: c.floor(a), lambda a, b: np.floor(a)),
    "sin": (lambda c, a, b: c.sin(a), lambda a, b: np.sin(a)),
    "add_alpha": (lambda c, a, b: c.add(a, b, alpha=2.0), lambda a, b: a + 2 * b),
    "sub_scalar": (lambda c, a, b: c.sub(a, 1.5), lambda a, b: a - 1.5),
    "mul": (lambda c, a, b: c.mul(a, b), lambda a, b: a * b),
    "div": (lambda c, a, b: c.div(a, gpsimd.Scalar(4.0)), lambda a, b: a / 4),
    "pow_ts": (lambda c, a, b: c.pow(a, 2.0), lambda a, b: a**2),
    "pow_st": (lambda c, a, b: c.pow(2.0, a), lambda a, b: 2.0**a),
    "pow_tt": (lambda c, a, b: c.pow(c.abs(a), b), lambda a, b: np.abs(a) ** b),
    "clamp": (lambda c, a, b: c.clamp(a, -0.5, 0.5), lambda a, b: np.clip(a, -0.5, 0.5)),
}


@pytest.mark.parametrize("name", list(ATEN_CASES))
def test_aten_subset(name: str) -> None:
    device, reference = ATEN_CASES[name]
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(16).astype(F32), rng.standard_normal(16).astype(F32)

    def kernel(ctx, x, y):
        return device(ctx, x, y)

    out = gpsimd.run(library("aten_ops", kernel, shape=lambda x, y: gpsimd.zeros(x.sizes(), x.dtype)), [a, b])
    assert np.allclose(out.outputs, reference(a, b), rtol=1e-5, equal_nan=True)


def test_aten_out_variant_writes_the_destination() -> None:
    def kernel(ctx, x):
        return ctx.mul_out(ctx.get_dst_tensor(), x, x)

    x = np.arange(5, dtype=F32)
    assert np.array_equal(run1(kernel, x).outputs, x * x)


def test_bitwise_ops_integral_only() -> None:
    def kernel(ctx, x):
        return ctx.bitwise_not(ctx.bitwise_or(ctx.bitwise_and(x, 6), 1))

    x = np.arange(10, dtype=np.int32)
    assert np.array_equal(run1(kernel, x).outputs, ~((x & 6) | 1))
    with pytest.raises(gpsimd.GpsimdArgumentError, match="integral tensors"):
        run1(kernel, x.astype(F32))


def test_no_broadcasting() -> None:
    def kernel(ctx, x, y):
        return ctx.add(x, y)

    op = library("bcast_ops", kernel, shape=lambda x, y: gpsimd.zeros(x.sizes(), x.dtype))
    with pytest.raises(gpsimd.GpsimdBroadcastError) as info:
        gpsimd.run(op, [np.ones((2, 3), F32), np.ones((1, 3), F32)])
    assert "does not broadcast" in str(info.value) and "test_device_api.py:" in str(info.value)


def test_unknown_api_names_are_reported() -> None:
    def kernel(ctx, x):
        return ctx.matmul(x, x)

    with pytest.raises(gpsimd.GpsimdError, match="not part of the GPSIMD device API"):
        run1(kernel, np.ones(2, F32))


def test_fill_() -> None:
    def kernel(ctx, x):
        return ctx.get_dst_tensor().fill_(gpsimd.Scalar(3))

    assert np.array_equal(run1(kernel, np.zeros(4, F32)).outputs, np.full(4, 3.0, F32))


# -- printf --------------------------------------------------------------------------------


def test_printf_is_buffered_and_c_formatted() -> None:
    def kernel(ctx, x):
        acc = x.accessor()
        ctx.printf("n=%zu first=%.2f %s %d%%\n", x.numel(), acc[0], "ok", 5)
        return ctx.get_dst_tensor()

    assert run1(kernel, np.array([1.25, 2], F32)).stdout == "n=2 first=1.25 ok 5%\n"


def test_printf_ring_buffer_keeps_the_newest_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_RT_GPSIMD_STDOUT_QUEUE_SIZE_BYTES", "16")

    def kernel(ctx, x):
        for i in range(10):
            ctx.printf("line %d\n", i)
        return ctx.get_dst_tensor()

    everything = "".join(f"line {i}\n" for i in range(10))
    assert run1(kernel, np.zeros(1, F32)).stdout == everything[-16:] == "7\nline 8\nline 9\n"


def test_printf_disabled_still_costs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_RT_GPSIMD_STDOUT_QUEUE_SIZE_BYTES", "0")

    def kernel(ctx, x):
        ctx.printf("hello\n")
        return ctx.get_dst_tensor()

    result = run1(kernel, np.zeros(1, F32))
    assert result.stdout == ""
    assert any(r.opcode == "printf" for r in result.profile.instructions)


def test_vector_work_on_tcm_views_is_charged() -> None:
    """Slices, reshapes and transposes of a TCM buffer stay TCM: a ufunc on each costs its SIMD words."""

    def views(ctx, t):
        buf = ctx.tcm_malloc(1024 * 4)
        np.negative(buf[:512], out=buf[:512])  # 32 words
        grid = buf.reshape(32, 32)
        np.add(grid.T, 1, out=grid.T)  # 64 words
        np.multiply(buf[::2], 2, out=buf[::2])  # 32 words
        return ctx.get_dst_tensor().fill_(0.0)

    result = run1(views, np.zeros(1, F32))
    tcm = sum(r.duration_ns for r in result.profile.instructions if r.opcode == "tcm_compute")
    assert tcm == pytest.approx((32 + 64 + 32 + 3 * 3) / 1.4)
