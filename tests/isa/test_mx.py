"""NeuronCore-v4 MX: the packed x4 dtypes, quantize_mx, nc_matmul_mx, and nc_matmul's limits.

Facts from the NKI docs (isa stubs, Trainium3 architecture guide, MXFP matmul guide):

* ``float8_*_x4`` pack four fp8 values in 32 bits, ``float4_e2m1fn_x4`` four fp4 values
  in 16 bits (nkisim: value ``j`` in byte/nibble ``j`` from the least significant end).
* A scaling group is 8 partitions x 4 values (one packed element per partition); its
  uint8 scale ``s`` means ``2 ** (s - 127)``. The scales of data quadrant ``q`` sit in
  rows ``32 q .. 32 q + 3`` of the scale tile, which may start 0, 4, 8 or 12 partitions
  into a quadrant.
* quantize_mx: scale ``X = 2 ** (floor(log2(amax)) - (Emax - 1))`` (Emax 8 for e4m3fn,
  15 for e5m2), values divided by ``X`` and cast to fp8.
* nc_matmul_mx: ``dst[m, n] = sum over k, j of S[k, m, j] sS * M[k, n, j] sM`` in fp32.
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
from nkisim.errors import DtypeError, MemoryKindError, OperandError, ShapeError, TargetError
from nkisim.hw import load_target
from nkisim.memory import dtype_name

from .conftest import BF16, FAST, FP16, FP32, load, run_kernel, seeds, store

E5M2 = np.dtype(ml_dtypes.float8_e5m2)
E4M3FN = np.dtype(ml_dtypes.float8_e4m3fn)
FP8_X4 = {"float8_e5m2_x4": (E5M2, 15), "float8_e4m3fn_x4": (E4M3FN, 8)}
MX_NAMES = ("float8_e5m2_x4", "float8_e4m3fn_x4", "float4_e2m1fn_x4")


# -- reference packing ----------------------------------------------------------------


def fp4_value(code):
    """float4_e2m1fn: sign, 2 exponent bits (bias 1), 1 mantissa bit; exponent 0 is subnormal."""
    sign = -1.0 if code & 8 else 1.0
    e, m = (code >> 1) & 3, code & 1
    return sign * (m * 0.5 if e == 0 else 2.0 ** (e - 1) * (1 + m / 2))


def pack_fp8(values, element):
    """(P, 4F) values -> (P, F) uint32, value j in byte j (bits 8j..8j+7)."""
    octets = np.asarray(values).astype(element).view(np.uint8).astype(np.uint64)
    octets = octets.reshape(octets.shape[0], -1, 4)
    return sum(octets[..., j] << (8 * j) for j in range(4)).astype(np.uint32)


def unpack(words, name):
    """(P, F) packed words -> float64 (P, F, 4)."""
    w = np.asarray(words).astype(np.uint64)
    if name == "float4_e2m1fn_x4":
        table = np.array([fp4_value(c) for c in range(16)])
        return np.stack([table[(w >> (4 * j)) & 0xF] for j in range(4)], axis=-1)
    element, _ = FP8_X4[name]
    octets = np.stack([(w >> (8 * j)) & 0xFF for j in range(4)], axis=-1).astype(np.uint8)
    return octets.view(element).astype(np.float64)


def scale_row(g):
    """Scale tile row of scaling group g (data partitions 8g..8g+7)."""
    return 32 * (g // 4) + g % 4


def spread_scales(scales, rows):
    """Contiguous (K/8, F) scales laid out in a (rows, F) tile the hardware way (other rows 0)."""
    out = np.zeros((rows, scales.shape[1]), dtype=np.uint8)
    for g in range(scales.shape[0]):
        out[scale_row(g)] = scales[g]
    return out


def random_mx(rng, k, f, name):
    """Packed words holding finite values of the element type."""
    if name == "float4_e2m1fn_x4":
        codes = rng.integers(0, 16, size=(k, f, 4)).astype(np.uint64)
        return sum(codes[..., j] << (4 * j) for j in range(4)).astype(np.uint16)
    element, _ = FP8_X4[name]
    limit = float(ml_dtypes.finfo(element).max)
    values = rng.uniform(-1, 1, size=(k, 4 * f)) * rng.choice([1.0, 0.01, limit / 2], size=(k, 1))
    return pack_fp8(values, element)


def quantize_reference(x, name):
    """(packed (P, F/4) uint32, contiguous scales (P/8, F/4) uint8) per the docs' scale formula."""
    element, emax = FP8_X4[name]
    v = x.astype(np.float64)
    p, f = v.shape
    amax = np.abs(v).reshape(p // 8, 8, f // 4, 4).max(axis=(1, 3))
    exponent = np.frexp(amax)[1] - 1  # floor(log2(amax)) for amax > 0
    scales = np.where(amax > 0, np.maximum(exponent - (emax - 1) + 127, 0), 0).astype(np.int64)
    factor = np.repeat(np.repeat(2.0 ** (scales - 127), 8, axis=0), 4, axis=1)
    return pack_fp8((v / factor).astype(np.float32), element), scales.astype(np.uint8)


def load_as(hbm, dtype):
    t = nl.ndarray(hbm.shape, dtype=dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=hbm)
    return t


# -- dtypes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "itemsize"), [("float8_e5m2_x4", 4), ("float8_e4m3fn_x4", 4), ("float4_e2m1fn_x4", 2)]
)
def test_packed_dtypes_exist_with_their_storage_size(name, itemsize):
    def kernel(words):
        by_constant = load_as(words, getattr(nl, name))
        by_string = nl.ndarray((32, 4), dtype=name, buffer=nl.sbuf)
        back = nl.ndarray(words.shape, dtype=words.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=back, src=by_constant)
        return dtype_name(by_constant.dtype), dtype_name(by_string.dtype), by_constant.itemsize, store(back)

    words = np.random.default_rng(0).integers(0, 2 ** (8 * itemsize), size=(32, 4)).astype(f"u{itemsize}")
    a, b, size, back = run_kernel(kernel, [words], "trn3")
    assert (a, b, size) == (name, name, itemsize)
    np.testing.assert_array_equal(back, words)


# -- quantize_mx ----------------------------------------------------------------------


def quantize_kernel(name, scale_partitions=None):
    def kernel(x):
        src = load(x)
        p, f = x.shape
        dst = nl.ndarray((p, f // 4), dtype=getattr(nl, name), buffer=nl.sbuf)
        scale = nl.ndarray((scale_partitions or p, f // 4), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.memset(dst=scale, value=0)
        nisa.quantize_mx(dst=dst, src=src, dst_scale=scale)
        return store(dst), store(scale)

    return kernel


def group_scaled(rng, p, f, dtype):
    """Normal values with a random power-of-two magnitude per scaling group (zero groups included)."""
    x = rng.standard_normal((p, f))
    mags = 2.0 ** rng.integers(-20, 12, size=(p // 8, f // 4))
    mags[rng.random(mags.shape) < 0.1] = 0.0
    return (x * np.repeat(np.repeat(mags, 8, axis=0), 4, axis=1)).astype(dtype)


@FAST
@given(
    p=st.sampled_from([32, 64, 96, 128]),
    f=st.integers(1, 96).map(lambda q: 4 * q),
    dtype=st.sampled_from((BF16, FP16)),
    name=st.sampled_from(tuple(FP8_X4)),
    seed=seeds,
)
def test_quantize_mx_matches_the_documented_scale_and_layout(p, f, dtype, name, seed):
    x = group_scaled(np.random.default_rng(seed), p, f, dtype)
    data, scale = run_kernel(quantize_kernel(name), [x], "trn3")
    ref_data, ref_scales = quantize_reference(x, name)
    assert dtype_name(data.dtype) == name
    np.testing.assert_array_equal(data.view(np.uint32), ref_data)
    np.testing.assert_array_equal(scale, spread_scales(ref_scales, p))


def test_quantize_mx_32_partitions_needs_only_4_scale_rows():
    x = group_scaled(np.random.default_rng(1), 32, 16, BF16)
    data, scale = run_kernel(quantize_kernel("float8_e4m3fn_x4", scale_partitions=4), [x], "trn3")
    ref_data, ref_scales = quantize_reference(x, "float8_e4m3fn_x4")
    np.testing.assert_array_equal(data.view(np.uint32), ref_data)
    np.testing.assert_array_equal(scale, ref_scales)


def test_quantize_mx_hand_computed_group():
    """One group with amax 6 (exponent 2): e4m3fn scale 2^(2-7) = 2^-5 -> byte 122; 6 / 2^-5 = 192."""
    x = np.zeros((32, 4), dtype=np.float32)
    x[0] = [6.0, -1.0, 0.5, 0.0]
    data, scale = run_kernel(quantize_kernel("float8_e4m3fn_x4", 4), [x.astype(BF16)], "trn3")
    assert scale[0, 0] == 122 and scale[1, 0] == 0
    expected = np.array([192.0, -32.0, 16.0, 0.0]).astype(E4M3FN).view(np.uint8)
    np.testing.assert_array_equal(np.frombuffer(data[0, 0].tobytes(), np.uint8), expected)


def test_quantize_mx_packs_scales_of_two_tensors_at_offsets_0_and_4():
    rng = np.random.default_rng(2)
    a, b = group_scaled(rng, 128, 32, BF16), group_scaled(rng, 128, 32, BF16)

    def kernel(x, y):
        scales = nl.ndarray((128, 8), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.memset(dst=scales, value=7)
        for src, view in ((x, scales[0:128, :]), (y, scales[4:128, :])):
            dst = nl.ndarray((128, 8), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
            nisa.quantize_mx(dst=dst, src=load(src), dst_scale=view)
        return store(scales)

    got = run_kernel(kernel, [a, b], "trn3")
    expected = np.full((128, 8), 7, dtype=np.uint8)
    for offset, src in ((0, a), (4, b)):
        _, s = quantize_reference(src, "float8_e5m2_x4")
        for g in range(16):
            expected[offset + scale_row(g)] = s[g]
    np.testing.assert_array_equal(got, expected)


# -- nc_matmul_mx ---------------------------------------------------------------------


def matmul_mx_reference(s_words, s_name, s_scales, m_words, m_name, m_scales):
    """float64 sum over k, j of dequantized stationary and moving values."""
    s = unpack(s_words, s_name) * np.repeat(2.0 ** (s_scales.astype(np.float64) - 127), 8, axis=0)[..., None]
    m = unpack(m_words, m_name) * np.repeat(2.0 ** (m_scales.astype(np.float64) - 127), 8, axis=0)[..., None]
    return np.einsum("kmj,knj->mn", s, m, optimize=True), np.einsum("kmj,knj->mn", np.abs(s), np.abs(m), optimize=True)


def mx_matmul_kernel(s_name, m_name, dst_dtype, repeats=1, tile=None):
    def kernel(sw, ss, mw, ms):
        k = sw.shape[0]
        dst = nl.ndarray((sw.shape[1], mw.shape[1]), dtype=dst_dtype, buffer=nl.psum)
        args = {"tile_position": tile[0], "tile_size": tile[1]} if tile else {}
        for _ in range(repeats):
            nisa.nc_matmul_mx(
                dst=dst,
                stationary=load_as(sw, getattr(nl, s_name)),
                moving=load_as(mw, getattr(nl, m_name)),
                stationary_scale=load(ss),
                moving_scale=load(ms),
                **args,
            )
        assert k % 32 == 0
        return store(dst)

    return kernel


@FAST
@given(
    k=st.sampled_from([32, 64, 96, 128]),
    m=st.integers(1, 64).map(lambda h: 2 * h),
    n=st.integers(1, 512),
    s_name=st.sampled_from(MX_NAMES),
    m_name=st.sampled_from(MX_NAMES),
    dst_dtype=st.sampled_from((FP32, BF16)),
    repeats=st.sampled_from([1, 2]),
    seed=seeds,
)
def test_nc_matmul_mx_dequantizes_and_contracts_over_4k(k, m, n, s_name, m_name, dst_dtype, repeats, seed):
    rng = np.random.default_rng(seed)
    sw, mw = random_mx(rng, k, m, s_name), random_mx(rng, k, n, m_name)
    s_scales = rng.integers(118, 130, size=(k // 8, m)).astype(np.uint8)
    m_scales = rng.integers(118, 130, size=(k // 8, n)).astype(np.uint8)
    got = run_kernel(
        mx_matmul_kernel(s_name, m_name, dst_dtype, repeats),
        [sw, spread_scales(s_scales, k), mw, spread_scales(m_scales, k)],
        "trn3",
    )
    ref, magnitude = matmul_mx_reference(sw, s_name, s_scales, mw, m_name, m_scales)
    ref, magnitude = ref * repeats, magnitude * repeats
    assert got.dtype == dst_dtype
    err = np.abs(got.astype(np.float64) - ref)
    if dst_dtype == FP32:
        assert np.all(err <= 1e-5 * magnitude + 1e-30)
    else:  # rounded to bf16 on every PSUM write
        assert np.all(err <= 2.0**-7 * (np.abs(ref) + magnitude) + 1e-30)


def test_nc_matmul_mx_row_tiling_gives_the_same_result():
    rng = np.random.default_rng(4)
    k, m, n = 64, 32, 40
    sw, mw = random_mx(rng, k, m, "float8_e4m3fn_x4"), random_mx(rng, k, n, "float4_e2m1fn_x4")
    ss = rng.integers(120, 128, size=(k // 8, m)).astype(np.uint8)
    ms = rng.integers(120, 128, size=(k // 8, n)).astype(np.uint8)
    inputs = [sw, spread_scales(ss, k), mw, spread_scales(ms, k)]
    whole = run_kernel(mx_matmul_kernel("float8_e4m3fn_x4", "float4_e2m1fn_x4", FP32), inputs, "trn3")
    tiled = run_kernel(
        mx_matmul_kernel("float8_e4m3fn_x4", "float4_e2m1fn_x4", FP32, tile=((64, 0), (64, 128))), inputs, "trn3"
    )
    np.testing.assert_array_equal(whole, tiled)
    ref, magnitude = matmul_mx_reference(sw, "float8_e4m3fn_x4", ss, mw, "float4_e2m1fn_x4", ms)
    assert np.all(np.abs(whole - ref) <= 1e-5 * magnitude)


def test_quantize_then_matmul_approximates_the_bf16_product():
    rng = np.random.default_rng(6)
    k, m, n = 128, 64, 128
    a = rng.standard_normal((k, 4 * m)).astype(BF16)
    b = rng.standard_normal((k, 4 * n)).astype(BF16)

    def kernel(x, y):
        tiles = []
        for src, f in ((x, m), (y, n)):
            q = nl.ndarray((k, f), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
            s = nl.ndarray((k, f), dtype=nl.uint8, buffer=nl.sbuf)
            nisa.quantize_mx(dst=q, src=load(src), dst_scale=s)
            tiles += [q, s]
        dst = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(
            dst=dst, stationary=tiles[0], moving=tiles[2], stationary_scale=tiles[1], moving_scale=tiles[3]
        )
        return store(dst)

    got = run_kernel(kernel, [a, b], "trn3")
    # the packed axis is the minor one: contraction index (k, j) pairs a[k, 4i + j] with b[k, 4l + j]
    ref = np.einsum("kmj,knj->mn", a.astype(np.float64).reshape(k, m, 4), b.astype(np.float64).reshape(k, n, 4))
    magnitude = np.einsum(
        "kmj,knj->mn", np.abs(a.astype(np.float64)).reshape(k, m, 4), np.abs(b.astype(np.float64)).reshape(k, n, 4)
    )
    assert np.all(np.abs(got - ref) <= 2 * 2.0**-4 * magnitude)


# -- costs ----------------------------------------------------------------------------


def test_costs():
    hw = load_target("trn3")
    k, m, n, f = 128, 96, 300, 2048

    def kernel():
        src = nl.ndarray((128, f), dtype=nl.bfloat16, buffer=nl.sbuf)
        q = nl.ndarray((128, f // 4), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
        s = nl.ndarray((128, f // 4), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(dst=q, src=src, dst_scale=s)
        sw = nl.ndarray((k, m), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        mw = nl.ndarray((k, n), dtype=nl.float4_e2m1fn_x4, buffer=nl.sbuf)
        ss = nl.ndarray((k, m), dtype=nl.uint8, buffer=nl.sbuf)
        ms = nl.ndarray((k, n), dtype=nl.uint8, buffer=nl.sbuf)
        dst = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(dst=dst, stationary=sw, moving=mw, stationary_scale=ss, moving_scale=ms)

    profile = nkisim.profile(kernel, [], target="trn3")
    quant, mm = profile.instructions
    assert (quant.opcode, quant.engine) == ("quantize_mx", "Vector")
    assert quant.end_ns - quant.start_ns == pytest.approx(max(hw.vector.min_ii_cycles, f / 4) / hw.vector.clock_ghz)
    assert (mm.opcode, mm.engine) == ("nc_matmul_mx", "Tensor")
    assert mm.end_ns - mm.start_ns == pytest.approx(max(min(64, m), n) / hw.tensor.clock_ghz)
    assert mm.flops == 2.0 * 4 * k * m * n


# -- validation -----------------------------------------------------------------------


def fails(kernel, error, match, target="trn3"):
    with pytest.raises(error, match=match):
        nkisim.run(kernel, [], target=target)


def tile(shape, dtype, buffer=nl.sbuf):
    return nl.ndarray(shape, dtype=dtype, buffer=buffer)


def quantize_call(src=((128, 64), "bfloat16"), dst=((128, 16), "float8_e5m2_x4"), scale=((128, 16), "uint8"), **kw):
    def kernel():
        scale_tile = tile(*scale)
        view = scale_tile[kw["scale_start"] :, :] if "scale_start" in kw else scale_tile
        dst_buffer = kw.get("dst_buffer", nl.sbuf)
        dst_tile = tile(*dst, buffer=dst_buffer)
        nisa.quantize_mx(dst=dst_tile, src=tile(*src), dst_scale=view)

    return kernel


def test_quantize_mx_validation():
    fails(quantize_call(), TargetError, r"NeuronCore-v4", target="trn2")
    fails(quantize_call(src=((128, 64), "float32")), DtypeError, r"src.*float16, bfloat16")
    fails(quantize_call(dst=((128, 16), "float4_e2m1fn_x4")), DtypeError, r"dst.*float8_e5m2_x4")
    fails(quantize_call(dst=((128, 16), "uint32")), DtypeError, r"dst.*uint32")
    fails(quantize_call(scale=((128, 16), "int8")), DtypeError, r"dst_scale.*uint8")
    fails(quantize_call(src=((48, 64), "bfloat16"), dst=((48, 16), "float8_e5m2_x4")), ShapeError, r"multiple of 32")
    fails(quantize_call(src=((128, 62), "bfloat16")), ShapeError, r"src.*multiple of 4")
    fails(quantize_call(dst=((128, 15), "float8_e5m2_x4")), ShapeError, r"dst.*16 packed")
    fails(quantize_call(dst=((64, 16), "float8_e5m2_x4")), ShapeError, r"dst.*128 partitions")
    fails(quantize_call(scale=((128, 15), "uint8")), ShapeError, r"dst_scale.*need 16")
    fails(quantize_call(scale=((128, 16), "uint8"), scale_start=2), OperandError, r"dst_scale.*0, 4, 8 or 12")
    fails(quantize_call(scale=((99, 16), "uint8")), ShapeError, r"dst_scale.*needs 100")
    fails(quantize_call(scale=((128, 16), "uint8"), dst_buffer=nl.psum), MemoryKindError, r"dst.*SBUF")


def matmul_call(
    stationary=((128, 64), "float8_e4m3fn_x4"),
    moving=((128, 256), "float8_e5m2_x4"),
    s_scale=((128, 64), "uint8"),
    m_scale=((128, 256), "uint8"),
    dst=((64, 256), "float32"),
    dst_buffer=nl.psum,
    s_buffer=nl.sbuf,
    **kw,
):
    def kernel():
        scale = tile(*s_scale)
        nisa.nc_matmul_mx(
            dst=tile(*dst, buffer=dst_buffer),
            stationary=tile(*stationary, buffer=s_buffer),
            moving=tile(*moving),
            stationary_scale=scale[kw["scale_start"] :, :] if "scale_start" in kw else scale,
            moving_scale=tile(*m_scale),
            tile_position=kw.get("tile_position"),
            tile_size=kw.get("tile_size"),
        )

    return kernel


@pytest.mark.placeholder_tiles
def test_nc_matmul_mx_validation():
    fails(matmul_call(), TargetError, r"NeuronCore-v4", target="trn2")
    fails(matmul_call(stationary=((128, 64), "bfloat16")), DtypeError, r"stationary.*float8_e5m2_x4")
    fails(matmul_call(moving=((128, 256), "uint32")), DtypeError, r"moving.*uint32")
    fails(matmul_call(s_scale=((128, 64), "float32")), DtypeError, r"stationary_scale.*uint8")
    fails(matmul_call(dst=((64, 256), "float16")), DtypeError, r"dst.*float32, bfloat16")
    fails(matmul_call(moving=((96, 256), "float8_e5m2_x4")), ShapeError, r"moving.*partition dim 96")
    fails(
        matmul_call(stationary=((48, 64), "float8_e4m3fn_x4"), moving=((48, 256), "float8_e5m2_x4")),
        ShapeError,
        r"multiple of 32",
    )
    fails(matmul_call(stationary=((128, 63), "float8_e4m3fn_x4"), dst=((63, 256), "float32")), ShapeError, r"even")
    fails(
        matmul_call(moving=((128, 513), "float8_e5m2_x4"), m_scale=((128, 513), "uint8"), dst=((64, 513), "float32")),
        ShapeError,
        r"moving.*exceeds 512",
    )
    fails(
        matmul_call(
            moving=((128, 1025), "float8_e5m2_x4"), m_scale=((128, 1025), "uint8"), dst=((64, 1025), "bfloat16")
        ),
        ShapeError,
        r"moving.*exceeds 1024",
    )
    fails(matmul_call(dst=((64, 255), "float32")), ShapeError, r"dst.*\[64, 256\]")
    fails(matmul_call(scale_start=6), OperandError, r"stationary_scale.*starts 6")
    nkisim.run(matmul_call(scale_start=12), [], target="trn3")
    fails(matmul_call(s_scale=((128, 63), "uint8")), ShapeError, r"stationary_scale.*needs one per packed")
    fails(matmul_call(m_scale=((64, 256), "uint8")), ShapeError, r"moving_scale.*needs 100")
    fails(matmul_call(dst_buffer=nl.sbuf), MemoryKindError, r"dst.*PSUM")
    fails(matmul_call(s_buffer=nl.psum), MemoryKindError, r"stationary.*SBUF")
    fails(matmul_call(tile_position=(0, 0), tile_size=(64, 64)), OperandError, r"column size 64 must be 128")
    fails(matmul_call(tile_position=(0, 32), tile_size=(32, 128)), OperandError, r"start column 32 must be 0")
    fails(matmul_call(tile_position=(32, 0), tile_size=(64, 128)), OperandError, r"start row 32")
    fails(matmul_call(tile_position=(0, 0), tile_size=(16, 128)), OperandError, r"row size 16")
    fails(matmul_call(tile_position=(0, 0)), OperandError, r"tile_position.*both")
    fails(matmul_call(tile_position=(0, 0), tile_size=(64, 128)), ShapeError, r"stationary.*64 rows")

    def bf16_1024_ok():
        matmul_call(
            moving=((128, 1024), "float8_e5m2_x4"), m_scale=((128, 1024), "uint8"), dst=((64, 1024), "bfloat16")
        )()

    nkisim.run(bf16_1024_ok, [], target="trn3")


# -- nc_matmul limits completed alongside ---------------------------------------------


def plain_matmul(k, m, n, s_dtype=nl.bfloat16, m_dtype=nl.bfloat16, dst_dtype=nl.float32, dst_n=None, **kw):
    def kernel():
        dst = tile((m, dst_n or n), dst_dtype, nl.psum)
        nisa.nc_matmul(dst=dst, stationary=tile((k, m), s_dtype), moving=tile((k, n), m_dtype), **kw)

    return kernel


@pytest.mark.placeholder_tiles
def test_nc_matmul_v4_moving_limit_is_the_whole_psum():
    nkisim.run(plain_matmul(128, 128, 8192, dst_dtype=nl.bfloat16), [], target="trn3")
    nkisim.run(plain_matmul(128, 128, 4096), [], target="trn3")
    fails(plain_matmul(128, 128, 8193, dst_dtype=nl.bfloat16, dst_n=8192), ShapeError, r"moving.*exceeds 8192 for")
    fails(plain_matmul(128, 128, 4097, dst_n=4096), ShapeError, r"moving.*exceeds 4096 for a float32")
    fails(plain_matmul(128, 128, 513), ShapeError, r"moving.*exceeds 512", target="trn2")


def test_nc_matmul_rejects_negative_tile_positions():
    fails(
        plain_matmul(64, 64, 64, tile_position=(-64, 0), tile_size=(64, 128)),
        OperandError,
        r"start row -64",
        target="trn1",
    )


# -- float8_e8m0fnu scale tiles --------------------------------------------------------


def test_float8_e8m0fnu_is_the_power_of_two_of_its_byte_minus_127():
    raw = np.array([0, 1, 126, 127, 128, 254], dtype=np.uint8)
    values = raw.view(nl.float8_e8m0fnu).astype(np.float64)
    np.testing.assert_array_equal(values, 2.0 ** (raw.astype(np.float64) - 127))
    assert dtype_name(nl.float8_e8m0fnu) == "float8_e8m0fnu" and nl.float8_e8m0fnu.itemsize == 1


def test_quantize_mx_writes_the_same_scale_bytes_to_a_float8_e8m0fnu_tile():
    def kernel(x):
        src = load(x)
        p, f = x.shape
        dst = nl.ndarray((p, f // 4), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
        scale = nl.ndarray((p, f // 4), dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)
        nisa.memset(dst=scale, value=1.0)  # 2 ** 0: byte 127
        nisa.quantize_mx(dst=dst, src=src, dst_scale=scale)
        return store(scale)

    x = group_scaled(np.random.default_rng(3), 64, 32, BF16)
    scale = run_kernel(kernel, [x], "trn3")
    _, ref_scales = quantize_reference(x, "float8_e5m2_x4")
    expected = spread_scales(ref_scales, 64)
    expected[np.arange(64) % 32 >= 4] = 127  # rows that hold no scale keep the memset value
    assert scale.dtype == nl.float8_e8m0fnu
    np.testing.assert_array_equal(scale.view(np.uint8), expected)


def test_nc_matmul_mx_reads_float8_e8m0fnu_scales_as_their_bytes():
    rng = np.random.default_rng(5)
    k, m, n = 32, 8, 16
    sw, mw = random_mx(rng, k, m, "float8_e4m3fn_x4"), random_mx(rng, k, n, "float8_e5m2_x4")
    s_scales = rng.integers(120, 130, size=(k // 8, m)).astype(np.uint8)
    m_scales = rng.integers(120, 130, size=(k // 8, n)).astype(np.uint8)
    spread_s, spread_m = spread_scales(s_scales, k), spread_scales(m_scales, k)
    got = run_kernel(
        mx_matmul_kernel("float8_e4m3fn_x4", "float8_e5m2_x4", FP32),
        [sw, spread_s.view(nl.float8_e8m0fnu), mw, spread_m.view(nl.float8_e8m0fnu)],
        "trn3",
    )
    ref, magnitude = matmul_mx_reference(sw, "float8_e4m3fn_x4", s_scales, mw, "float8_e5m2_x4", m_scales)
    assert np.all(np.abs(got.astype(np.float64) - ref) <= 1e-5 * magnitude + 1e-30)


def test_nc_matmul_mx_reads_only_the_scale_rows_of_each_quadrant():
    """Scale tiles whose padding rows were never written: no uninitialised read (the suite runs strict)."""
    rng = np.random.default_rng(11)
    k, m, n = 64, 8, 16
    sw, mw = random_mx(rng, k, m, "float8_e4m3fn_x4"), random_mx(rng, k, n, "float8_e4m3fn_x4")
    s_scales = rng.integers(120, 130, size=(k // 8, m)).astype(np.uint8)
    m_scales = rng.integers(120, 130, size=(k // 8, n)).astype(np.uint8)

    def kernel(s_words, s_dense, m_words, m_dense):
        def scale_tile(dense, width):
            tile_ = nl.ndarray((k, width), dtype=nl.uint8, buffer=nl.sbuf)
            for q in range(k // 32):  # 4 scale rows at the start of each 32-partition quadrant, nothing else
                nisa.dma_copy(dst=tile_[32 * q : 32 * q + 4, :], src=dense[4 * q : 4 * q + 4, :])
            return tile_

        dst = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
        stationary, moving = load_as(s_words, nl.float8_e4m3fn_x4), load_as(m_words, nl.float8_e4m3fn_x4)
        s_scale, m_scale = scale_tile(s_dense, m), scale_tile(m_dense, n)
        for _ in range(2):  # the second call repeats the first one's operand geometry
            nisa.nc_matmul_mx(
                dst=dst, stationary=stationary, moving=moving, stationary_scale=s_scale, moving_scale=m_scale
            )
        return store(dst)

    got = run_kernel(kernel, [sw, s_scales, mw, m_scales], "trn3")
    ref, magnitude = matmul_mx_reference(sw, "float8_e4m3fn_x4", s_scales, mw, "float8_e4m3fn_x4", m_scales)
    ref, magnitude = 2 * ref, 2 * magnitude
    assert np.all(np.abs(got.astype(np.float64) - ref) <= 1e-5 * magnitude + 1e-30)


def test_packed_dtypes_are_distinct_types_that_name_themselves():
    packed = [nl.float8_e5m2_x4, nl.float8_e4m3fn_x4, nl.float4_e2m1fn_x4]
    assert len({*packed, np.dtype(np.uint32), np.dtype(np.uint16)}) == 5  # a dict keyed by them keeps all
    for dtype, name in zip(packed, MX_NAMES):
        assert name in str(dtype) and dtype_name(dtype) == name
    assert nl.float8_e4m3fn_x4 != nl.float8_e5m2_x4 and nl.float8_e4m3fn_x4 != np.uint32


def test_a_packed_numpy_array_is_a_kernel_input_and_output():
    words = np.random.default_rng(2).integers(0, 2**32, size=(32, 8)).astype(np.uint32)

    def kernel(x):
        assert x.dtype == nl.float8_e4m3fn_x4
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=load(x))
        return out

    got = run_kernel(kernel, [words.view(nl.float8_e4m3fn_x4)], "trn3")
    assert got.dtype == nl.float8_e4m3fn_x4
    np.testing.assert_array_equal(got.view(np.uint32), words)
