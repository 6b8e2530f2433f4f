"""Scalar Engine ``activate2`` (NeuronCore-v4) and GpSimd ``topk``.

References are numpy formulas written from the nki.isa API reference (NKI 0.6):
activate2 computes ``op((data op0 imm0) op1 imm1)`` in float32 and reduces the
float32 output; topk returns each 16-partition snake's K largest values ascending,
with their snake indices.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim import OperandError, ShapeError, TargetError

from .conftest import FAST, load, run_kernel, seeds, store

BF16 = np.dtype(ml_dtypes.bfloat16)
PAIRS = {
    ("multiply", "add"): lambda x, a, b: x * a + b,
    ("multiply", "subtract"): lambda x, a, b: x * a - b,
    ("multiply", "bypass"): lambda x, a, b: x * a,
    ("add", "bypass"): lambda x, a, b: x + a,
    ("subtract", "bypass"): lambda x, a, b: x - a,
    ("bypass", "bypass"): lambda x, a, b: x,
}


@FAST
@given(pair=st.sampled_from(sorted(PAIRS)), seed=seeds, imm0=st.floats(-3, 3), imm1=st.floats(-3, 3))
def test_activate2_stages_then_exp_and_add_reduction(pair, seed, imm0, imm1) -> None:
    x = np.random.default_rng(seed).uniform(-2, 2, size=(64, 24)).astype(np.float32)

    def kernel(a):
        t = load(a)
        dst = nl.ndarray(t.shape, nl.float32, buffer=nl.sbuf)
        res = nl.ndarray((64, 1), nl.float32, buffer=nl.sbuf)
        nisa.activate2(
            dst=dst, op=nl.exp, data=t, imm0=imm0, imm1=imm1, op0=getattr(nl, pair[0]), op1=getattr(nl, pair[1]),
            reduce_op=nl.add, reduce_res=res, reduce_cmd=nisa.reduce_cmd.reset_reduce,
        )  # fmt: skip
        return store(dst), store(res)

    dst, res = run_kernel(kernel, [x], target="trn3")
    z = np.exp(PAIRS[pair](x.astype(np.float64), np.float32(imm0), np.float32(imm1)))
    np.testing.assert_allclose(dst, z, rtol=1e-5)
    np.testing.assert_allclose(res[:, 0], z.sum(axis=1), rtol=1e-5)


def test_activate2_reverse_prelu_and_abs_max_reduction() -> None:
    x = np.random.default_rng(3).uniform(-4, 4, size=(32, 16)).astype(np.float32)
    alpha = np.linspace(0.1, 0.5, 32, dtype=np.float32).reshape(32, 1)

    def kernel(a, al):
        t, slope = load(a), load(al)
        dst = nl.ndarray(t.shape, nl.float32, buffer=nl.sbuf)
        res = nl.ndarray((32, 1), nl.float32, buffer=nl.sbuf)
        nisa.activate2(
            dst=dst, op=nl.prelu, data=t, imm0=1.0, imm1=0.0, op0=nl.subtract, op1=nl.bypass, relu_param=slope,
            reverse0=True, reduce_op=nl.abs_max, reduce_res=res, reduce_cmd=nisa.reduce_cmd.reset_reduce,
        )  # fmt: skip
        return store(dst), store(res)

    dst, res = run_kernel(kernel, [x, alpha], target="trn3")
    v = 1.0 - x.astype(np.float64)
    expected = np.where(v >= 0, v, alpha * v)
    np.testing.assert_allclose(dst, expected, rtol=1e-6)
    np.testing.assert_allclose(res[:, 0], np.abs(expected).max(axis=1), rtol=1e-6)


def _activate2_kernel(**kwargs):
    def kernel():
        t = nl.full((8, 4), 1.0, nl.float32, buffer=nl.sbuf)
        dst = nl.ndarray((8, 4), nl.float32, buffer=nl.sbuf)
        args = {"op": nl.relu, "imm0": 1.0, "imm1": 1.0, "op0": nl.multiply, "op1": nl.add, **kwargs}
        nisa.activate2(dst=dst, data=t, **args)

    return kernel


def test_activate2_refuses_an_undocumented_stage_pair() -> None:
    with pytest.raises(OperandError, match=r"nisa\.activate2.*op1.*\(nl\.add, nl\.multiply\) is not supported"):
        nkisim.run(_activate2_kernel(op0=nl.add, op1=nl.multiply), target="trn3")


def test_activate2_reverse_needs_its_stage() -> None:
    with pytest.raises(OperandError, match=r"reverse1.*requires op1 to be set"):
        nkisim.run(_activate2_kernel(op0=nl.add, op1=nl.bypass, reverse1=True), target="trn3")


def test_activate2_needs_neuroncore_v4() -> None:
    with pytest.raises(TargetError, match=r"nisa\.activate2 \[Scalar, trn2\]: needs scalar_activate2"):
        nkisim.run(_activate2_kernel(), target="trn2")


# -- topk -----------------------------------------------------------------------------------


def _snake_reference(src: np.ndarray, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group of 16 partitions: snake element e at (e % 16, e // 16); top k ascending, repeated per partition."""
    vals, idxs = [], []
    for g in range(src.shape[0] // 16):
        block = src[16 * g : 16 * g + 16].astype(np.float64)
        snake = np.array([block[e % 16, e // 16] for e in range(n)])
        best = sorted(range(n), key=lambda e: (-snake[e], e))[:k]
        best = sorted(best, key=lambda e: (snake[e], best.index(e)))
        vals += [snake[best]] * 16
        idxs += [best] * 16
    return np.array(vals).astype(BF16), np.array(idxs, dtype=np.uint32)


@FAST
@given(seed=seeds, n=st.integers(8, 80), k=st.integers(1, 8), groups=st.integers(1, 2))
def test_topk_selects_the_largest_of_each_snake(seed: int, n: int, k: int, groups: int) -> None:
    cols = -(-n // 16)
    src = np.random.default_rng(seed).integers(-50, 50, size=(16 * groups, cols)).astype(BF16)

    def kernel(s):
        t = load(s)
        val = nl.ndarray((16 * groups, k), nl.bfloat16, buffer=nl.sbuf)
        idx = nl.ndarray((16 * groups, k), nl.uint32, buffer=nl.sbuf)
        nisa.topk(val_dst=val, idx_dst=idx, src=t, n=n)
        return store(val), store(idx)

    val, idx = run_kernel(kernel, [src])
    want_val, want_idx = _snake_reference(src, n, k)
    np.testing.assert_array_equal(val.astype(np.float64), want_val.astype(np.float64))
    np.testing.assert_array_equal(idx, want_idx)


def _topk_duration_ns(n: int, k: int) -> float:
    def kernel():
        src = nl.full((16, -(-n // 16)), 1.0, nl.bfloat16, buffer=nl.sbuf)
        val = nl.ndarray((16, k), nl.bfloat16, buffer=nl.sbuf)
        idx = nl.ndarray((16, k), nl.uint32, buffer=nl.sbuf)
        nisa.topk(val_dst=val, idx_dst=idx, src=src, n=n)

    (inst,) = [i for i in nkisim.run(kernel).profile.instructions if i.opcode == "topk"]
    return inst.end_ns - inst.start_ns


def test_topk_cost_is_4n_plus_k() -> None:
    clock_ghz = nkisim.hw.load_target("trn1").gpsimd.clock_ghz
    base = _topk_duration_ns(42, 8)
    assert _topk_duration_ns(142, 8) - base == pytest.approx(4 * 100 / clock_ghz)
    assert _topk_duration_ns(42, 40) - base == pytest.approx(32 / clock_ghz)


def test_topk_refuses_a_source_shorter_than_the_snake() -> None:
    def kernel():
        src = nl.full((16, 2), 1.0, nl.bfloat16, buffer=nl.sbuf)
        val = nl.ndarray((16, 8), nl.bfloat16, buffer=nl.sbuf)
        idx = nl.ndarray((16, 8), nl.uint32, buffer=nl.sbuf)
        nisa.topk(val_dst=val, idx_dst=idx, src=src, n=42)

    with pytest.raises(ShapeError, match=r"nisa\.topk.*src.*free size 2 must be at least ceil\(n / 16\) for n = 42"):
        nkisim.run(kernel)
