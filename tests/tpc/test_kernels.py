"""TPC kernels and intrinsics against numpy formulas written here, in fp32 and bf16, on every generation."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nkisim.tpc as tpc
from nkisim.examples.tpc_relu import AddGlue, ReluBwdGlue, ReluFwdGlue, relu_fwd_kernel
from nkisim.examples.tpc_softmax import RowGlue

DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}


def _data(shape: tuple[int, ...], p: str, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(DTYPES[p])


@pytest.mark.parametrize("p", ["f32", "bf16"])
def test_relu_forward_backward_and_add(p: str) -> None:
    x, g = _data((3, 7, 150), p), _data((3, 7, 150), p, 1)
    np.testing.assert_array_equal(tpc.run(ReluFwdGlue(p), [x]).outputs[0], np.maximum(x, 0))
    np.testing.assert_array_equal(tpc.run(ReluBwdGlue(p), [g, x]).outputs[0], np.where(x > 0, g, 0).astype(x.dtype))
    exact = (g.astype(np.float32) + x.astype(np.float32)).astype(x.dtype)  # one rounding to the element type
    np.testing.assert_array_equal(tpc.run(AddGlue(p), [g, x]).outputs[0], exact)


@pytest.mark.parametrize("p", ["f32", "bf16"])
def test_row_softmax_and_row_sum(p: str) -> None:
    x = _data((9, 200), p)
    xf = x.astype(np.float64)
    e = np.exp(xf - xf.max(axis=1, keepdims=True))
    tol = 1e-6 if p == "f32" else 2**-8
    out = tpc.run(RowGlue("softmax_fwd", p), [x]).outputs[0].astype(np.float64)
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=tol, atol=tol / 10)
    total = tpc.run(RowGlue("row_sum", p), [x], outputs=[((9, 1), x.dtype)]).outputs[0].astype(np.float64)
    np.testing.assert_allclose(total[:, 0], xf.sum(axis=1), rtol=tol, atol=1e-4 if p == "f32" else 0.1)


@settings(max_examples=15, deadline=None)
@given(
    shape=st.tuples(st.lists(st.integers(1, 5), max_size=3), st.integers(1, 200)).map(lambda s: (*s[0], s[1])),
    p=st.sampled_from(["f32", "bf16"]),
    device=st.sampled_from(["gaudi", "gaudi2", "gaudi3"]),
    order=st.sampled_from(["contiguous", "shuffle"]),
)
def test_relu_any_shape_device_and_partition(shape: tuple[int, ...], p: str, device: str, order: str) -> None:
    x = _data(shape, p)
    r = tpc.run(relu_fwd_kernel(p), [x], device=device, order=order, seed=3)
    np.testing.assert_array_equal(r.outputs[0], np.maximum(x, 0))
    assert len(r.cycles_per_tpc) <= tpc.load_gaudi(device).tpc_engines


def _one(fn: Any, *arrays: np.ndarray, out: Any = None) -> np.ndarray:
    """Run ``fn(ctx, c, *tensors)`` once, on one member, and return output 0."""
    outputs = [out or (arrays[0].shape, arrays[0].dtype)]
    return tpc.run(_wrap(fn, len(arrays) + 1), list(arrays), outputs=outputs, index_space=[1]).outputs[0]


def _wrap(fn: Any, n: int) -> tpc.Kernel:
    names = ", ".join(f"t{i}: tpc.tensor" for i in range(n))
    scope: dict[str, Any] = {"fn": fn, "tpc": tpc}
    exec(f"def k(ctx, {names}):\n    fn(ctx, ctx.int5(), {', '.join(f't{i}' for i in range(n))})", scope)
    return tpc.kernel(scope["k"])


def test_intrinsic_semantics() -> None:
    rng = np.random.default_rng(5)
    a = rng.standard_normal(64).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    acc = rng.standard_normal(64).astype(np.float32)

    def mac(ctx: Any, c: Any, ta: int, tb: int, tacc: int, out: int) -> None:
        x, y, z = ctx.v_f32_ld_tnsr_b(c, ta), ctx.v_f32_ld_tnsr_b(c, tb), ctx.v_f32_ld_tnsr_b(c, tacc)
        r = ctx.v_f32_mac_b(x, y, z, tpc.SW_NEG)
        r = ctx.v_f32_abs_b(ctx.v_f32_sub_b(r, 1.5))
        ctx.v_f32_st_tnsr(c, out, ctx.v_f32_min_b(r, ctx.v_f32_mul_b(x, 2.0)))

    want = np.minimum(np.abs((acc.astype(np.float64) - a.astype(np.float64) * b) - 1.5), a * 2)
    np.testing.assert_allclose(_one(mac, a, b, acc), want, rtol=1e-6, atol=1e-6)

    def predicated(ctx: Any, c: Any, ta: int, tb: int, out: int) -> None:
        x, y = ctx.v_f32_ld_tnsr_b(c, ta), ctx.v_f32_ld_tnsr_b(c, tb)
        grt = ctx.v_f32_cmp_grt_b(x, y)
        r = ctx.v_f32_add_vb(x, y, 0, -7.0, grt)  # lanes where x <= y keep the income
        r = ctx.v_f32_mul_b(r, 3.0, 0, r, False)  # predicated off: the income
        ctx.v_f32_st_tnsr(c, out, r)

    np.testing.assert_array_equal(_one(predicated, a, b), np.where(a > b, a + b, -7.0).astype(np.float32))

    def converts(ctx: Any, c: Any, ta: int, out: int) -> None:
        x = ctx.v_f32_mul_b(ctx.v_f32_ld_tnsr_b(c, ta), 10.0)
        down = ctx.v_convert_f32_to_i32_b(x, tpc.SW_RD)
        near = ctx.v_convert_f32_to_i32_b(x)
        lane = ctx.as_int64(ctx.read_lane_id_4b_b())
        total = ctx.v_i32_add_b(ctx.v_i32_add_b(down, near), lane)
        ctx.v_i32_st_tnsr(c, out, ctx.v_i32_max_b(total, ctx.v_i32_reduce_min(total)))

    x10 = (a * np.float32(10)).astype(np.float64)
    total = np.floor(x10) + np.rint(x10) + np.arange(64)
    got = _one(converts, a, out=((64,), np.int32))
    np.testing.assert_array_equal(got, np.maximum(total, total.min()).astype(np.int32))


@pytest.mark.parametrize("fn", ["exp", "log", "sigmoid", "tanh", "reciprocal", "sqrt", "rsqrt"])
def test_special_functions(fn: str) -> None:
    x = np.random.default_rng(2).uniform(0.1, 4.0, 64).astype(np.float32)
    reference = {
        "exp": np.exp,
        "log": np.log,
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "tanh": np.tanh,
        "reciprocal": lambda v: 1 / v,
        "sqrt": np.sqrt,
        "rsqrt": lambda v: 1 / np.sqrt(v),
    }[fn]

    def k(ctx: Any, c: Any, t: int, out: int) -> None:
        ctx.v_f32_st_tnsr(c, out, getattr(ctx, f"v_{fn}_f32")(ctx.v_f32_ld_tnsr_b(c, t)))

    np.testing.assert_allclose(_one(k, x), reference(x.astype(np.float64)), rtol=1e-6)


def test_out_of_bounds_loads_pad_and_stores_are_culled() -> None:
    x = np.arange(100, dtype=np.float32)

    def k(ctx: Any, c: Any, t: int, out: int) -> None:
        c[0] = 64
        v = ctx.v_f32_ld_tnsr_b(c, t)  # lanes 100..127 are out of bounds: pad value
        c[0] = 0
        ctx.v_f32_st_tnsr(c, out, ctx.v_f32_ld_tnsr_b(c, t))
        c[0] = 60
        ctx.v_f32_st_tnsr(c, out, ctx.v_f32_add_b(v, 0.0))  # writes 60..99, lanes past 99 culled

    kern = _wrap(k, 2)
    r = tpc.run(kern, [x], index_space=[1], pad_value=-1.0, check_mapping=False)
    want = x.copy()
    want[60:100] = np.concatenate([x[64:100], [-1.0] * 4])
    np.testing.assert_array_equal(r.outputs[0], want)


def test_vector_local_memory_round_trip() -> None:
    x = np.arange(128, dtype=np.float32)

    def k(ctx: Any, c: Any, t: int, out: int) -> None:
        buf = ctx.local_array(2, "float64")
        for i in range(2):
            c[0] = 64 * i
            buf[1 - i] = ctx.v_f32_ld_tnsr_b(c, t)
        for i in range(2):
            c[0] = 64 * i
            ctx.v_f32_st_tnsr(c, out, buf[i])

    r = tpc.run(_wrap(k, 2), [x], index_space=[1], check_mapping=False)
    np.testing.assert_array_equal(r.outputs[0], np.concatenate([x[64:], x[:64]]))


def test_vectors_are_immutable_and_opaque() -> None:
    def k(ctx: Any, c: Any, t: int, out: int) -> None:
        v = ctx.v_f32_ld_tnsr_b(c, t)
        with pytest.raises(TypeError, match="cannot branch on vector data"):
            bool(v)
        with pytest.raises(TypeError, match="use the intrinsics"):
            v + 1
        with pytest.raises(AttributeError):
            v.id = 3  # type: ignore[misc]
        ctx.v_f32_st_tnsr(c, out, v)

    tpc.run(_wrap(k, 2), [np.ones(64, dtype=np.float32)], index_space=[1])


@tpc.kernel
def mixed_calls(ctx: Any, x: tpc.tensor, out: tpc.tensor) -> None:
    """The same computation through the recording closures and through the full methods."""
    s = ctx.get_index_space_offset()
    e = s + ctx.get_index_space_size()
    c = ctx.int5()
    full = tpc.TpcContext
    for d in range(int(s[0]) * 64, int(e[0]) * 64, 64):
        c[0] = d
        a = ctx.v_f32_ld_tnsr_b(c, x)
        b = full.v_f32_ld_tnsr_b(ctx, [d, 0, 0, 0, 0], x)
        y = ctx.v_f32_add_b(ctx.v_f32_mul_b(a, 2), full.v_f32_mul_b(ctx, b, np.float32(0.5)))
        y = ctx.v_f32_sub_b(y, full.v_f32_add_b(ctx, a, 1.0), predicate=True, polarity=False)
        ctx.v_f32_st_tnsr(c, out, y)


def test_closures_and_full_methods_agree() -> None:
    x = np.random.default_rng(5).standard_normal(4 * 64).astype(np.float32)
    r = tpc.run(mixed_calls, [x], device="gaudi")
    want = (x * np.float32(2) + x * np.float32(0.5)) - (x + np.float32(1))
    assert np.array_equal(r.outputs[0], want)
    ctx_type = tpc.TpcContext
    assert ctx_type.v_f32_add_b.__name__ == "v_f32_add_b"  # the class attribute is the full method
