"""LayerNorm, cumulative sum, causal attention and the Mamba-style scan against numpy references."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import nkisim
from nkisim.examples.attention import causal_attention
from nkisim.examples.cumsum import cumsum_rows
from nkisim.examples.layernorm import layernorm
from nkisim.examples.mamba import selective_scan

TARGETS = st.sampled_from(["trn1", "trn2", "trn3"])


@settings(max_examples=8, deadline=None)
@given(tiles=st.integers(1, 2), width=st.sampled_from([2, 100, 512, 513, 1300]), target=TARGETS)
def test_layernorm(tiles: int, width: int, target: str) -> None:
    rng = np.random.default_rng(width)
    x = (rng.standard_normal((128 * tiles, width)) * 3 + 1).astype(np.float32)
    gamma = rng.standard_normal(width).astype(np.float32)
    beta = rng.standard_normal(width).astype(np.float32)
    result = nkisim.run(layernorm, [x, gamma, beta], target=target)
    x64 = x.astype(np.float64)
    expected = (x64 - x64.mean(axis=1, keepdims=True)) / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-5) * gamma + beta
    np.testing.assert_allclose(result.outputs, expected, rtol=1e-4, atol=1e-4)
    chunks = -(-width // 512)
    assert sum(r.opcode == "bn_stats" for r in result.profile.instructions) == chunks * tiles


@settings(max_examples=8, deadline=None)
@given(
    rows=st.sampled_from([1, 50, 128, 256]),
    width=st.integers(1, 600),
    dtype=st.sampled_from([np.float32, ml_dtypes.bfloat16]),
)
def test_cumsum_rows(rows: int, width: int, dtype: type) -> None:
    rng = np.random.default_rng(rows * width)
    x = rng.standard_normal((rows, width)).astype(dtype)
    out = nkisim.run(cumsum_rows, [x]).outputs
    # the scan keeps a float32 running sum and rounds each output once
    expected = np.cumsum(x.astype(np.float32), axis=1, dtype=np.float32).astype(dtype)
    tol = 1e-5 * np.sqrt(width) if dtype is np.float32 else 2.0**-7
    np.testing.assert_allclose(out.astype(np.float32), expected.astype(np.float32), rtol=tol, atol=tol)


def _attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    seq, d = q.shape
    scores = q.astype(np.float64) @ k.astype(np.float64).T / np.sqrt(d)
    scores[np.triu_indices(seq, 1)] = -np.inf
    probs = np.exp(scores - scores.max(axis=1, keepdims=True))
    return (probs / probs.sum(axis=1, keepdims=True)) @ v.astype(np.float64)


@settings(max_examples=6, deadline=None)
@given(seq=st.sampled_from([128, 256, 512]), d=st.sampled_from([16, 64, 128]), target=TARGETS)
def test_causal_attention(seq: int, d: int, target: str) -> None:
    rng = np.random.default_rng(seq + d)
    q, k, v = (rng.standard_normal((seq, d)).astype(np.float32) for _ in range(3))
    result = nkisim.run(causal_attention, [np.ascontiguousarray(q.T), np.ascontiguousarray(k.T), v], target=target)
    np.testing.assert_allclose(result.outputs, _attention_reference(q, k, v), rtol=1e-4, atol=1e-5)
    assert sum(r.opcode == "affine_select" for r in result.profile.instructions) == seq // 128


def test_causal_attention_first_query_sees_only_the_first_key() -> None:
    seq, d = 128, 8
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((seq, d)).astype(np.float32) for _ in range(3))
    out = nkisim.run(causal_attention, [np.ascontiguousarray(q.T), np.ascontiguousarray(k.T), v]).outputs
    np.testing.assert_allclose(out[0], v[0], rtol=1e-6)


def _selective_scan_reference(delta, u, a, b, c):
    channels, length = delta.shape
    h = np.zeros((channels, a.shape[1]))
    y = np.zeros((channels, length))
    for t in range(length):
        h = np.exp(delta[:, t : t + 1] * a) * h + delta[:, t : t + 1] * b[:, t] * u[:, t : t + 1]
        y[:, t] = (h * c[:, t]).sum(axis=1)
    return y


@settings(max_examples=6, deadline=None)
@given(tiles=st.integers(1, 2), length=st.sampled_from([1, 64, 300, 600]), states=st.integers(1, 4), target=TARGETS)
def test_selective_scan(tiles: int, length: int, states: int, target: str) -> None:
    rng = np.random.default_rng(length * states)
    channels = 128 * tiles
    delta = (np.abs(rng.standard_normal((channels, length))) * 0.1).astype(np.float32)
    u = rng.standard_normal((channels, length)).astype(np.float32)
    a = -np.abs(rng.standard_normal((channels, states))).astype(np.float32)
    b = rng.standard_normal((states, length)).astype(np.float32)
    c = rng.standard_normal((states, length)).astype(np.float32)
    out = nkisim.run(selective_scan, [delta, u, a, b, c], target=target).outputs
    np.testing.assert_allclose(out, _selective_scan_reference(delta, u, a, b, c), rtol=1e-4, atol=1e-4)
