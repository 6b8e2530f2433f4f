"""The narrow float conversions (nkisim.memory.narrow_floats) give ml_dtypes' and numpy's bits exactly.

ml_dtypes (and numpy, for float16) are the reference: they convert element by element with
their own code, which the rounding tables only sample (two float32 per high half), so these
tests check that the sampling decides every input the same way.
"""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from nkisim.memory import cast
from nkisim.memory.narrow_floats import BYTE_FLOATS, narrow, widen

TYPES = sorted(BYTE_FLOATS, key=str)


def reference_narrow(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(dtype).view(np.uint8)


@pytest.mark.parametrize("dtype", TYPES, ids=str)
def test_every_code_widens_to_the_float32_ml_dtypes_decodes(dtype: np.dtype) -> None:
    codes = np.arange(256, dtype=np.uint8)
    expected = codes.view(dtype).astype(np.float32).view(np.uint32)
    zero_d = widen(codes[:1].reshape(()).view(dtype))
    assert isinstance(zero_d, np.ndarray) and zero_d.shape == () and zero_d.dtype == np.float32
    for shape in [(256,), (16, 16), (4, 8, 8)]:
        got = widen(codes.reshape(shape).view(dtype))
        assert got.dtype == np.float32 and got.shape == shape
        assert np.array_equal(got.view(np.uint32).ravel(), expected)


@pytest.mark.parametrize("dtype", TYPES, ids=str)
def test_a_strided_tile_widens_like_astype(dtype: np.dtype) -> None:
    # an SBUF-like view: 8 partitions of 2 KiB, 48 elements each, every other byte
    memory = np.random.default_rng(1).integers(0, 256, size=8 * 2048, dtype=np.uint8)
    view = np.ndarray((8, 48), dtype, memory, 64, (2048, 2))
    assert np.array_equal(widen(view).view(np.uint32), view.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("dtype", TYPES, ids=str)
@pytest.mark.parametrize("low", [0x0000, 0x0001, 0x7FFF, 0x8000, 0xFFFF])
def test_every_high_half_narrows_like_ml_dtypes(dtype: np.dtype, low: int) -> None:
    # Every sign, exponent and top 7 mantissa bits, with the low 16 bits on and next to a boundary.
    bits = (np.arange(65536, dtype=np.uint32) << 16) | np.uint32(low)
    values = bits.view(np.float32)
    assert np.array_equal(narrow(values, dtype).view(np.uint8), reference_narrow(values, dtype))


@pytest.mark.parametrize("dtype", TYPES, ids=str)
def test_values_on_each_midpoint_round_to_even_and_just_above_round_up(dtype: np.dtype) -> None:
    finite = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float64)
    positive = np.unique(finite[np.isfinite(finite) & (finite >= 0)])
    midpoints = ((positive[:-1] + positive[1:]) / 2).astype(np.float32)  # exact: five significant bits
    assert np.array_equal(midpoints.astype(np.float64), (positive[:-1] + positive[1:]) / 2)
    above = np.nextafter(midpoints, np.float32(np.inf))
    for values in (midpoints, above, -midpoints, -above):
        assert np.array_equal(narrow(values, dtype).view(np.uint8), reference_narrow(values, dtype))
    # hand-checked: e4m3fn's largest finite value is 448; 464 is the midpoint to the next (480), past it is NaN
    if dtype == np.dtype(ml_dtypes.float8_e4m3fn):
        got = narrow(np.array([448, 455.9, 464, 464.1], np.float32), dtype).astype(np.float32)
        assert got[:3].tolist() == [448, 448, 448] and np.isnan(got[3])


@settings(deadline=None)  # the first example compiles the conversion (numba: about 0.3 s)
@given(
    bits=hnp.arrays(
        np.uint32, hnp.array_shapes(min_dims=0, max_dims=3, max_side=9), elements=st.integers(0, 2**32 - 1)
    ),
    dtype=st.sampled_from(TYPES),
)
def test_any_float32_bits_narrow_like_ml_dtypes(bits: np.ndarray, dtype: np.dtype) -> None:
    values = bits.view(np.float32)
    got = narrow(values, dtype)
    assert got.dtype == dtype and got.shape == values.shape
    assert np.array_equal(got.view(np.uint8), reference_narrow(values, dtype))
    # the engines' write path takes the same conversion, also for a non-contiguous operand
    transposed = values.T
    assert np.array_equal(cast(transposed, dtype).view(np.uint8), reference_narrow(transposed, dtype))


@pytest.mark.parametrize("dtype", [np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)], ids=str)
def test_every_two_byte_code_widens_like_astype_in_any_layout(dtype: np.dtype) -> None:
    codes = np.arange(65536, dtype=np.uint16)
    memory = np.zeros(65536 * 3, np.uint16)
    memory[::3] = codes  # every third element: a view with a step, as an access pattern makes
    layouts = [
        codes.view(dtype).reshape(256, 256),
        memory.view(dtype)[::3].reshape(256, 256),
        memory.view(dtype).reshape(256, 768)[:, ::3],
        codes.view(dtype).reshape(16, 64, 64).transpose(1, 0, 2),
    ]
    for view in layouts:
        got = widen(view)
        assert got.dtype == np.float32 and got.shape == view.shape
        assert np.array_equal(got.view(np.uint32), view.astype(np.float32).view(np.uint32))
    # hand-checked: bfloat16 0x3FC0 is 1.5, float16 0x3E00 is 1.5, bfloat16 0xFF80 is -inf
    assert widen(np.array([[0x3FC0, 0xFF80]], np.uint16).view(ml_dtypes.bfloat16)[:, ::1]).tolist() == [[1.5, -np.inf]]
    assert widen(np.array([0x3E00], np.uint16).view(np.float16)).tolist() == [1.5]


def test_other_types_keep_numpy_conversions() -> None:
    x = np.array([1.5, -2.25], np.float32)
    assert widen(x) is x  # float32 is returned as it is, as astype(copy=False) does
    assert widen(x.astype(ml_dtypes.bfloat16)).tolist() == [1.5, -2.25]
    e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
    wide = np.array([1 + 2.0**-4 + 2.0**-30, -3.3, 500.0, np.nan])  # float64 keeps ml_dtypes' own conversion
    assert np.array_equal(cast(wide, e4m3fn).view(np.uint8), reference_narrow(wide, e4m3fn))


BF16 = np.dtype(ml_dtypes.bfloat16)


def reference_bf16(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(BF16).view(np.uint16)


@pytest.mark.parametrize("low", [0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF])
def test_every_high_half_rounds_to_bfloat16_like_ml_dtypes(low: int) -> None:
    # every sign, exponent and top 7 mantissa bits, with the low half on, below, at and above the midpoint
    bits = (np.arange(65536, dtype=np.uint32) << 16) | np.uint32(low)
    values = bits.reshape(256, 256).view(np.float32)
    got = cast(values, BF16)
    assert got.dtype == BF16 and got.shape == values.shape
    assert np.array_equal(got.view(np.uint16), reference_bf16(values))


def test_bfloat16_rounding_by_hand() -> None:
    bits = np.array(
        [0x3F808000, 0x3F818000, 0x3F808001, 0x7F7FFFFF, 0x7F800001, 0xFFC12345, 0x80008000, 0x00018000], np.uint32
    )
    # ties to even (down, up), above the tie, the largest float32 rounds to inf, NaNs keep their sign as the quiet
    # NaN, a negative tie at zero stays -0, the smallest subnormal tie rounds up to the even code 2
    expected = [0x3F80, 0x3F82, 0x3F81, 0x7F80, 0x7FC0, 0xFFC0, 0x8000, 0x0002]
    assert cast(bits.view(np.float32), BF16).view(np.uint16).tolist() == expected


@settings(deadline=None)  # the first example of a layout compiles the conversion for it (numba: about 0.3 s)
@given(
    hnp.arrays(np.uint32, hnp.array_shapes(min_dims=0, max_dims=3, max_side=9), elements=st.integers(0, 2**32 - 1)),
    st.sampled_from(["C", "F", "step"]),
)
def test_any_float32_in_any_layout_rounds_to_bfloat16_like_ml_dtypes(bits: np.ndarray, layout: str) -> None:
    values = bits.view(np.float32)
    if layout == "F":
        values = np.asfortranarray(values)
    elif layout == "step" and values.ndim:
        values = np.repeat(values, 2, axis=-1)[..., ::2]
    got = cast(values, BF16)
    assert got.dtype == BF16 and got.shape == values.shape
    assert np.array_equal(got.view(np.uint16), reference_bf16(values))
