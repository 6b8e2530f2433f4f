"""Worked kernels in nkisim.examples against numpy references written here."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nkisim
from nkisim.examples import matmul as mm
from nkisim.examples.pooling import avg_pool2d
from nkisim.examples.rmsnorm import rmsnorm
from nkisim.examples.softmax import softmax_rows
from nkisim.examples.transpose import transpose2d

TARGETS = st.sampled_from(["trn1", "trn2", "trn3"])


def _matmul_reference(lhs_t: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    return lhs_t.astype(np.float64).T @ rhs.astype(np.float64)


@pytest.mark.parametrize(
    ("kernel", "shape", "kwargs"),
    [
        (mm.matmul_tiled, (256, 256, 1024), {}),
        (mm.matmul_hoisted, (256, 256, 1024), {}),
        (mm.matmul_blocked, (256, 256, 1024), {"blocks_n": 2}),
        (mm.matmul_optimized, (512, 256, 1024), {"blocks_m": 2, "blocks_n": 2, "blocks_k": 2}),
    ],
    ids=["tiled", "hoisted", "blocked", "optimized"],
)
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=["fp32", "bf16"])
def test_matmul_family(kernel, shape, kwargs, dtype) -> None:
    k, m, n = shape
    rng = np.random.default_rng(7)
    lhs_t = rng.standard_normal((k, m)).astype(dtype)
    rhs = rng.standard_normal((k, n)).astype(dtype)
    result = nkisim.run(kernel, {"lhsT": lhs_t, "rhs": rhs, **kwargs})
    tol = {"rtol": 1e-5, "atol": 1e-4} if dtype is np.float32 else {"rtol": 2.0**-8, "atol": 1e-2}
    np.testing.assert_allclose(result.outputs.astype(np.float64), _matmul_reference(lhs_t, rhs), **tol)


def test_matmul_family_gets_faster_as_loads_are_shared() -> None:
    shapes = [((1024, 512), np.float32), ((1024, 1024), np.float32)]
    times = {k.__name__: nkisim.profile(k, shapes).total_ns for k in (mm.matmul_tiled, mm.matmul_hoisted)}
    loads = {
        k.__name__: sum(r.opcode == "dma_copy" for r in nkisim.profile(k, shapes).instructions)
        for k in (mm.matmul_tiled, mm.matmul_hoisted, mm.matmul_blocked)
    }
    # tiled reloads both operands for every block: (M/128)(N/512)(K/128) x 2 loads
    assert loads["matmul_tiled"] == 4 * 2 * 8 * 2 + 4 * 2
    assert loads["matmul_hoisted"] == 4 * 8 + 4 * 2 * 8 + 4 * 2
    # blocked (2x2 tiles a block): lhsT once per row block, rhs once per (row block, column block)
    assert loads["matmul_blocked"] == 2 * 2 * 8 + 2 * 1 * 2 * 8 + 4 * 2
    assert times["matmul_hoisted"] < times["matmul_tiled"]


def test_matmul_basic_single_tile() -> None:
    rng = np.random.default_rng(2)
    lhs_t = rng.standard_normal((100, 64)).astype(np.float32)
    rhs = rng.standard_normal((100, 300)).astype(np.float32)
    out = nkisim.run(mm.matmul_basic, [lhs_t, rhs]).outputs
    np.testing.assert_allclose(out, _matmul_reference(lhs_t, rhs), rtol=1e-5, atol=1e-4)


@settings(max_examples=10, deadline=None)
@given(
    rows=st.sampled_from([8, 100, 128, 256]),
    cols=st.sampled_from([16, 128, 384]),
    dtype=st.sampled_from([np.float32, ml_dtypes.bfloat16, np.int8, np.float16]),
    target=TARGETS,
)
def test_transpose2d_is_bit_exact(rows: int, cols: int, dtype: type, target: str) -> None:
    x = (np.arange(rows * cols) % 113 - 50).reshape(rows, cols).astype(dtype)
    out = nkisim.run(transpose2d, [x], target=target).outputs
    np.testing.assert_array_equal(out.view(np.uint8), np.ascontiguousarray(x.T).view(np.uint8))


@settings(max_examples=10, deadline=None)
@given(
    channels=st.integers(1, 128),
    out_h=st.integers(1, 6),
    out_w=st.integers(1, 6),
    pool=st.sampled_from([1, 2, 3]),
    dtype=st.sampled_from([np.float32, ml_dtypes.bfloat16]),
)
def test_avg_pool2d(channels: int, out_h: int, out_w: int, pool: int, dtype: type) -> None:
    rng = np.random.default_rng(channels)
    x = rng.standard_normal((channels, out_h * pool, out_w * pool)).astype(dtype)
    out = nkisim.run(avg_pool2d, {"x": x, "pool": pool}).outputs
    windows = x.astype(np.float32).reshape(channels, out_h, pool, out_w, pool)
    expected = (windows.sum(axis=(2, 4), dtype=np.float32) * np.float32(1.0 / (pool * pool))).astype(dtype)
    tol = 1e-6 if dtype is np.float32 else 2.0**-7
    np.testing.assert_allclose(out.astype(np.float32), expected.astype(np.float32), rtol=tol, atol=tol)


@settings(max_examples=8, deadline=None)
@given(tiles=st.integers(1, 2), width=st.sampled_from([1, 64, 300, 512]), target=TARGETS)
def test_rmsnorm(tiles: int, width: int, target: str) -> None:
    rng = np.random.default_rng(width)
    x = rng.standard_normal((128 * tiles, width)).astype(np.float32)
    gamma = rng.standard_normal(width).astype(np.float32)
    out = nkisim.run(rmsnorm, [x, gamma], target=target).outputs
    x64 = x.astype(np.float64)
    expected = x64 / np.sqrt((x64**2).mean(axis=1, keepdims=True) + 1e-6) * gamma
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@settings(max_examples=8, deadline=None)
@given(tiles=st.integers(1, 2), width=st.integers(1, 700), dtype=st.sampled_from([np.float32, ml_dtypes.bfloat16]))
def test_softmax_rows(tiles: int, width: int, dtype: type) -> None:
    rng = np.random.default_rng(width)
    x = (rng.standard_normal((128 * tiles, width)) * 4).astype(dtype)
    out = nkisim.run(softmax_rows, [x]).outputs
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    expected = e / e.sum(axis=1, keepdims=True)
    tol = 1e-5 if dtype is np.float32 else 2.0**-7
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=tol, atol=tol)
