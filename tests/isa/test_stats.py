"""Vector Engine statistics: bn_stats, bn_aggr, max8, nc_find_index8, nc_match_replace8.

References follow the NKI docs: bn_stats gives (count, mean, variance * count) of the
even and of the odd elements of each partition; bn_aggr merges such triples into a
mean and a population variance; max8 gives the 8 largest values in descending order;
nc_find_index8 the first occurrence of each value (all-ones when absent, duplicates
taking successive occurrences); nc_match_replace8 replaces first occurrences, pairing
duplicate vals with occurrences in reverse column order.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.errors import DtypeError, ShapeError
from nkisim.hw import load_target
from nkisim.isa.stats import bn_stats_numba, bn_stats_reference, match_positions, match_positions_numba, top8_numba

from .conftest import (
    BF16,
    FAST,
    FLOATS,
    FP8S,
    FP32,
    INT8,
    INT32,
    UINT16,
    UINT32,
    assert_values_equal,
    f32,
    load,
    random_values,
    ref_cast,
    run_kernel,
    run_tile,
    seeds,
    small_values,
    store,
    targets,
)

# -- references -----------------------------------------------------------------------


def stats_reference(x):
    """(count, mean, variance * count) of even then odd elements per row, in float64."""
    rows = f32(x).reshape(x.shape[0], -1).astype(np.float64)
    out = []
    for part in (rows[:, 0::2], rows[:, 1::2]):
        count = part.shape[1]
        mean = part.mean(axis=1) if count else np.zeros(rows.shape[0])
        m2 = ((part - mean[:, None]) ** 2).sum(axis=1) if count else np.zeros(rows.shape[0])
        out += [np.full(rows.shape[0], count, dtype=np.float64), mean, m2]
    return np.stack(out, axis=1)


def aggregate_reference(triples):
    """Population mean and variance from (count, mean, m2) triples: sum-of-parts formulas."""
    t = np.asarray(triples, dtype=np.float64).reshape(triples.shape[0], -1, 3)
    n, mu, m2 = t[..., 0], t[..., 1], t[..., 2]
    total = n.sum(axis=1)
    mean = (n * mu).sum(axis=1) / total
    var = (m2 + n * (mu - mean[:, None]) ** 2).sum(axis=1) / total
    return mean, var


def top8_reference(x):
    rows = f32(x).reshape(x.shape[0], -1)
    return np.sort(rows, axis=1)[:, ::-1][:, :8]


def find_index_reference(data, vals, order, missing):
    """Each val (in ``order``) takes the first equal position not yet taken by another val."""
    d = f32(data).reshape(data.shape[0], -1)
    v = f32(vals).reshape(vals.shape[0], -1)
    idx = np.full(v.shape, missing, dtype=np.int64)
    found = np.zeros(v.shape, dtype=bool)
    for p in range(d.shape[0]):
        taken = set()
        for j in order:
            for i in range(d.shape[1]):
                if i not in taken and d[p, i] == v[p, j]:
                    idx[p, j] = i
                    found[p, j] = True
                    taken.add(i)
                    break
    return idx, found


# -- bn_stats -------------------------------------------------------------------------


def bn_stats_kernel(x, dst_dtype=nl.float32):
    t = load(x)
    stats = nl.ndarray((x.shape[0], 6), dtype=dst_dtype, buffer=nl.sbuf)
    nisa.bn_stats(dst=stats, data=t)
    return store(stats)


@FAST
@given(
    p=st.integers(1, 128),
    free=st.sampled_from([(1,), (2,), (7,), (64,), (511,), (512,), (4, 9), (2, 3, 5), (8, 64)]),
    dtype=st.sampled_from((*FLOATS, *FP8S, INT8)),
    target=targets,
    seed=seeds,
)
def test_bn_stats_even_odd_statistics(p, free, dtype, target, seed):
    x = random_values(np.random.default_rng(seed), (p, *free), dtype)
    got = run_kernel(bn_stats_kernel, [x], target)
    ref = stats_reference(x)
    np.testing.assert_array_equal(got[:, [0, 3]], ref[:, [0, 3]])
    scale = np.abs(f32(x)).max() + 1.0
    n = x[0].size
    np.testing.assert_allclose(got[:, [1, 4]], ref[:, [1, 4]], rtol=0, atol=4e-6 * scale * np.log2(n + 2))
    np.testing.assert_allclose(got[:, [2, 5]], ref[:, [2, 5]], rtol=1e-4, atol=1e-5 * scale * scale * n)


def test_bn_stats_hand_computed():
    """Even elements 1, 3, 5 and odd elements 2, 10: counts 3/2, means 3/6, m2 8/32."""
    x = np.array([[1, 2, 3, 10, 5]], dtype=np.float32)
    got = run_kernel(bn_stats_kernel, [x])
    np.testing.assert_array_equal(got, [[3, 3, 8, 2, 6, 32]])


def test_bn_stats_single_element_has_an_empty_odd_class():
    x = np.array([[7.5], [-2.0]], dtype=np.float32)
    got = run_kernel(bn_stats_kernel, [x])
    np.testing.assert_array_equal(got, [[1, 7.5, 0, 0, 0, 0], [1, -2, 0, 0, 0, 0]])


def test_bn_stats_casts_on_write_to_bf16():
    x = np.random.default_rng(3).standard_normal((16, 100)).astype(np.float32)
    got = run_kernel(lambda a: bn_stats_kernel(a, nl.bfloat16), [x])
    assert got.dtype == BF16
    np.testing.assert_allclose(got.astype(np.float64), stats_reference(x), rtol=2**-7, atol=1e-3)


@FAST
@given(
    p=st.integers(1, 128),
    n=st.integers(1, 512),
    seed=seeds,
    specials=st.booleans(),
)
def test_bn_stats_numba_matches_numpy_twin_bit_for_bit(p, n, seed, specials):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((p, n)) * rng.choice([1e-3, 1.0, 1e4])).astype(np.float32)
    if specials:
        x.flat[rng.integers(0, x.size, size=3)] = rng.choice([np.inf, -np.inf, np.nan, 0.0, -0.0], size=3)
    fast, slow = bn_stats_numba(x), bn_stats_reference(x)
    assert fast.dtype == slow.dtype == FP32
    np.testing.assert_array_equal(np.isnan(fast), np.isnan(slow))
    keep = ~np.isnan(fast)
    np.testing.assert_array_equal(fast.view(np.uint32)[keep], slow.view(np.uint32)[keep])


# -- bn_aggr --------------------------------------------------------------------------


@FAST
@given(
    p=st.integers(1, 128),
    chunks=st.lists(st.integers(1, 512), min_size=1, max_size=4),
    dtype=st.sampled_from((FP32, BF16)),
    target=targets,
    seed=seeds,
)
def test_bn_stats_then_bn_aggr_give_row_mean_and_population_variance(p, chunks, dtype, target, seed):
    """Split each row into bn_stats tiles of at most 512 elements, then aggregate them all."""
    x = random_values(np.random.default_rng(seed), (p, sum(chunks)), dtype) + 3.0
    x = x.astype(dtype)

    def kernel(a):
        t = load(a)
        stats = nl.ndarray((p, 6 * len(chunks)), dtype=nl.float32, buffer=nl.sbuf)
        start = 0
        for i, c in enumerate(chunks):
            nisa.bn_stats(dst=stats[:, 6 * i : 6 * i + 6], data=t[:, start : start + c])
            start += c
        mv = nl.ndarray((p, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv, data=stats)
        return store(mv)

    got = run_kernel(kernel, [x], target)
    rows = f32(x).astype(np.float64)
    scale = np.abs(rows).max() + 1.0
    np.testing.assert_allclose(got[:, 0], rows.mean(axis=1), rtol=0, atol=1e-5 * scale)
    np.testing.assert_allclose(got[:, 1], rows.var(axis=1), rtol=1e-4, atol=1e-5 * scale * scale)


def bn_aggr_kernel(t, dst_dtype=nl.float32):
    data = load(t)
    mv = nl.ndarray((t.shape[0], 2), dtype=dst_dtype, buffer=nl.sbuf)
    nisa.bn_aggr(dst=mv, data=data)
    return store(mv)


def test_bn_aggr_hand_computed_with_an_empty_group():
    """(2, 1, 2) + (0, 0, 0) + (1, 4, 0): n = 3, mean 2, m2 = (2 + 2 * 1^2) + (0 + 1 * 2^2) = 8, var 8/3."""
    triples = np.array([[2, 1, 2, 0, 0, 0, 1, 4, 0]], dtype=np.float32)
    got = run_kernel(bn_aggr_kernel, [triples])
    np.testing.assert_allclose(got, [[2.0, 8.0 / 3.0]], rtol=1e-6)


@FAST
@given(p=st.integers(1, 128), groups=st.integers(1, 12), target=targets, seed=seeds)
def test_bn_aggr_matches_sum_of_parts_formula(p, groups, target, seed):
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 513, size=(p, groups))
    means = rng.standard_normal((p, groups)) * 5
    m2 = rng.random((p, groups)) * counts * 4
    triples = np.stack([counts, means, m2], axis=2).reshape(p, 3 * groups).astype(np.float32)
    got = run_kernel(bn_aggr_kernel, [triples], target)
    mean, var = aggregate_reference(triples)
    np.testing.assert_allclose(got[:, 0], mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[:, 1], var, rtol=1e-4, atol=1e-5)


# -- max8 -----------------------------------------------------------------------------


@FAST
@given(
    p=st.integers(1, 128),
    free=st.sampled_from([(8,), (9,), (100,), (3, 7), (2, 2, 4), (2, 2, 2, 3), (16384,)]),
    dtype=st.sampled_from((*FLOATS, *FP8S, INT32, INT8)),
    dst_dtype=st.sampled_from((FP32, BF16)),
    mode=st.sampled_from(["small", "random"]),
    target=targets,
    seed=seeds,
)
def test_max8_eight_largest_descending(p, free, dtype, dst_dtype, mode, target, seed):
    rng = np.random.default_rng(seed)
    maker = small_values if mode == "small" else random_values
    x = maker(rng, (p, *free), dtype)
    got = run_tile(lambda dst, src: nisa.max8(dst=dst, src=src), [x], (p, 8), dst_dtype, target=target)
    assert_values_equal(got, ref_cast(top8_reference(x), dst_dtype))


@FAST
@given(p=st.integers(1, 64), n=st.integers(8, 400), seed=seeds, specials=st.booleans())
def test_compiled_top8_matches_a_full_sort(p, n, seed, specials):
    """The one-pass kernel against np.sort, NaN ranked first; few distinct values give many ties."""
    rng = np.random.default_rng(seed)
    x = rng.choice(np.array([-2.0, 0.0, 1.0, 3.5], dtype=np.float32), size=(p, n))
    if specials:
        x.flat[rng.integers(0, x.size, size=5)] = rng.choice([np.inf, -np.inf, np.nan], size=5)
    expected = np.sort(x, axis=1)[:, ::-1][:, :8]
    np.testing.assert_array_equal(top8_numba(x), expected)


def test_max8_hand_computed_with_ties():
    x = np.array([[5, 1, 5, 3, 9, 0, 9, 2, 7, 4]], dtype=np.float32)
    got = run_tile(lambda dst, src: nisa.max8(dst=dst, src=src), [x], (1, 8), FP32)
    np.testing.assert_array_equal(got, [[9, 9, 7, 5, 5, 4, 3, 2]])


# -- nc_find_index8 -------------------------------------------------------------------


@FAST
@given(
    p=st.integers(1, 128),
    n=st.sampled_from([8, 13, 64, 500]),
    dtype=st.sampled_from((FP32, BF16, INT32)),
    dst_dtype=st.sampled_from((UINT32, UINT16)),
    target=targets,
    seed=seeds,
)
def test_nc_find_index8_first_occurrences(p, n, dtype, dst_dtype, target, seed):
    """Vals drawn from the data (with duplicates) and a few absent values."""
    rng = np.random.default_rng(seed)
    data = small_values(rng, (p, n), dtype, -20, 20)
    picks = data[np.arange(p)[:, None], rng.integers(0, n, size=(p, 8))]
    absent = rng.random((p, 8)) < 0.2
    vals = np.where(absent, np.asarray(100, dtype=dtype), picks).astype(dtype)
    got = run_tile(
        lambda dst, d, v: nisa.nc_find_index8(dst=dst, data=d, vals=v), [data, vals], (p, 8), dst_dtype, target=target
    )
    sentinel = np.iinfo(dst_dtype).max
    idx, _ = find_index_reference(data, vals, range(8), sentinel)
    assert_values_equal(got, idx.astype(dst_dtype))


def test_nc_find_index8_duplicates_take_successive_occurrences():
    data = np.array([[8, 1, 8, 2, 8, 3, 4, 5]], dtype=np.float32)
    vals = np.array([[8, 8, 8, 8, 5, 1, 9, 2]], dtype=np.float32)
    got = run_tile(lambda dst, d, v: nisa.nc_find_index8(dst=dst, data=d, vals=v), [data, vals], (1, 8), UINT32)
    np.testing.assert_array_equal(got, [[0, 2, 4, 0xFFFFFFFF, 7, 1, 0xFFFFFFFF, 3]])


@FAST
@given(
    p=st.integers(1, 64),
    n=st.integers(1, 300),
    reverse=st.booleans(),
    seed=seeds,
)
def test_compiled_matching_pairs_vals_as_the_numpy_twin(p, n, reverse, seed):
    """Few distinct values (many duplicates), NaN in data and vals, vals absent from the data."""
    rng = np.random.default_rng(seed)
    pool = np.array([0.0, -0.0, 1.0, 2.5, np.nan, -3.0], dtype=np.float32)
    data = rng.choice(pool, size=(p, n)).astype(np.float32)
    vals = rng.choice(np.append(pool, 7.0), size=(p, 8)).astype(np.float32)
    order = range(7, -1, -1) if reverse else range(8)
    fast_index, fast_found = match_positions_numba(data, vals, order)
    slow_index, slow_found = match_positions(data, vals, order)
    np.testing.assert_array_equal(fast_found, slow_found)
    np.testing.assert_array_equal(np.where(fast_found, fast_index, -1), np.where(slow_found, slow_index, -1))


def test_max8_then_find_index8_recovers_argmax_positions():
    x = np.random.default_rng(5).permutation(128 * 32).reshape(32, 128).astype(np.float32)

    def kernel(a):
        t = load(a)
        top = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.max8(dst=top, src=t)
        idx = nl.ndarray((32, 8), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.nc_find_index8(dst=idx, data=t, vals=top)
        return store(idx)

    got = run_kernel(kernel, [x])
    np.testing.assert_array_equal(got, np.argsort(-x, axis=1)[:, :8])


# -- nc_match_replace8 ----------------------------------------------------------------


def match_replace_kernel(imm, with_idx=True, idx_dtype=nl.uint32):
    def kernel(d, v):
        data, vals = load(d), load(v)
        out = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.sbuf)
        idx = nl.ndarray((d.shape[0], 8), dtype=idx_dtype, buffer=nl.sbuf) if with_idx else None
        if idx is not None:
            nisa.memset(dst=idx, value=0)
        nisa.nc_match_replace8(dst=out, data=data, vals=vals, imm=imm, dst_idx=idx)
        return (store(out), store(idx)) if with_idx else store(out)

    return kernel


def test_nc_match_replace8_documented_duplicate_example():
    data = np.array([[1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8]], dtype=np.float32)
    vals = np.array([[3, 8, 8, 8, 8, 8, 8, 8]], dtype=np.float32)
    out, idx = run_kernel(match_replace_kernel(-1.0), [data, vals])
    np.testing.assert_array_equal(idx, [[2, 10, 9, 8, 7, 6, 5, 4]])
    np.testing.assert_array_equal(out, [[1, 2, -1, 4, -1, -1, -1, -1, -1, -1, -1]])


@FAST
@given(
    p=st.integers(1, 128),
    free=st.sampled_from([(1,), (8,), (40,), (4, 6), (2, 3, 4)]),
    dtype=st.sampled_from((FP32, BF16, INT32)),
    imm=st.sampled_from([0.0, -1.0, float("-inf"), 99.0]),
    target=targets,
    seed=seeds,
)
def test_nc_match_replace8_replaces_first_occurrences(p, free, dtype, imm, target, seed):
    rng = np.random.default_rng(seed)
    data = small_values(rng, (p, *free), dtype, -10, 10)
    flat = data.reshape(p, -1)
    vals = flat[np.arange(p)[:, None], rng.integers(0, flat.shape[1], size=(p, 8))].astype(dtype)
    if dtype == INT32 and imm == float("-inf"):
        imm = -5.0
    out, idx = run_kernel(match_replace_kernel(imm), [data, vals], target)
    index, found = find_index_reference(data, vals, range(7, -1, -1), 0)
    expected = f32(flat).copy()
    for row in range(p):
        expected[row, index[row][found[row]]] = imm
    assert_values_equal(out, ref_cast(expected, dtype).reshape(data.shape))
    assert_values_equal(idx, index.astype(UINT32))


def test_nc_match_replace8_without_dst_idx_and_in_place():
    data = np.array([[4, 4, 1, 2, 3, 0, 5, 6, 7, 9]], dtype=np.float32)
    vals = np.array([[4, 4, 9, 7, 6, 5, 3, 2]], dtype=np.float32)

    def kernel(d, v):
        t, w = load(d), load(v)
        nisa.nc_match_replace8(dst=t, data=t, vals=w, imm=0.5)
        return store(t)

    got = run_kernel(kernel, [data, vals])
    np.testing.assert_array_equal(got, [[0.5, 0.5, 1, 0.5, 0.5, 0, 0.5, 0.5, 0.5, 0.5]])
    out = run_kernel(match_replace_kernel(-2.0, with_idx=False), [data, vals])
    np.testing.assert_array_equal(out, [[-2, -2, 1, -2, -2, 0, -2, -2, -2, -2]])


# -- costs ----------------------------------------------------------------------------


def vector_ns(hw, cycles):
    return max(hw.vector.min_ii_cycles, cycles) / hw.vector.clock_ghz


def record(profile, opcode):
    (rec,) = [r for r in profile.instructions if r.opcode == opcode]
    assert rec.engine == "Vector"
    return rec.end_ns - rec.start_ns


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize("n", [16, 300, 512])
def test_costs_follow_the_published_formulas(target, n):
    hw = load_target(target)
    groups = 5

    def kernel():
        x = nl.ndarray((128, n), dtype=nl.float32, buffer=nl.sbuf)
        stats = nl.ndarray((128, 6), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_stats(dst=stats, data=x)
        trip = nl.ndarray((128, 3 * groups), dtype=nl.float32, buffer=nl.sbuf)
        mv = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv, data=trip)
        top = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.max8(dst=top, src=x)
        idx = nl.ndarray((128, 8), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.nc_find_index8(dst=idx, data=x, vals=top)
        nisa.nc_match_replace8(dst=x, data=x, vals=top, imm=0.0)

    profile = nkisim.profile(kernel, [], target=target)
    assert record(profile, "bn_stats") == pytest.approx(vector_ns(hw, n))
    assert record(profile, "bn_aggr") == pytest.approx(vector_ns(hw, 13 * groups))
    for op in ("max8", "nc_find_index8", "nc_match_replace8"):
        assert record(profile, op) == pytest.approx(vector_ns(hw, n))


# -- validation -----------------------------------------------------------------------


def fails(kernel, error, match, target="trn1"):
    with pytest.raises(error, match=match):
        nkisim.run(kernel, [], target=target)


def sb(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


def test_bn_stats_rejects_more_than_512_elements_per_partition():
    fails(lambda: nisa.bn_stats(dst=sb((4, 6)), data=sb((4, 513))), ShapeError, r"data.*at most 512")
    fails(lambda: nisa.bn_stats(dst=sb((4, 6)), data=sb((4, 2, 300))), ShapeError, r"data.*600.*at most 512")


def test_bn_stats_dst_holds_six_values_on_the_same_partitions():
    fails(lambda: nisa.bn_stats(dst=sb((4, 5)), data=sb((4, 8))), ShapeError, r"dst.*writes 6")
    fails(lambda: nisa.bn_stats(dst=sb((8, 6)), data=sb((4, 8))), ShapeError, r"dst.*partition dim 8")


def test_bn_aggr_needs_triples_and_two_outputs():
    fails(lambda: nisa.bn_aggr(dst=sb((4, 2)), data=sb((4, 7))), ShapeError, r"data.*multiple of 3")
    fails(lambda: nisa.bn_aggr(dst=sb((4, 3)), data=sb((4, 6))), ShapeError, r"dst.*mean, variance")
    fails(lambda: nisa.bn_aggr(dst=sb((2, 2)), data=sb((4, 6))), ShapeError, r"dst.*partition dim")


def test_max8_limits():
    fails(lambda: nisa.max8(dst=sb((4, 8)), src=sb((4, 7))), ShapeError, r"src.*8 to 16384")
    fails(lambda: nisa.max8(dst=sb((4, 8)), src=sb((4, 16385))), ShapeError, r"src.*8 to 16384")
    fails(lambda: nisa.max8(dst=sb((4, 8)), src=sb((4, 2, 2, 2, 2, 2))), ShapeError, r"src.*6 dimensions")
    fails(lambda: nisa.max8(dst=sb((4, 2, 4)), src=sb((4, 16))), ShapeError, r"dst.*\[par_dim, 8\]")
    fails(lambda: nisa.max8(dst=sb((4, 9)), src=sb((4, 16))), ShapeError, r"dst.*\[par_dim, 8\]")
    fails(lambda: nisa.max8(dst=sb((2, 8)), src=sb((4, 16))), ShapeError, r"dst.*partition dim")


F32_TILE = nl.float32


def make(t):
    """Make a tile described as ``(shape, dtype)`` inside the running kernel."""
    return nl.ndarray(t[0], dtype=t[1], buffer=nl.sbuf)


def test_nc_find_index8_limits():
    def call(dst=((4, 8), nl.uint32), data=((4, 64), F32_TILE), vals=((4, 8), F32_TILE)):
        return lambda: nisa.nc_find_index8(dst=make(dst), data=make(data), vals=make(vals))

    fails(call(dst=((4, 8), nl.float32)), DtypeError, r"dst.*uint16 or uint32")
    fails(call(dst=((4, 8), nl.int32)), DtypeError, r"dst.*uint16 or uint32")
    fails(call(dst=((4, 4, 2), nl.uint32)), ShapeError, r"dst.*\[par_dim, 8\]")
    fails(call(data=((4, 7), F32_TILE)), ShapeError, r"data.*8 to 16384")
    fails(call(data=((4, 16385), F32_TILE)), ShapeError, r"data.*8 to 16384")
    fails(call(data=((4, 2, 2, 2, 2, 2), F32_TILE)), ShapeError, r"data.*6 dimensions")
    fails(call(vals=((4, 9), F32_TILE)), ShapeError, r"vals.*exactly 8")
    fails(call(vals=((4, 2, 2, 2), F32_TILE)), ShapeError, r"vals.*4 dimensions")
    fails(call(vals=((2, 8), F32_TILE)), ShapeError, r"vals.*partition dim")


def test_nc_match_replace8_limits():
    def call(dst=None, data=((4, 64), F32_TILE), vals=((4, 8), F32_TILE), dst_idx=None):
        def kernel():
            out = make(dst or data)
            idx = make(dst_idx) if dst_idx else None
            nisa.nc_match_replace8(dst=out, data=make(data), vals=make(vals), imm=0.0, dst_idx=idx)

        return kernel

    fails(call(data=((4, 16385), F32_TILE)), ShapeError, r"data.*1 to 16384")
    fails(call(data=((4, 2, 2, 2, 2, 2), F32_TILE)), ShapeError, r"data.*6 dimensions")
    fails(call(vals=((4, 7), F32_TILE)), ShapeError, r"vals.*exactly 8")
    fails(call(vals=((3, 8), F32_TILE)), ShapeError, r"vals.*partition dim")
    fails(call(dst=((4, 63), F32_TILE)), ShapeError, r"dst.*64")
    fails(call(dst_idx=((4, 9), nl.uint32)), ShapeError, r"dst_idx.*exactly 8")
    fails(call(dst_idx=((2, 8), nl.uint32)), ShapeError, r"dst_idx.*partition dim")
