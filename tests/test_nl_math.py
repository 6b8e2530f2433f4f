"""``nl.floor/ceil/trunc/fmod/mod/cos/tan``, ``nl.gather_flattened``, ``nl.dropout``, ``nl.rand``,
``nl.random_seed``, ``nl.load_transpose2d`` and the constants ``nl.average``/``nl.bypass``/``nl.prelu``.

Expected values are numpy's functions of the same names (the NKI docs define each
helper as "similar to numpy.<name>"), never nkisim's lowering.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nl_reference import FAST, run_helper, seeds, targets

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim import OperandError

ROUNDING = {"floor": np.floor, "ceil": np.ceil, "trunc": np.trunc}


@FAST
@given(name=st.sampled_from(sorted(ROUNDING)), seed=seeds, target=targets)
def test_rounding_matches_numpy(name: str, seed: int, target: str) -> None:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((64, 12)) * 1000).astype(np.float32)
    x[0, :6] = [3.5, -3.5, 2.5, -0.5, 0.0, 7.0]  # ties and integers
    got, opcodes = run_helper(lambda t: getattr(nl, name)(t), [x], target=target)
    np.testing.assert_array_equal(got, ROUNDING[name](x))
    assert "tensor_copy" in opcodes and "tensor_tensor" in opcodes


@FAST
@given(name=st.sampled_from(["fmod", "mod"]), seed=seeds, divisor=st.sampled_from([1.5, -2.0, 0.25, 3.0]))
def test_remainders_match_numpy(name: str, seed: int, divisor: float) -> None:
    rng = np.random.default_rng(seed)
    x = (rng.integers(-400, 400, size=(32, 10)) * 0.25).astype(np.float32)
    y = np.full((32, 10), divisor, np.float32)
    got_scalar = run_helper(lambda t: getattr(nl, name)(t, divisor), [x])[0]
    got_tiles = run_helper(lambda a, b: getattr(nl, name)(a, b), [x, y])[0]
    expected = getattr(np, name)(x, np.float32(divisor))
    np.testing.assert_array_equal(got_scalar, expected)
    np.testing.assert_array_equal(got_tiles, expected)


def test_mod_of_integers_keeps_the_integer_dtype() -> None:
    x = np.arange(-20, 20, dtype=np.int32).reshape(4, 10)
    got = run_helper(lambda t: nl.mod(t, 7), [x])[0]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.mod(x, 7))


@FAST
@given(seed=seeds, target=targets)
def test_cos_and_tan_reduce_their_range(seed: int, target: str) -> None:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-50, 50, size=(16, 20)).astype(np.float32)
    (cos, tan), _ = run_helper(lambda t: (nl.cos(t), nl.tan(t)), [x], target=target)
    np.testing.assert_allclose(cos, np.cos(x.astype(np.float64)), atol=1e-4)  # float32 range reduction: ~|x| * 2**-24
    c = np.cos(x.astype(np.float64))
    ok = np.abs(c) > 0.05  # away from the poles, where float32 range reduction dominates
    np.testing.assert_allclose(tan[ok], np.tan(x.astype(np.float64))[ok], rtol=3e-3, atol=1e-3)


def test_cos_of_zero_is_one_as_documented() -> None:
    got = run_helper(lambda t: nl.cos(t), [np.zeros((128, 8), np.float32)])[0]
    np.testing.assert_array_equal(got, np.ones((128, 8), np.float32))


@FAST
@given(seed=seeds, dtype=st.sampled_from([np.uint32, np.int32]))
def test_gather_flattened_picks_per_partition(seed: int, dtype: type) -> None:
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((32, 4, 6)).astype(np.float32)
    idx = rng.integers(0, 24, size=(32, 10)).astype(dtype)
    got, opcodes = run_helper(lambda d, i: nl.gather_flattened(d, i), [data, idx])
    expected = np.take_along_axis(data.reshape(32, 24), idx.astype(np.int64), axis=1)
    np.testing.assert_array_equal(got, expected)
    assert opcodes[-1] == "nc_n_gather"


def test_gather_flattened_refuses_another_axis() -> None:
    data = np.zeros((8, 4), np.float32)
    idx = np.zeros((8, 4), np.uint32)
    with pytest.raises(OperandError, match=r"nl\.gather_flattened.*axis 1 is not supported"):
        run_helper(lambda d, i: nl.gather_flattened(d, i, axis=1), [data, idx])


def test_dropout_zeroes_about_rate_and_keeps_the_rest() -> None:
    x = np.full((128, 256), 3.0, np.float32)
    got = run_helper(lambda t: nl.dropout(t, 0.25), [x])[0]
    assert set(np.unique(got)) <= {0.0, 3.0}
    assert 0.2 < np.mean(got == 0) < 0.3


@pytest.mark.parametrize("target", ["trn1", "trn3"])
def test_rand_is_uniform_in_unit_interval_and_seeded(target: str) -> None:
    def kernel():
        seed = nl.full((1, 1), 42, dtype=nl.int32, buffer=nl.sbuf)
        nl.random_seed(seed)
        a = nl.rand((128, 64), dtype=nl.float32)
        nl.random_seed(seed)
        b = nl.rand((128, 64), dtype=nl.float32)
        out = nl.ndarray((2, 128, 64), nl.float32, buffer=nl.shared_hbm)
        nl.store(out[0], a)
        nl.store(out[1], b)
        return out

    out = nkisim.run(kernel, [], target=target).outputs
    assert np.array_equal(out[0], out[1])
    assert out.min() >= 0.0 and out.max() < 1.0
    assert 0.45 < out.mean() < 0.55


def test_load_transpose2d() -> None:
    src = np.arange(64 * 32, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(64, 32)

    def kernel(s):
        t = nl.load_transpose2d(s)
        out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    np.testing.assert_array_equal(nkisim.run(kernel, [src]).outputs, src.T)


def test_average_reduces_across_partitions() -> None:
    x = np.random.default_rng(1).standard_normal((64, 8)).astype(np.float32)

    def body(t):
        dst = nl.ndarray((1, 8), nl.float32, buffer=nl.sbuf)
        nisa.tensor_partition_reduce(dst=dst, op=nl.average, data=t)
        return dst

    np.testing.assert_allclose(run_helper(body, [x])[0], x.mean(axis=0, keepdims=True), rtol=1e-6)


def test_operator_constants_are_not_functions() -> None:
    with pytest.raises(OperandError, match=r"nl\.bypass is an operator constant"):
        nl.bypass(1, 2)


def test_type_names() -> None:
    assert nl.NkiTensor is nkisim.memory.Tensor
    assert isinstance(nl.float32, nl.DType)
    assert nl.MemoryRegion("shared_hbm") is nl.shared_hbm
