"""Pseudo-random instructions: rng, rand2, dropout, set_rng_seed, rand_set_state, rand_get_state.

The generators are the ones docs/semantics.md documents, re-implemented here with
Python integers: per lane (partition), xorshift32 on the Vector Engine before
NeuronCore-v4; Marsaglia's XORWOW (state ``x0..x4, d``) on GpSimd and, four streams per
lane, on the NeuronCore-v4 Vector Engine; ``set_rng_seed`` expands a seed with
MurmurHash3's finaliser. Docs facts checked: same seed, same stream; state save and
restore; value ranges; dropout keeps values unscaled and drops about ``prob`` of them.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.errors import DtypeError, MemoryKindError, OperandError, ShapeError, TargetError
from nkisim.hw import load_target

from .conftest import (
    BF16,
    FAST,
    FP8S,
    FP16,
    FP32,
    INT8,
    INT16,
    INT32,
    UINT8,
    UINT16,
    UINT32,
    load,
    random_values,
    ref_cast,
    run_kernel,
    seeds,
    store,
    targets,
)

M32 = 0xFFFFFFFF
INT_TYPES = (INT8, INT16, INT32, UINT8, UINT16, UINT32)

# -- reference generators (Python integers) -------------------------------------------


def fmix32(h):
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & M32
    return h ^ (h >> 16)


def seeded(seed, lanes, words):
    """Word w of lane l: fmix32(seed + 0x9E3779B9 * (l * words + w + 1)), 0 replaced by 0x6D2B79F5."""
    out = np.zeros((lanes, words), dtype=np.uint64)
    for lane in range(lanes):
        for w in range(words):
            h = fmix32((seed + 0x9E3779B9 * (lane * words + w + 1)) & M32)
            out[lane, w] = h or 0x6D2B79F5
    return out.astype(np.uint32)


def xorshift32(x, n):
    out = []
    for _ in range(n):
        x ^= (x << 13) & M32
        x ^= x >> 17
        x ^= (x << 5) & M32
        out.append(x)
    return out, x


def xorwow(state, n, streams):
    """Marsaglia's XORWOW; ``state`` is a list of ``6 * streams`` ints, changed in place."""
    out = []
    for e in range(n):
        s = 6 * (e % streams)
        x0, x1, x2, x3, x4, d = state[s : s + 6]
        t = x4 ^ (x4 >> 2)
        t ^= (t << 1) & M32
        t ^= x0 ^ ((x0 << 4) & M32)
        d = (d + 362437) & M32
        state[s : s + 6] = [t, x0, x1, x2, x3, d]
        out.append((t + d) & M32)
    return out


def reference_words(rows, n, engine, nc_version):
    """(lanes, n) uint32 random words from state rows, and the rows after."""
    out, after = [], []
    for row in np.asarray(rows, dtype=np.uint64).tolist():
        if engine == "vector" and nc_version < 4:
            words, last = xorshift32(row[0], n)
            after.append([last])
        else:
            words = xorwow(row, n, 4 if engine == "vector" else 1)
            after.append(row)
        out.append(words)
    return np.array(out, dtype=np.uint64).astype(np.uint32), np.array(after, dtype=np.uint64).astype(np.uint32)


def words_per_lane(engine, nc_version):
    if engine == "gpsimd":
        return 6
    return 24 if nc_version >= 4 else 1


def as_bits(words, dtype):
    """The least significant bits of each word, as ``dtype``."""
    dtype = np.dtype(dtype)
    return words.astype(np.dtype(f"u{dtype.itemsize}")).view(dtype)


def unit(words):
    return (words >> 8).astype(np.float32) * np.float32(2.0**-24)


# -- kernels --------------------------------------------------------------------------


def seed_tile(seed):
    hbm = nl.shared_constant(np.array([[seed]], dtype=np.uint32), dtype=nl.uint32)
    return load(hbm)


def rng_kernel(shape, dtype, seed=None, engine="vector", draws=1):
    def kernel():
        if seed is not None:
            nisa.set_rng_seed(src_seeds=seed_tile(seed))
        outs = []
        for _ in range(draws):
            t = nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)
            nisa.rng(dst=t, engine=getattr(nisa, f"{engine}_engine"))
            outs.append(store(t))
        return outs

    return kernel


# -- seeding and determinism ----------------------------------------------------------


@FAST
@given(
    p=st.integers(1, 128),
    n=st.integers(1, 70),
    dtype=st.sampled_from(INT_TYPES),
    target=targets,
    seed=seeds,
)
def test_set_rng_seed_then_rng_is_the_documented_generator(p, n, dtype, target, seed):
    nc = load_target(target).nc_version
    (got,) = run_kernel(rng_kernel((p, n), dtype, seed=seed), [], target)
    expected, _ = reference_words(seeded(seed, 128, words_per_lane("vector", nc))[:p], n, "vector", nc)
    np.testing.assert_array_equal(got, as_bits(expected, dtype))


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_same_seed_same_stream_and_reseeding_restarts_it(target):
    seed = 0xC0FFEE

    def kernel():
        nisa.set_rng_seed(src_seeds=seed_tile(seed))
        outs = []
        for reseed in (False, False, True):
            if reseed:
                nisa.set_rng_seed(src_seeds=seed_tile(seed))
            t = nl.ndarray((128, 32), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.rng(dst=t)
            outs.append(store(t))
        return outs

    first, second, again = run_kernel(kernel, [], target)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, second)
    (other,) = run_kernel(rng_kernel((128, 32), UINT32, seed=seed + 1), [], target)
    assert not np.array_equal(first, other)
    a, b = (
        run_kernel(rng_kernel((128, 32), UINT32, draws=2), [], target),
        run_kernel(rng_kernel((128, 32), UINT32, draws=2), [], target),
    )
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


@pytest.mark.parametrize("target", ["trn1", "trn3"])
def test_unseeded_engines_start_as_if_seeded_with_zero(target):
    (unseeded,) = run_kernel(rng_kernel((16, 8), UINT32), [], target)
    (zero,) = run_kernel(rng_kernel((16, 8), UINT32, seed=0), [], target)
    np.testing.assert_array_equal(unseeded, zero)


def test_set_rng_seed_reads_the_bits_of_any_32_bit_type():
    def kernel():
        seed = load(nl.shared_constant(np.array([[1.5]], dtype=np.float32), dtype=nl.float32))
        nisa.set_rng_seed(src_seeds=seed)
        t = nl.ndarray((4, 4), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rng(dst=t)
        return store(t)

    got = run_kernel(kernel, [])
    (same,) = run_kernel(rng_kernel((4, 4), UINT32, seed=int(np.float32(1.5).view(np.uint32))), [])
    np.testing.assert_array_equal(got, same)


def test_rng_words_look_uniform():
    (words,) = run_kernel(rng_kernel((128, 512), UINT32, seed=7), [], "trn2")
    u = words.astype(np.float64) / 2**32
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / u.size)
    bits = (words[..., None] >> np.arange(32, dtype=np.uint32)) & 1
    np.testing.assert_allclose(bits.mean(axis=(0, 1)), 0.5, atol=5 * 0.5 / np.sqrt(words.size))


# -- engine states --------------------------------------------------------------------


STATE_CASES = [("trn2", "gpsimd"), ("trn3", "gpsimd"), ("trn3", "vector")]


@FAST
@given(
    case=st.sampled_from(STATE_CASES),
    p=st.integers(1, 128),
    n=st.integers(1, 40),
    dtype=st.sampled_from(INT_TYPES),
    seed=seeds,
)
def test_rand_set_state_then_rng_follows_xorwow(case, p, n, dtype, seed):
    target, engine = case
    nc = load_target(target).nc_version
    words = words_per_lane(engine, nc)
    state = np.random.default_rng(seed).integers(0, 2**32, size=(p, words), dtype=np.uint64).astype(np.uint32)
    eng = getattr(nisa, f"{engine}_engine")

    def kernel(s):
        nisa.rand_set_state(src_seeds=load(s), engine=eng)
        t = nl.ndarray((p, n), dtype=dtype, buffer=nl.sbuf)
        nisa.rng(dst=t, engine=eng)
        after = nl.ndarray((p, words), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rand_get_state(dst=after, engine=eng)
        return store(t), store(after)

    got, after = run_kernel(kernel, [state], target)
    expected, expected_after = reference_words(state, n, engine, nc)
    np.testing.assert_array_equal(got, as_bits(expected, dtype))
    np.testing.assert_array_equal(after, expected_after)


@pytest.mark.parametrize(("target", "engine"), STATE_CASES)
def test_state_save_and_restore_replays_the_stream(target, engine):
    words = words_per_lane(engine, load_target(target).nc_version)
    eng = getattr(nisa, f"{engine}_engine")

    def kernel():
        saved = nl.ndarray((128, words), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rand_get_state(dst=saved, engine=eng)
        outs = []
        for restore in (False, True):
            if restore:
                nisa.rand_set_state(src_seeds=saved, engine=eng)
            t = nl.ndarray((128, 20), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.rng(dst=t, engine=eng)
            outs.append(store(t))
        return outs

    first, replay = run_kernel(kernel, [], target)
    np.testing.assert_array_equal(first, replay)


def test_rand_get_state_defaults_to_gpsimd_and_engines_are_independent():
    def kernel():
        g0 = nl.ndarray((128, 6), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rand_get_state(dst=g0)
        t = nl.ndarray((128, 8), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rng(dst=t, engine=nisa.vector_engine)
        g1 = nl.ndarray((128, 6), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rand_get_state(dst=g1, engine=nisa.gpsimd_engine)
        return store(g0), store(g1)

    g0, g1 = run_kernel(kernel, [], "trn2")
    np.testing.assert_array_equal(g0, g1)
    np.testing.assert_array_equal(g0, seeded(0, 128, 6))


def test_lanes_are_absolute_partitions():
    """rng into partitions 32..63 of a tile draws from lanes 32..63."""
    state = np.random.default_rng(1).integers(0, 2**32, size=(128, 6), dtype=np.uint64).astype(np.uint32)

    def kernel(s):
        nisa.rand_set_state(src_seeds=load(s), engine=nisa.gpsimd_engine)
        t = nl.ndarray((128, 5), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rng(dst=t[32:64, :], engine=nisa.gpsimd_engine)
        return store(t[32:64, :])

    got = run_kernel(kernel, [state], "trn2")
    expected, _ = reference_words(state[32:64], 5, "gpsimd", 3)
    np.testing.assert_array_equal(got, expected)


# -- rand2 ----------------------------------------------------------------------------


@pytest.mark.filterwarnings(r"ignore:.*\[saturation\]:nkisim.CheckWarning")  # saturating casts on purpose
@FAST
@given(
    p=st.integers(1, 128),
    n=st.integers(1, 64),
    dtype=st.sampled_from((FP32, BF16, FP16, *FP8S, INT32, INT16, UINT8)),
    bounds=st.sampled_from([(0.0, 1.0), (-3.0, 5.0), (10.0, 250.0), (-100.5, -0.25)]),
    seed=seeds,
)
def test_rand2_is_min_plus_range_times_unit(p, n, dtype, bounds, seed):
    lo, hi = bounds

    def kernel():
        nisa.set_rng_seed(src_seeds=seed_tile(seed))
        t = nl.ndarray((p, n), dtype=dtype, buffer=nl.sbuf)
        nisa.rand2(dst=t, min=lo, max=hi)
        return store(t)

    got = run_kernel(kernel, [], "trn3")
    words, _ = reference_words(seeded(seed, 128, 24)[:p], n, "vector", 4)
    values = np.float32(lo) + (np.float32(hi) - np.float32(lo)) * unit(words)
    np.testing.assert_array_equal(got.astype(np.float64), ref_cast(values, dtype).astype(np.float64))
    f = got.astype(np.float64)
    low, high = (ref_cast(np.float32(b), dtype).astype(np.float64) for b in (lo, hi))
    assert np.all((f >= low) & (f <= high))


def test_rand2_with_per_partition_bounds():
    lo = np.arange(128, dtype=np.float32).reshape(128, 1)
    hi = lo + 0.5

    def kernel(a, b):
        t = nl.ndarray((128, 300), dtype=nl.float32, buffer=nl.sbuf)
        nisa.rand2(dst=t, min=load(a), max=load(b))
        return store(t)

    got = run_kernel(kernel, [lo, hi], "trn3")
    assert np.all((got >= lo) & (got <= hi))
    np.testing.assert_allclose(got.mean(axis=1) - lo[:, 0], 0.25, atol=0.06)


# -- dropout --------------------------------------------------------------------------


def dropout_kernel(prob, seed=3, prob_dtype=nl.float32):
    def kernel(x, *probs):
        nisa.set_rng_seed(src_seeds=seed_tile(seed))
        data = load(x)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dropout(dst=out, data=data, prob=load(probs[0]) if probs else prob)
        return store(out)

    return kernel


@FAST
@given(
    p=st.integers(1, 128),
    free=st.sampled_from([(1,), (33,), (4, 8), (256,)]),
    dtype=st.sampled_from((FP32, BF16, FP16, INT32, INT8, UINT16)),
    prob=st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]),
    target=targets,
    seed=seeds,
)
def test_dropout_zeroes_where_the_unit_draw_is_below_prob(p, free, dtype, prob, target, seed):
    x = random_values(np.random.default_rng(seed), (p, *free), dtype)
    got = run_kernel(dropout_kernel(prob, seed), [x], target)
    nc = load_target(target).nc_version
    words, _ = reference_words(seeded(seed, 128, words_per_lane("vector", nc))[:p], x[0].size, "vector", nc)
    drop = (unit(words) < np.float32(prob)).reshape(x.shape)
    expected = np.where(drop, np.zeros((), dtype), x)
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got.view(np.dtype(f"u{x.itemsize}")), expected.view(np.dtype(f"u{x.itemsize}")))


@pytest.mark.parametrize("target", ["trn1", "trn3"])
@pytest.mark.parametrize("prob", [0.05, 0.3, 0.75])
def test_dropout_keeps_values_unscaled_and_drops_about_prob(target, prob):
    x = np.random.default_rng(0).uniform(1.0, 2.0, size=(128, 512)).astype(np.float32)
    got = run_kernel(dropout_kernel(prob), [x], target)
    kept = got != 0
    np.testing.assert_array_equal(got[kept], x[kept])
    sigma = np.sqrt(prob * (1 - prob) / x.size)
    assert abs((~kept).mean() - prob) < 5 * sigma


def test_dropout_per_partition_prob_tile():
    x = np.ones((128, 2048), dtype=BF16)
    probs = np.linspace(0.0, 1.0, 128, dtype=np.float32).reshape(128, 1)
    got = run_kernel(dropout_kernel(None), [x, probs], "trn2")
    dropped = (got.astype(np.float32) == 0).mean(axis=1)
    sigma = np.sqrt(probs[:, 0] * (1 - probs[:, 0]) / 2048) + 1e-9
    assert np.all(np.abs(dropped - probs[:, 0]) <= 5 * sigma + 1e-6)
    assert dropped[0] == 0.0 and dropped[-1] == 1.0


def test_dropout_prob_tile_may_be_bf16_for_float_data():
    x = np.ones((4, 64), dtype=np.float32)
    probs = np.full((4, 1), 0.5, dtype=BF16)
    got = run_kernel(dropout_kernel(None), [x, probs])
    assert 0 < (got == 0).sum() < x.size


# -- costs ----------------------------------------------------------------------------


def duration(profile, opcode):
    (rec,) = [r for r in profile.instructions if r.opcode == opcode]
    return rec.engine, rec.end_ns - rec.start_ns


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize("n", [16, 1000])
def test_costs(target, n):
    hw = load_target(target)

    def kernel():
        t = nl.ndarray((128, n), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rng(dst=t)
        d = nl.ndarray((128, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dropout(dst=d, data=d, prob=0.5)
        if hw.nc_version >= 4:
            nisa.rand2(dst=d, min=0.0, max=1.0)
        if hw.nc_version >= 3:
            g = nl.ndarray((128, n), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.rng(dst=g, engine=nisa.gpsimd_engine)

    profile = nkisim.profile(kernel, [], target=target)
    v, g = hw.vector, hw.gpsimd
    prng = n * (0.25 if hw.nc_version >= 4 else 1.0)
    assert duration(profile, "dropout") == ("Vector", pytest.approx(max(v.min_ii_cycles, n) / v.clock_ghz))
    if hw.nc_version >= 4:
        assert duration(profile, "rand2") == ("Vector", pytest.approx(max(v.min_ii_cycles, prng) / v.clock_ghz))
    rng_records = [r for r in profile.instructions if r.opcode == "rng"]
    assert rng_records[0].engine == "Vector"
    assert rng_records[0].end_ns - rng_records[0].start_ns == pytest.approx(max(v.min_ii_cycles, prng) / v.clock_ghz)
    if hw.nc_version >= 3:
        assert rng_records[1].engine == "GpSimd"
        assert rng_records[1].end_ns - rng_records[1].start_ns == pytest.approx(max(g.min_ii_cycles, n) / g.clock_ghz)


# -- validation -----------------------------------------------------------------------


def fails(kernel, error, match, target="trn1"):
    with pytest.raises(error, match=match):
        nkisim.run(kernel, [], target=target)


def sb(shape, dtype=nl.uint32, buffer=nl.sbuf):
    return nl.ndarray(shape, dtype=dtype, buffer=buffer)


def test_rng_validation():
    fails(lambda: nisa.rng(dst=sb((4, 4), nl.float32)), DtypeError, r"dst.*dtype float32 must be one of int8")
    fails(lambda: nisa.rng(dst=sb((4, 4), nl.bool_)), DtypeError, r"dst.*bool_")
    fails(lambda: nisa.rng(dst=sb((4, 4)), engine=nisa.gpsimd_engine), TargetError, r"GpSimd.*NeuronCore-v3")
    fails(
        lambda: nisa.rng(dst=sb((4, 4), buffer=nl.psum), engine=nisa.gpsimd_engine),
        MemoryKindError,
        r"PSUM",
        target="trn2",
    )
    fails(lambda: nisa.rng(dst=sb((4, 4)), engine=nisa.scalar_engine), OperandError, r"engine")


def test_rand2_validation():
    fails(lambda: nisa.rand2(dst=sb((4, 4), nl.float32), min=0.0, max=1.0), TargetError, r"NeuronCore-v4", "trn2")
    fails(lambda: nisa.rand2(dst=sb((4, 4), nl.float32), min=1.0, max=1.0), OperandError, r"min.*less than", "trn3")
    fails(lambda: nisa.rand2(dst=sb((4, 4), nl.float32), min=2.0, max=1.0), OperandError, r"min.*less than", "trn3")
    fails(
        lambda: nisa.rand2(dst=sb((4, 4), nl.float8_e4m3fn), min=0.0, max=1.0),
        DtypeError,
        r"dst.*float8_e4m3fn",
        "trn3",
    )
    fails(lambda: nisa.rand2(dst=sb((4, 4), nl.bool_), min=0.0, max=1.0), DtypeError, r"dst", "trn3")
    fails(
        lambda: nisa.rand2(dst=sb((4, 4), nl.float32), min=sb((4, 2), nl.float32), max=1.0),
        ShapeError,
        r"min.*\(4, 1\)",
        "trn3",
    )


def test_dropout_validation():
    f32, i32 = nl.float32, nl.int32
    fails(lambda: nisa.dropout(dst=sb((4, 8), nl.bfloat16), data=sb((4, 8), f32), prob=0.5), DtypeError, r"dst.*match")
    fails(lambda: nisa.dropout(dst=sb((4, 7), f32), data=sb((4, 8), f32), prob=0.5), ShapeError, r"dst")
    fails(
        lambda: nisa.dropout(dst=sb((4, 8), i32), data=sb((4, 8), i32), prob=sb((4, 1), nl.bfloat16)),
        DtypeError,
        r"prob.*float32 when data is an integer",
    )
    fails(
        lambda: nisa.dropout(dst=sb((4, 8), f32), data=sb((4, 8), f32), prob=sb((4, 1), nl.int32)),
        DtypeError,
        r"prob.*float type",
    )
    fails(
        lambda: nisa.dropout(dst=sb((4, 8), f32), data=sb((4, 8), f32), prob=sb((2, 1), f32)),
        ShapeError,
        r"prob.*\(4, 1\)",
    )


def test_set_rng_seed_validation():
    fails(lambda: nisa.set_rng_seed(src_seeds=sb((1, 2))), ShapeError, r"src_seeds.*\[1, 1\]")
    fails(lambda: nisa.set_rng_seed(src_seeds=sb((2, 1))), ShapeError, r"src_seeds.*\[1, 1\]")
    fails(lambda: nisa.set_rng_seed(src_seeds=sb((1, 1), nl.uint16)), DtypeError, r"src_seeds.*32-bit")

    def from_hbm():
        nisa.set_rng_seed(src_seeds=nl.ndarray((1, 1), dtype=nl.uint32, buffer=nl.shared_hbm))

    fails(from_hbm, MemoryKindError, r"src_seeds")


def test_rand_state_validation():
    fails(lambda: nisa.rand_set_state(src_seeds=sb((4, 6))), TargetError, r"NeuronCore-v3")
    fails(lambda: nisa.rand_get_state(dst=sb((4, 6))), TargetError, r"NeuronCore-v3")
    fails(
        lambda: nisa.rand_set_state(src_seeds=sb((4, 24)), engine=nisa.vector_engine),
        TargetError,
        r"NeuronCore-v4",
        "trn2",
    )
    fails(lambda: nisa.rand_set_state(src_seeds=sb((4, 24))), ShapeError, r"keeps 6", "trn2")
    fails(
        lambda: nisa.rand_get_state(dst=sb((4, 6)), engine=nisa.vector_engine),
        ShapeError,
        r"Vector Engine keeps 24",
        "trn3",
    )
    fails(lambda: nisa.rand_get_state(dst=sb((4, 6), nl.int32)), DtypeError, r"dst.*uint32", "trn2")
    fails(lambda: nisa.rand_set_state(src_seeds=sb((4, 2, 3))), ShapeError, r"2-D", "trn2")
    fails(lambda: nisa.rand_get_state(dst=sb((4, 6), buffer=nl.psum)), MemoryKindError, r"PSUM", "trn2")

    def vector_psum_ok():
        d = sb((4, 24), buffer=nl.psum)
        nisa.rand_get_state(dst=d, engine=nisa.vector_engine)
        nisa.rand_set_state(src_seeds=d, engine=nisa.vector_engine)

    nkisim.run(vector_psum_ok, [], target="trn3")
