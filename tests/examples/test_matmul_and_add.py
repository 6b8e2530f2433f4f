"""The worked kernels shipped in nkisim.examples against numpy references."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nkisim
from nkisim.examples.matmul import matmul_tiled
from nkisim.examples.tensor_add import mul_add_mul, nki_tensor_add


@settings(max_examples=8, deadline=None)
@given(
    m_tiles=st.integers(1, 2),
    k_tiles=st.integers(1, 3),
    n_tiles=st.integers(1, 2),
    dtype=st.sampled_from([np.float32, ml_dtypes.bfloat16]),
    target=st.sampled_from(["trn1", "trn2", "trn3"]),
)
def test_tiled_matmul_accumulates_k_in_psum(m_tiles: int, k_tiles: int, n_tiles: int, dtype: type, target: str) -> None:
    rng = np.random.default_rng(m_tiles * 100 + k_tiles * 10 + n_tiles)
    lhs_t = rng.standard_normal((128 * k_tiles, 128 * m_tiles)).astype(dtype)
    rhs = rng.standard_normal((128 * k_tiles, 512 * n_tiles)).astype(dtype)
    result = nkisim.run(matmul_tiled, [lhs_t, rhs], target=target)
    # fp32 accumulation of the (already rounded) inputs, then one rounding to the output dtype
    exact = lhs_t.astype(np.float64).T @ rhs.astype(np.float64)
    got = result.outputs.astype(np.float64)
    if dtype is np.float32:
        np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-4 * np.sqrt(128 * k_tiles))
    else:  # one bf16 rounding of the fp32 sum: half an ulp of 8 mantissa bits
        np.testing.assert_allclose(got, exact, rtol=2.0**-8, atol=1e-3)
    matmuls = [r for r in result.profile.instructions if r.opcode == "nc_matmul"]
    assert len(matmuls) == m_tiles * k_tiles * n_tiles


def test_tensor_add_example_and_composition() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((128, 1024), dtype=np.float32)
    b = rng.standard_normal((128, 1024), dtype=np.float32)
    np.testing.assert_array_equal(nki_tensor_add(a, b), a + b)
    np.testing.assert_array_equal(mul_add_mul(a, b), a * b * (a + b))


def test_tensor_add_example_rejects_mismatched_shapes() -> None:
    a = np.zeros((128, 512), np.float32)
    b = np.zeros((128, 1024), np.float32)
    with pytest.raises(AssertionError, match="one shape"):
        nkisim.run(nki_tensor_add, [a, b])
