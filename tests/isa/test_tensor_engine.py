"""Tensor Engine: nisa.nc_matmul (PSUM accumulation) and nisa.nc_transpose (Tensor and Vector Engines).

Matmul references: float64 products of the float32 values of the inputs, summed in
float64 and cast to float32. The Tensor Engine accumulates in float32 in some order,
so results are compared with rtol 1e-5 against the magnitude sum |S|.T @ |M|.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import nkisim.nki.isa as nisa
import nkisim.nki.language as nl

from .conftest import (
    BF16,
    BITVEC_INTS,
    FAST,
    FLOATS,
    FP8S,
    FP16,
    FP32,
    assert_bits_equal,
    assert_values_equal,
    f32,
    load,
    random_bits,
    random_values,
    ref_cast,
    run_kernel,
    seeds,
    small_values,
    store,
    targets,
)

FP8_E4M3FN = np.dtype(ml_dtypes.float8_e4m3fn)
LOW_PRECISION = (BF16, FP16, *FP8S)


def matmul_reference(pairs):
    """sum over (stationary, moving) pairs of stationary.T @ moving, in float64, and its magnitude."""
    total = 0.0
    magnitude = 0.0
    for s, m in pairs:
        s64, m64 = f32(s).astype(np.float64), f32(m).astype(np.float64)
        total = total + s64.T @ m64
        magnitude = magnitude + np.abs(s64).T @ np.abs(m64)
    return np.asarray(total), np.asarray(magnitude)


def assert_matmul_close(got, pairs, rtol=1e-5):
    """Within float32 accumulation error: |got - ref| <= rtol * |ref| + rtol * (|S|.T @ |M|)."""
    ref, magnitude = matmul_reference(pairs)
    assert got.dtype == FP32
    err = np.abs(got.astype(np.float64) - ref.astype(np.float32))
    bound = rtol * np.abs(ref) + rtol * magnitude
    assert got.shape == ref.shape
    assert np.all(err <= bound), f"max error {np.max(err - bound)} above the bound"


def matmul_kernel(s, m):
    psum = nl.ndarray((s.shape[1], m.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=psum, stationary=load(s), moving=load(m))
    return store(psum)


@st.composite
def matmul_shapes(draw, max_k=128, max_m=128, max_n=512):
    return draw(st.integers(1, max_k)), draw(st.integers(1, max_m)), draw(st.integers(1, max_n))


@FAST
@given(kmn=matmul_shapes(), target=targets, seed=seeds)
def test_matmul_fp32(kmn, target, seed):
    """dst[M, N] = stationary[K, M].T @ moving[K, N] for float32 inputs, float32 accumulation."""
    k, m, n = kmn
    rng = np.random.default_rng(seed)
    s = random_values(rng, (k, m), FP32)
    mv = random_values(rng, (k, n), FP32)
    got = run_kernel(matmul_kernel, [s, mv], target)
    assert got.shape == (m, n)
    assert_matmul_close(got, [(s, mv)])


@FAST
@given(
    kmn=matmul_shapes(),
    sdt=st.sampled_from(LOW_PRECISION),
    mdt=st.sampled_from(LOW_PRECISION),
    target=targets,
    seed=seeds,
)
def test_matmul_low_precision_inputs(kmn, sdt, mdt, target, seed):
    """bf16/fp16/fp8 inputs (mixed allowed) multiply exactly and accumulate in float32."""
    k, m, n = kmn
    rng = np.random.default_rng(seed)
    s = random_values(rng, (k, m), sdt)
    mv = random_values(rng, (k, n), mdt)
    got = run_kernel(matmul_kernel, [s, mv], target)
    assert_matmul_close(got, [(s, mv)])


def test_matmul_hand_case():
    s = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)  # [K=3, M=2]
    mv = np.array([[1.0, 0.0, -1.0], [0.0, 1.0, 2.0], [1.0, 1.0, 1.0]], np.float32)  # [K=3, N=3]
    np.testing.assert_array_equal(run_kernel(matmul_kernel, [s, mv]), [[6, 8, 10], [8, 10, 12]])
    # bf16 inputs: 1 + 2^-7 squared is exact in float32, not representable in bf16
    a = np.array([[1 + 2**-7]], BF16)
    np.testing.assert_array_equal(run_kernel(matmul_kernel, [a, a]), [[np.float32((1 + 2**-7) ** 2)]])


@FAST
@given(
    kmn=matmul_shapes(max_n=256),
    count=st.integers(2, 4),
    dtype=st.sampled_from((FP32, BF16)),
    target=targets,
    seed=seeds,
)
def test_matmul_psum_accumulation(kmn, count, dtype, target, seed):
    """The first matmul write to a fresh PSUM tile overwrites it; later ones add to it."""
    k, m, n = kmn
    rng = np.random.default_rng(seed)
    pairs = [(random_values(rng, (k, m), dtype), random_values(rng, (k, n), dtype)) for _ in range(count)]

    def kernel(*xs):
        psum = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
        for i in range(0, len(xs), 2):
            nisa.nc_matmul(psum, load(xs[i]), load(xs[i + 1]))
        return store(psum)

    got = run_kernel(kernel, [x for pair in pairs for x in pair], target)
    assert_matmul_close(got, pairs)


def test_matmul_accumulation_is_per_location():
    """Matmuls into disjoint column ranges of one PSUM tile each overwrite first, then accumulate."""
    rng = np.random.default_rng(7)
    k, m, n = 16, 8, 12
    a, b, c = (random_values(rng, (k, m), FP32) for _ in range(3))
    x, y, z = (random_values(rng, (k, n), FP32) for _ in range(3))

    def kernel(a, b, c, x, y, z):
        psum = nl.ndarray((m, 2 * n), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(psum[:, 0:n], load(a), load(x))
        nisa.nc_matmul(psum[:, n : 2 * n], load(b), load(y))
        nisa.nc_matmul(psum[:, 0:n], load(c), load(z))
        return store(psum)

    got = run_kernel(kernel, [a, b, c, x, y, z])
    assert_matmul_close(got[:, :n], [(a, x), (c, z)])
    assert_matmul_close(got[:, n:], [(b, y)])


@st.composite
def tiled_problems(draw):
    tk = draw(st.sampled_from([32, 64, 128]))
    return {
        "tk": tk,
        "kt": draw(st.integers(1, 4)),
        "tm": draw(st.integers(1, 128)),
        "mt": draw(st.integers(1, 2)),
        "tn": draw(st.integers(1, 512)),
        "nt": draw(st.integers(1, 2)),
        "dtype": draw(st.sampled_from((FP32, BF16, FP16))),
        "out": draw(st.sampled_from((FP32, BF16))),
    }


@FAST
@given(prob=tiled_problems(), target=targets, seed=seeds)
def test_tiled_matmul_accumulates_k_over_affine_range(prob, target, seed):
    """The NKI tutorial pattern: one fresh PSUM tile per output block, K accumulated over an affine_range.

    C[M, N] = A[M, K] @ B[K, N], with A given transposed as lhs_t[K, M].
    """
    tk, kt, tm, mt, tn, nt = (prob[x] for x in ("tk", "kt", "tm", "mt", "tn", "nt"))
    dtype, out_dtype = prob["dtype"], prob["out"]
    rng = np.random.default_rng(seed)
    make = random_values if out_dtype == FP32 else small_values
    lhs_t = make(rng, (tk * kt, tm * mt), dtype)
    rhs = make(rng, (tk * kt, tn * nt), dtype)

    def kernel(lhs_t, rhs):
        result = nl.ndarray((tm * mt, tn * nt), dtype=out_dtype, buffer=nl.shared_hbm)
        for mi in nl.affine_range(mt):
            for ni in nl.affine_range(nt):
                acc = nl.ndarray((tm, tn), dtype=nl.float32, buffer=nl.psum)
                for ki in nl.affine_range(kt):
                    a_tile = nl.ndarray((tk, tm), dtype=lhs_t.dtype, buffer=nl.sbuf)
                    b_tile = nl.ndarray((tk, tn), dtype=rhs.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=a_tile, src=lhs_t[ki * tk : (ki + 1) * tk, mi * tm : (mi + 1) * tm])
                    nisa.dma_copy(dst=b_tile, src=rhs[ki * tk : (ki + 1) * tk, ni * tn : (ni + 1) * tn])
                    nisa.nc_matmul(dst=acc, stationary=a_tile, moving=b_tile)
                res = nl.ndarray((tm, tn), dtype=out_dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=res, src=acc)
                nisa.dma_copy(dst=result[mi * tm : (mi + 1) * tm, ni * tn : (ni + 1) * tn], src=res)
        return result

    got = run_kernel(kernel, [lhs_t, rhs], target)
    if out_dtype == FP32:
        assert_matmul_close(got, [(lhs_t, rhs)])
    else:
        # integer-valued inputs: the float32 sums are exact, so only the bf16 rounding of the copy remains
        ref, _ = matmul_reference([(lhs_t, rhs)])
        assert_values_equal(got, ref_cast(ref.astype(np.float32), BF16))


@FAST
@given(
    kmn=matmul_shapes(max_n=128),
    dtype=st.sampled_from((FP32, BF16, FP16)),
    target=st.sampled_from(["trn2", "trn3"]),
    seed=seeds,
)
def test_matmul_is_transpose_is_bit_exact(kmn, dtype, target, seed):
    """NeuronCore-v3+: is_transpose=True with an identity moving tile copies stationary.T bit-exactly."""
    k, m, _ = kmn
    s = random_bits(np.random.default_rng(seed), (k, m), dtype)
    ident = np.eye(k).astype(dtype)

    def kernel(s, ident):
        psum = nl.ndarray((m, k), dtype=s.dtype, buffer=nl.psum)
        nisa.nc_matmul(dst=psum, stationary=load(s), moving=load(ident), is_transpose=True)
        return store(psum)

    assert_bits_equal(run_kernel(kernel, [s, ident], target), np.ascontiguousarray(s.T))


@FAST
@given(kmn=matmul_shapes(max_n=256), dtype=st.sampled_from((BF16, FP16)), seed=seeds)
def test_matmul_bf16_dst_on_trn3(kmn, dtype, seed):
    """NeuronCore-v4 may write a bfloat16 dst: the float32 result rounded to bf16."""
    k, m, n = kmn
    rng = np.random.default_rng(seed)
    s = small_values(rng, (k, m), dtype)
    mv = small_values(rng, (k, n), dtype)

    def kernel(s, mv):
        psum = nl.ndarray((m, n), dtype=nl.bfloat16, buffer=nl.psum)
        nisa.nc_matmul(dst=psum, stationary=load(s), moving=load(mv))
        return store(psum)

    # small halves: the float32 sum is exact, so only the bf16 rounding remains
    expected = ref_cast((f32(s).astype(np.float64).T @ f32(mv).astype(np.float64)).astype(np.float32), BF16)
    assert_values_equal(run_kernel(kernel, [s, mv], "trn3"), expected)


# -- nc_transpose ---------------------------------------------------------------------


@st.composite
def transpose_shapes(draw, limit):
    p = draw(st.integers(1, limit))
    if draw(st.booleans()):
        return p, (draw(st.integers(1, limit)),)
    a = draw(st.integers(1, min(8, limit)))
    b = draw(st.integers(1, max(1, limit // a)))
    return p, (a, b)


@FAST
@given(
    shape=transpose_shapes(128),
    dtype=st.sampled_from((*FLOATS, *FP8S, *BITVEC_INTS)),
    target=st.sampled_from(["trn2", "trn3"]),
    seed=seeds,
)
def test_nc_transpose_tensor_engine_bit_exact(shape, dtype, target, seed):
    """NeuronCore-v3+ Tensor Engine transpose (SBUF -> PSUM, up to 128x128) is bit-accurate, NaN/Inf included.

    Several free dims are flattened first: data [P, a, b] -> dst [a*b, P].
    """
    p, free = shape
    f = int(np.prod(free))
    data = random_bits(np.random.default_rng(seed), (p, *free), dtype)

    def kernel(x):
        dst = nl.ndarray((f, p), dtype=x.dtype, buffer=nl.psum)
        nisa.nc_transpose(dst=dst, data=load(x), engine=nisa.tensor_engine)
        return store(dst)

    assert_bits_equal(run_kernel(kernel, [data], target), np.ascontiguousarray(data.reshape(p, f).T))


@FAST
@given(shape=transpose_shapes(128), dtype=st.sampled_from((*FLOATS, *FP8S)), seed=seeds)
def test_nc_transpose_tensor_engine_trn1_finite_values(shape, dtype, seed):
    """NeuronCore-v2 Tensor Engine transpose: exact for finite values (not bit-accurate for NaN/Inf)."""
    p, free = shape
    f = int(np.prod(free))
    data = random_values(np.random.default_rng(seed), (p, *free), dtype)

    def kernel(x):
        dst = nl.ndarray((f, p), dtype=x.dtype, buffer=nl.psum)
        nisa.nc_transpose(dst=dst, data=load(x))  # SBUF -> PSUM picks the Tensor Engine
        return store(dst)

    assert_values_equal(run_kernel(kernel, [data], "trn1"), np.ascontiguousarray(data.reshape(p, f).T))


@FAST
@given(
    shape=transpose_shapes(32),
    dtype=st.sampled_from((*FLOATS, *FP8S, *BITVEC_INTS)),
    src_psum=st.booleans(),
    dst_psum=st.booleans(),
    target=targets,
    seed=seeds,
)
def test_nc_transpose_vector_engine(shape, dtype, src_psum, dst_psum, target, seed):
    """Vector Engine transpose (up to 32x32, SBUF or PSUM on either side) moves bits unchanged."""
    p, free = shape
    f = int(np.prod(free))
    data = random_bits(np.random.default_rng(seed), (p, *free), dtype)

    def kernel(x):
        dst = nl.ndarray((f, p), dtype=x.dtype, buffer=nl.psum if dst_psum else nl.sbuf)
        nisa.nc_transpose(dst=dst, data=load(x, "psum" if src_psum else "sbuf"), engine=nisa.vector_engine)
        return store(dst)

    assert_bits_equal(run_kernel(kernel, [data], target), np.ascontiguousarray(data.reshape(p, f).T))


def test_nc_transpose_hand_case():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for engine in (nisa.tensor_engine, nisa.vector_engine):

        def kernel(t, engine=engine):
            dst = nl.ndarray((3, 2), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_transpose(dst, load(t), engine=engine)
            return store(dst)

        np.testing.assert_array_equal(run_kernel(kernel, [x]), [[0, 3], [1, 4], [2, 5]])


@FAST
@given(kmn=matmul_shapes(max_n=128), dtype=st.sampled_from((BF16, FP16)), seed=seeds)
def test_matmul_is_transpose_on_trn1_is_still_a_matmul(kmn, dtype, seed):
    """NeuronCore-v2 has no transpose mode: is_transpose=True only labels the instruction, dst = S.T @ M in fp32."""
    k, m, n = kmn
    rng = np.random.default_rng(seed)
    s = random_values(rng, (k, m), dtype)
    mv = random_values(rng, (k, n), dtype)

    def kernel(s, mv):
        psum = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=psum, stationary=load(s), moving=load(mv), is_transpose=True)
        return store(psum)

    assert_matmul_close(run_kernel(kernel, [s, mv], "trn1"), [(s, mv)])


def round_tf32(x):
    """float32 -> tfloat32 (1 sign, 8 exponent, 10 mantissa bits), round to nearest even; normal numbers."""
    mantissa, exponent = np.frexp(np.asarray(x, dtype=np.float64))
    return (np.rint(mantissa * 2.0**11) * np.exp2(exponent - 11)).astype(np.float32)


@FAST
@given(kmn=matmul_shapes(), target=targets, seed=seeds)
def test_matmul_tfloat32_inputs(kmn, target, seed):
    """float32 data cast to tfloat32 tiles (RNE to 10 mantissa bits) multiply in the float32 class of the PE."""
    k, m, n = kmn
    rng = np.random.default_rng(seed)
    s = random_values(rng, (k, m), FP32)
    mv = random_values(rng, (k, n), FP32)

    def kernel(s, mv):
        ts = nl.ndarray(s.shape, dtype=nl.tfloat32, buffer=nl.sbuf)
        tm = nl.ndarray(mv.shape, dtype=nl.tfloat32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ts, src=s)
        nisa.tensor_copy(dst=tm, src=load(mv))
        psum = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=psum, stationary=ts, moving=tm)
        out = nl.ndarray(s.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=ts)
        return store(psum), out

    got, s_tf32 = run_kernel(kernel, [s, mv], target)
    assert_bits_equal(s_tf32, round_tf32(s))
    assert_matmul_close(got, [(round_tf32(s), round_tf32(mv))])


def test_tfloat32_rounding_hand_case():
    """Ties round to even at 2^-10 spacing near 1."""
    x = np.array([[1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-12, -(1 + 5 * 2**-12)]], np.float32)

    def kernel(a):
        t = nl.ndarray(a.shape, dtype=nl.tfloat32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    np.testing.assert_array_equal(run_kernel(kernel, [x]), [[1.0, 1 + 2**-9, 1.0, -(1 + 2**-10)]])


@FAST
@given(
    kmn=matmul_shapes(),
    sdt=st.sampled_from((FP8_E4M3FN, BF16, *FP8S)),
    mdt=st.sampled_from((FP8_E4M3FN, FP16)),
    seed=seeds,
)
def test_matmul_float8_e4m3fn_on_trn3(kmn, sdt, mdt, seed):
    """NeuronCore-v4 also takes float8_e4m3fn inputs."""
    k, m, n = kmn
    rng = np.random.default_rng(seed)
    s = random_values(rng, (k, m), sdt, scale=8.0)
    mv = random_values(rng, (k, n), mdt, scale=8.0)
    assert_matmul_close(run_kernel(matmul_kernel, [s, mv], "trn3"), [(s, mv)])


def test_fresh_psum_tiles_start_over_in_a_loop():
    """Each iteration's new PSUM tile (which may reuse a freed tile's bytes) is overwritten by its first matmul."""
    rng = np.random.default_rng(3)
    k, m, n, iters = 32, 16, 64, 5
    ss = [random_values(rng, (k, m), BF16) for _ in range(iters)]
    ms = [random_values(rng, (k, n), BF16) for _ in range(iters)]

    def kernel(*xs):
        out = nl.ndarray((iters, m, n), dtype=nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(iters):
            acc = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(acc, load(xs[i]), load(xs[iters + i]))
            nisa.nc_matmul(acc, load(xs[i]), load(xs[iters + i]))
            res = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[i], src=res)
        return out

    got = run_kernel(kernel, [*ss, *ms])
    for i in range(iters):
        assert_matmul_close(got[i], [(ss[i], ms[i]), (ss[i], ms[i])])


@given(
    rows=st.integers(1, 128),
    cols=st.integers(1, 600),
    mode=st.sampled_from([None, True, False]),
    mine=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_psum_accumulate_compiled_pass_matches_a_numpy_formula_bit_for_bit(rows, cols, mode, mine, seed):
    """The one-pass PSUM write adds where the tile's own matmuls wrote (or everywhere, or nowhere)."""
    from nkisim.isa.tensor_engine import _ADD, _INFER, _OVERWRITE, accumulate_f32, accumulate_reference

    rng = np.random.default_rng(seed)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 3e38], np.float32)
    # strided like a PSUM tile: rows of a wider storage
    dst_store = rng.standard_normal((rows, cols + 7)).astype(np.float32)
    dst_store.flat[rng.integers(0, dst_store.size, 5)] = rng.choice(specials, 5)
    product = rng.standard_normal((rows, cols)).astype(np.float32)
    product.flat[rng.integers(0, product.size, 5)] = rng.choice(specials, 5)
    owners_store = np.where(rng.random((rows, cols + 7)) < mine, 42, rng.integers(0, 41, (rows, cols + 7))).astype(
        np.int32
    )
    dst, owners = dst_store[:, 3 : 3 + cols], owners_store[:, 3 : 3 + cols]
    twin_dst, twin_owners = dst.copy(), owners.copy()
    outside = np.concatenate([dst_store[:, :3], dst_store[:, 3 + cols :]], axis=1).copy()
    adds = np.full(dst.shape, mode) if mode is not None else owners == 42
    expected = np.where(adds, dst + product, product)

    accumulate_f32(dst, owners, product, 42, {None: _INFER, True: _ADD, False: _OVERWRITE}[mode])
    accumulate_reference(twin_dst, twin_owners, product, 42, mode)

    assert_bits_equal(dst, expected)
    assert_bits_equal(twin_dst, expected)
    assert (owners == 42).all() and (twin_owners == 42).all()
    assert_bits_equal(np.concatenate([dst_store[:, :3], dst_store[:, 3 + cols :]], axis=1), outside)
