"""The legacy-API examples give the same outputs, instructions and simulated time as the current-API ones.

Each comparison also checks the outputs against a numpy reference written here, so a
mistake shared by both versions cannot pass.
"""

import ml_dtypes
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import nkisim
from nkisim.examples import attention, layernorm, matmul, softmax, tensor_add
from nkisim.examples.legacy import attention as legacy_attention
from nkisim.examples.legacy import layernorm as legacy_layernorm
from nkisim.examples.legacy import matmul as legacy_matmul
from nkisim.examples.legacy import softmax as legacy_softmax
from nkisim.examples.legacy import tensor_add as legacy_tensor_add
from nkisim.frontend.legacy_launch import run_legacy

TARGETS = st.sampled_from(["trn1", "trn2", "trn3"])


def _same(current, legacy, inputs, target="trn1"):
    """Run both versions; assert equal outputs, instruction streams and simulated time; return the outputs."""
    now = nkisim.run(current, list(inputs), target=target)
    old = run_legacy(legacy, tuple(inputs), {}, target=target)
    assert np.array_equal(now.outputs, old.outputs)
    ops_now = [(r.opcode, r.engine) for r in now.profile.instructions]
    ops_old = [(r.opcode, r.engine) for r in old.profile.instructions]
    assert ops_old == ops_now
    assert old.total_ns == now.profile.total_ns
    return old.outputs


def _product(x, y):
    return x.T.astype(np.float64) @ y.astype(np.float64)


def test_tensor_add():
    rng = np.random.default_rng(3)  # the same inputs whatever runs before
    a, b = (rng.random((256, 1024), dtype=np.float32) for _ in range(2))
    out = _same(tensor_add.nki_tensor_add, legacy_tensor_add.nki_tensor_add, (a, b))
    assert np.array_equal(out, a + b)


@settings(max_examples=4, deadline=None)
@given(k=st.sampled_from([1, 64, 128]), m=st.sampled_from([1, 100, 128]), n=st.sampled_from([1, 300, 512]))
def test_matmul_basic(k, m, n):
    rng = np.random.default_rng(3)  # the same inputs whatever runs before
    x, y = rng.random((k, m), dtype=np.float32), rng.random((k, n), dtype=np.float32)
    out = _same(matmul.matmul_basic, legacy_matmul.matmul_basic, (x, y))
    np.testing.assert_allclose(out, _product(x, y), rtol=1e-5)


def test_matmul_tiled():
    rng = np.random.default_rng(3)  # the same inputs whatever runs before
    x, y = rng.random((256, 256), dtype=np.float32), rng.random((256, 1024), dtype=np.float32)
    out = _same(matmul.matmul_tiled, legacy_matmul.matmul_tiled, (x, y))
    np.testing.assert_allclose(out, _product(x, y), rtol=1e-5)


@settings(max_examples=4, deadline=None)
@given(k=st.integers(1, 3), m=st.integers(1, 2), n=st.integers(1, 3), target=TARGETS)
def test_matmul_hoisted(k, m, n, target):
    rng = np.random.default_rng(3)  # the same inputs whatever runs before
    x, y = rng.random((128 * k, 128 * m), dtype=np.float32), rng.random((128 * k, 512 * n), dtype=np.float32)
    out = _same(matmul.matmul_hoisted, legacy_matmul.matmul_hoisted, (x, y), target)
    np.testing.assert_allclose(out, _product(x, y), rtol=1e-5)


@settings(max_examples=3, deadline=None)
@given(k=st.integers(1, 2), target=TARGETS, dtype=st.sampled_from([np.float32, ml_dtypes.bfloat16]))
def test_matmul_blocked(k, target, dtype):
    rng = np.random.default_rng(3)  # the same inputs whatever runs before
    x = rng.random((128 * k, 512)).astype(dtype)
    y = rng.random((128 * k, 2048)).astype(dtype)
    out = _same(matmul.matmul_blocked, legacy_matmul.matmul_blocked, (x, y), target)
    tol = 1e-5 if dtype == np.float32 else 1e-2
    np.testing.assert_allclose(out.astype(np.float64), _product(x, y), rtol=tol)


@settings(max_examples=3, deadline=None)
@given(kb=st.integers(1, 2), target=TARGETS)
def test_matmul_optimized(kb, target):
    rng = np.random.default_rng(3)  # the same inputs whatever runs before
    """Two blocks of two tiles along each dim (the defaults, 16 x 2 x 8 tiles, are tested once below)."""
    x, y = rng.random((256 * kb, 512), dtype=np.float32), rng.random((256 * kb, 2048), dtype=np.float32)
    inputs = (x, y, 2, 2, 2)
    out = _same(matmul.matmul_optimized, legacy_matmul.matmul_optimized, inputs, target)
    np.testing.assert_allclose(out, _product(x, y), rtol=1e-5)


def test_matmul_optimized_default_blocks():
    rng = np.random.default_rng(3)  # the same inputs whatever runs before
    x = rng.random((1024, 2048)).astype(ml_dtypes.bfloat16)
    y = rng.random((1024, 1024)).astype(ml_dtypes.bfloat16)
    out = _same(matmul.matmul_optimized, legacy_matmul.matmul_optimized, (x, y), "trn2")
    np.testing.assert_allclose(out.astype(np.float64), _product(x, y), rtol=1e-2)


@settings(max_examples=6, deadline=None)
@given(tiles=st.integers(1, 2), width=st.sampled_from([2, 100, 512, 513, 1300]), target=TARGETS)
def test_layernorm(tiles, width, target):
    rng = np.random.default_rng(width)
    x = (rng.standard_normal((128 * tiles, width)) * 3 + 1).astype(np.float32)
    gamma, beta = (rng.standard_normal(width).astype(np.float32) for _ in range(2))
    out = _same(layernorm.layernorm, legacy_layernorm.layernorm, (x, gamma, beta), target)
    x64 = x.astype(np.float64)
    norm = (x64 - x64.mean(axis=1, keepdims=True)) / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out, norm * gamma + beta, rtol=1e-4, atol=1e-4)


@settings(max_examples=6, deadline=None)
@given(tiles=st.integers(1, 3), width=st.sampled_from([1, 7, 512, 1000]), target=TARGETS)
def test_softmax(tiles, width, target):
    x = (np.random.default_rng(width).standard_normal((128 * tiles, width)) * 4).astype(np.float32)
    out = _same(softmax.softmax_rows, legacy_softmax.softmax_rows, (x,), target)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


@settings(max_examples=5, deadline=None)
@given(seq=st.sampled_from([128, 256, 512]), d=st.sampled_from([16, 64, 128]), target=TARGETS)
def test_causal_attention(seq, d, target):
    rng = np.random.default_rng(seq + d)
    q, k, v = (rng.standard_normal((seq, d)).astype(np.float32) for _ in range(3))
    inputs = (np.ascontiguousarray(q.T), np.ascontiguousarray(k.T), v)
    out = _same(attention.causal_attention, legacy_attention.causal_attention, inputs, target)
    scores = q.astype(np.float64) @ k.astype(np.float64).T / np.sqrt(d)
    scores[np.triu_indices(seq, 1)] = -np.inf
    probs = np.exp(scores - scores.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, probs / probs.sum(axis=1, keepdims=True) @ v, rtol=1e-4, atol=1e-5)
