"""Data movement within the chip: tensor_copy_predicated, local_gather, nc_n_gather and nc_stream_shuffle.

Every expected value is a numpy port of the NKI 0.2 docstring (or its pseudo-code),
written here; every expected time is the documented formula over the hw constants.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim import BoundsError, DtypeError, MemoryKindError, OperandError, ShapeError
from nkisim.hw import load_target

from .conftest import (
    BIT_DTYPES,
    FAST,
    REL,
    UINT8,
    UINT16,
    UINT32,
    P,
    assert_bits_equal,
    hbm,
    load,
    only_instruction,
    psum,
    random_bits,
    run_kernel,
    sbuf,
    seeds,
    store,
    targets,
)

# == tensor_copy_predicated ==========================================================


@FAST
@given(
    p=st.integers(1, 128),
    free=st.sampled_from([(1,), (7,), (64,), (3, 5), (2, 2, 4)]),
    dtype=st.sampled_from(BIT_DTYPES),
    pred_dtype=st.sampled_from((UINT8, UINT16, UINT32)),
    reverse=st.booleans(),
    where=st.sampled_from(["sbuf", "src_psum", "pred_psum", "scalar"]),
    target=targets,
    seed=seeds,
)
def test_tensor_copy_predicated(p, free, dtype, pred_dtype, reverse, where, target, seed):
    """dst = src where predicate != 0 (== 0 when reversed); elsewhere dst keeps its bits."""
    rng = np.random.default_rng(seed)
    shape = (p, *free)
    old = random_bits(rng, shape, dtype)
    src = random_bits(rng, shape, dtype)
    pred = rng.choice(np.array([0, 0, 1, 2, 255, np.iinfo(pred_dtype).max], dtype=np.uint64), size=shape)
    pred = pred.astype(pred_dtype)
    take = (pred != 0) != reverse
    if where == "scalar":
        value = 3 if dtype.kind in "iu" else -1.5
        new = np.full(shape, value, dtype=np.float64).astype(dtype)
    else:
        new = src
    expected = np.where(take, new.view(f"u{dtype.itemsize}"), old.view(f"u{dtype.itemsize}")).view(dtype)

    def kernel(o, s, pr):
        dst = load(o)
        source = value if where == "scalar" else load(s, "psum" if where == "src_psum" else "sbuf")
        predicate = load(pr, "psum" if where == "pred_psum" else "sbuf")
        nisa.tensor_copy_predicated(dst, source, predicate, reverse)
        return store(dst)

    assert_bits_equal(run_kernel(kernel, [old, src, pred], target), expected)


def test_tensor_copy_predicated_hand_case():
    old = np.array([[1, 2, 3, 4]], np.int32)
    src = np.array([[10, 20, 30, 40]], np.int32)
    pred = np.array([[0, 1, 0, 7]], np.uint8)

    def kernel(o, s, pr, reverse):
        dst = load(o)
        nisa.tensor_copy_predicated(dst=dst, src=load(s), predicate=load(pr), reverse_pred=reverse)
        return store(dst)

    np.testing.assert_array_equal(run_kernel(lambda *a: kernel(*a, False), [old, src, pred]), [[1, 20, 3, 40]])
    np.testing.assert_array_equal(run_kernel(lambda *a: kernel(*a, True), [old, src, pred]), [[10, 2, 30, 4]])


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (
            lambda: (sbuf((4, 8)), sbuf((4, 8)), sbuf((4, 8), nl.int8)),
            DtypeError,
            r"predicate dtype int8 must be uint8",
        ),
        (lambda: (sbuf((4, 8)), sbuf((4, 8)), sbuf((4, 8))), DtypeError, r"predicate dtype float32 must be"),
        (lambda: (sbuf((4, 8)), sbuf((4, 8), nl.bfloat16), sbuf((4, 8), nl.uint8)), DtypeError, r"src dtype bfloat16"),
        (lambda: (sbuf((4, 8)), sbuf((4, 9)), sbuf((4, 8), nl.uint8)), ShapeError, r"src has 9 elements per partition"),
        (lambda: (sbuf((4, 8)), sbuf((4, 8)), sbuf((2, 8), nl.uint8)), ShapeError, r"predicate partition dim 2"),
        (lambda: (sbuf((4, 8)), psum((4, 8)), psum((4, 8), nl.uint8)), MemoryKindError, r"must not both be in PSUM"),
        (lambda: (sbuf((4, 8)), hbm((4, 8)), sbuf((4, 8), nl.uint8)), MemoryKindError, r"src must be in SBUF or PSUM"),
        (lambda: (sbuf((4, 8), nl.int32), 1.5, sbuf((4, 8), nl.uint8)), DtypeError, r"src 1.5 is not an integer"),
    ],
)
def test_tensor_copy_predicated_rejects(make, error, match):
    def kernel():
        dst, src, pred = make()
        nisa.tensor_copy_predicated(dst=dst, src=src, predicate=pred)

    with pytest.raises(error, match=match):
        run_kernel(kernel)


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize(
    ("src_buffer", "pred_buffer", "cycles_per_element"),
    [("sbuf", "sbuf", 2), ("sbuf", "psum", 1), ("psum", "sbuf", 1), ("scalar", "sbuf", 1)],
)
@pytest.mark.parametrize("n", [16, 512])
def test_tensor_copy_predicated_cost(target, src_buffer, pred_buffer, cycles_per_element, n):
    """max(MIN_II, 2N) with src and predicate both in SBUF, else max(MIN_II, N) Vector cycles."""
    hw = load_target(target)

    def kernel():
        src = 0.0 if src_buffer == "scalar" else nl.ndarray((P, n), dtype=nl.float32, buffer=src_buffer)
        pred = nl.ndarray((P, n), dtype=nl.uint8, buffer=pred_buffer)
        nisa.tensor_copy_predicated(dst=sbuf((P, n)), src=src, predicate=pred)

    rec = only_instruction(kernel, target=target)
    assert rec.engine == "Vector"
    expected = max(hw.vector.min_ii_cycles, cycles_per_element * n) / hw.vector.clock_ghz
    assert rec.end_ns == pytest.approx(expected, rel=REL)


# == local_gather ====================================================================


def local_gather_reference(src, index, nepi, num_valid):
    """Ported from the docstring: each 16-partition core flattens its index slice partition-first,
    keeps num_valid indices, and every partition of the core reads nepi elements from each index."""
    p = src.shape[0]
    flat_src = src.reshape(p, -1)
    flat_idx = index.reshape(p, -1)
    out = []
    for core in range(p // 16):
        rows = slice(16 * core, 16 * core + 16)
        indices_1d = flat_idx[rows].flatten(order="F")[:num_valid]
        for q in range(16 * core, 16 * core + 16):
            out.append(np.concatenate([flat_src[q, i : i + nepi] for i in indices_1d]))
    return np.stack(out)


@st.composite
def local_gather_cases(draw):
    cores = draw(st.integers(1, 8))
    nepi = draw(st.sampled_from([1, 2, 4, 8, 16, 32]))
    k = draw(st.integers(1, 4))
    valid = draw(st.one_of(st.none(), st.integers(1, 16 * k)))
    src_free = draw(st.sampled_from([(nepi,), (40,), (8, 8), (2, 3, 16)]))
    if math.prod(src_free) < nepi:
        src_free = (nepi, 2)
    return cores * 16, nepi, k, valid, src_free


@FAST
@given(
    case=local_gather_cases(),
    dtype=st.sampled_from(BIT_DTYPES),
    shaped_dst=st.booleans(),
    target=targets,
    seed=seeds,
)
def test_local_gather(case, dtype, shaped_dst, target, seed):
    """Every partition gathers its own elements at its core's shared offsets; bits are unchanged."""
    p, nepi, k, valid, src_free = case
    rng = np.random.default_rng(seed)
    src = random_bits(rng, (p, *src_free), dtype)
    f = math.prod(src_free)
    index = rng.integers(0, f - nepi + 1, size=(p, k)).astype(np.uint16)
    n_valid = 16 * k if valid is None else valid
    expected = local_gather_reference(src, index, nepi, n_valid)
    dst_shape = (p, n_valid, nepi) if shaped_dst else (p, n_valid * nepi)

    def kernel(s, i):
        dst = sbuf(dst_shape, s.dtype)
        nisa.local_gather(dst, load(s), load(i), nepi, valid)
        return store(dst)

    assert_bits_equal(run_kernel(kernel, [src, index], target).reshape(p, -1), expected)


def test_local_gather_hand_case():
    """Core 0 gets offsets [3, 0, 5] (partition-first from a (16, 2) index slice), 2 elements each."""
    src = np.arange(16 * 8, dtype=np.int16).reshape(16, 8)
    index = np.zeros((16, 2), np.uint16)
    index[0, 0], index[1, 0], index[0, 1] = 3, 0, 5  # flattened partition-first: [3, 0, 0, ..., 0, 5, 0, ...]

    def kernel(s, i):
        dst = sbuf((16, 6), nl.int16)
        nisa.local_gather(dst=dst, src_buffer=load(s), index=load(i), num_elem_per_idx=2, num_valid_indices=3)
        return store(dst)

    got = run_kernel(kernel, [src, index])
    np.testing.assert_array_equal(got[0], [3, 4, 0, 1, 0, 1])
    np.testing.assert_array_equal(got[5], [43, 44, 40, 41, 40, 41])


@pytest.mark.placeholder_tiles
def test_local_gather_out_of_bounds_index_is_an_error():
    def kernel(i):
        dst = sbuf((16, 2))
        nisa.local_gather(dst=dst, src_buffer=sbuf((16, 8)), index=load(i), num_elem_per_idx=2, num_valid_indices=1)

    index = np.full((16, 1), 7, np.uint16)
    with pytest.raises(BoundsError, match=r"nisa.local_gather.*index value 7 \+ num_elem_per_idx 2 reaches past"):
        run_kernel(kernel, [index])


def gather_operands(dst, src, idx):
    """SBUF tiles from (shape, dtype) pairs: dst, src_buffer and index."""
    return tuple(sbuf(shape, dtype) for shape, dtype in (dst, src, idx))


F4, U16 = nl.float32, nl.uint16


@pytest.mark.parametrize(
    ("dst", "src", "idx", "kwargs", "error", "match"),
    [
        (((16, 4), F4), ((16, 8), F4), ((16, 1), nl.uint32), {}, DtypeError, r"index dtype uint32 must be uint16"),
        (((16, 16), nl.bfloat16), ((16, 8), F4), ((16, 1), U16), {}, DtypeError, r"dst dtype bfloat16 differs"),
        (((24, 24), F4), ((24, 8), F4), ((24, 1), U16), {}, ShapeError, r"partition dim 24 is not a multiple of 16"),
        (((32, 16), F4), ((32, 8), F4), ((16, 1), U16), {}, ShapeError, r"index partition dim 16 differs"),
        (((16, 16), F4), ((32, 8), F4), ((32, 1), U16), {}, ShapeError, r"dst partition dim 16 differs"),
        (((16, 48), F4), ((16, 8), F4), ((16, 1), U16), {"num_elem_per_idx": 3}, OperandError, r"num_elem_per_idx 3"),
        (((16, 17), F4), ((16, 8), F4), ((16, 1), U16), {"num_valid_indices": 17}, OperandError, r"17 must be from"),
        (((16, 1), F4), ((16, 8), F4), ((16, 1), U16), {"num_valid_indices": 0}, OperandError, r"0 must be from 1"),
        (((16, 4112), F4), ((16, 8), F4), ((16, 257), U16), {}, OperandError, r"4112 indices per core exceed 4096"),
        (((16, 15), F4), ((16, 8), F4), ((16, 1), U16), {}, ShapeError, r"dst has 15 elements per partition; 16"),
    ],
)
def test_local_gather_rejects(dst, src, idx, kwargs, error, match):
    def kernel():
        d, s, i = gather_operands(dst, src, idx)
        nisa.local_gather(dst=d, src_buffer=s, index=i, **kwargs)

    with pytest.raises(error, match=match):
        run_kernel(kernel)


def test_local_gather_memories():
    def kernel():
        nisa.local_gather(dst=psum((16, 16)), src_buffer=sbuf((16, 8)), index=sbuf((16, 1), nl.uint16))

    with pytest.raises(MemoryKindError, match=r"\[GpSimd, trn1\]: dst is in PSUM"):
        run_kernel(kernel)


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize(("nepi", "dtype", "valid"), [(1, nl.float32, 64), (32, nl.bfloat16, 100), (4, nl.int8, 16)])
def test_local_gather_cost(target, nepi, dtype, valid):
    """GPSIMD_START + num_valid * nepi * C, C = ((28 + 4 n) / (4 n)) / min(4 / dtype_size, n) cycles per element."""
    hw = load_target(target)
    size = np.dtype(nl.bfloat16 if dtype is nl.bfloat16 else dtype).itemsize

    def kernel(i):
        nisa.local_gather(sbuf((P, valid * nepi), dtype), sbuf((P, 64), dtype), load(i), nepi, valid)

    rec = only_instruction(kernel, [np.zeros((P, 8), np.uint16)], target, opcode="local_gather")
    c = ((28 + 4 * nepi) / (4 * nepi)) / min(4 / size, nepi)
    assert rec.engine == "GpSimd"
    expected = (150 + valid * nepi * c) / hw.gpsimd.clock_ghz
    assert rec.end_ns - rec.start_ns == pytest.approx(expected, rel=REL)
    # by hand, for fp32 and one element per index: 150 + 64 * 8 = 662 cycles
    if (nepi, dtype) == (1, nl.float32):
        assert expected * hw.gpsimd.clock_ghz == pytest.approx(662)


# == nc_n_gather =====================================================================


@FAST
@given(
    p=st.integers(1, 128),
    data_free=st.sampled_from([(1,), (9,), (4, 8), (2, 3, 5), (600,)]),
    idx_free=st.sampled_from([(1,), (5,), (3, 4), (40,)]),
    dtype=st.sampled_from(BIT_DTYPES),
    target=targets,
    seed=seeds,
)
def test_nc_n_gather(p, data_free, idx_free, dtype, target, seed):
    """Within each partition, dst[j] = data.flat[indices.flat[j]], bit for bit; indices' shape shapes dst."""
    rng = np.random.default_rng(seed)
    data = random_bits(rng, (p, *data_free), dtype)
    indices = rng.integers(0, math.prod(data_free), size=(p, *idx_free)).astype(np.uint32)
    expected = np.stack([data[q].reshape(-1)[indices[q].reshape(-1)].reshape(idx_free) for q in range(p)])

    def kernel(d, i):
        dst = sbuf((p, *idx_free), d.dtype)
        nisa.nc_n_gather(dst, load(d), load(i))
        return store(dst)

    assert_bits_equal(run_kernel(kernel, [data, indices], target), expected)


def test_nc_n_gather_hand_case_and_bounds():
    data = np.array([[10, 11, 12], [20, 21, 22]], np.float16)
    indices = np.array([[2, 2, 0, 1], [1, 0, 0, 2]], np.uint32)

    def kernel(d, i):
        dst = sbuf((2, 4), nl.float16)
        nisa.nc_n_gather(dst=dst, data=load(d), indices=load(i))
        return store(dst)

    np.testing.assert_array_equal(run_kernel(kernel, [data, indices]), [[12, 12, 10, 11], [21, 20, 20, 22]])
    with pytest.raises(BoundsError, match=r"nisa.nc_n_gather.*indices value 3 is outside \[0, 3\)"):
        run_kernel(kernel, [data, indices + 1])


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (
            lambda: (sbuf((4, 8)), sbuf((4, 8)), sbuf((4, 8), nl.int32)),
            DtypeError,
            r"indices dtype int32 must be uint32",
        ),
        (lambda: (sbuf((4, 8), nl.int32), sbuf((4, 8)), sbuf((4, 8), nl.uint32)), DtypeError, r"dst dtype int32"),
        (lambda: (sbuf((4, 8)), sbuf((2, 8)), sbuf((4, 8), nl.uint32)), ShapeError, r"indices partition dim 4 differs"),
        (
            lambda: (sbuf((4, 6)), sbuf((4, 8)), sbuf((4, 8), nl.uint32)),
            ShapeError,
            r"dst has 6 elements per partition",
        ),
        (
            lambda: (sbuf((4, 8)), psum((4, 8)), sbuf((4, 8), nl.uint32)),
            MemoryKindError,
            r"data is in PSUM, which the GpSimd Engine cannot",
        ),
    ],
)
def test_nc_n_gather_rejects(make, error, match):
    def kernel():
        dst, data, idx = make()
        nisa.nc_n_gather(dst=dst, data=data, indices=idx)

    with pytest.raises(error, match=match):
        run_kernel(kernel)


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize("n", [1, 512, 513, 2000])
def test_nc_n_gather_cost(target, n):
    """Our estimate: ceil(N / 512) groups, each GPSIMD_START cycles, plus one cycle per gathered element."""
    hw = load_target(target)

    def kernel(i):
        nisa.nc_n_gather(dst=sbuf((P, n)), data=sbuf((P, 64)), indices=load(i))

    rec = only_instruction(kernel, [np.zeros((P, n), np.uint32)], target, opcode="nc_n_gather")
    assert rec.engine == "GpSimd"
    expected = (math.ceil(n / 512) * 150 + n) / hw.gpsimd.clock_ghz
    assert rec.end_ns - rec.start_ns == pytest.approx(expected, rel=REL)


# == nc_stream_shuffle ===============================================================


def shuffle_reference(dst, src, mask):
    """Per quadrant of 32 partitions: dst[i] = src[mask[i]], and mask[i] == 255 keeps dst[i]."""
    out = dst.copy()
    for d in range(dst.shape[0]):
        q, i = divmod(d, 32)
        if mask[i] != 255:
            out[d] = src[32 * q + mask[i]]
    return out


@st.composite
def shuffle_cases(draw):
    quadrants = draw(st.integers(1, 4))
    dst_p = draw(st.integers(32 * quadrants - 31, 32 * quadrants))
    src_p = draw(st.integers(32 * (quadrants - 1) + 1, 32 * quadrants))
    # src partitions that every quadrant of dst can reach
    reach = src_p - 32 * (quadrants - 1)
    mask = [draw(st.one_of(st.integers(0, reach - 1), st.just(255))) for _ in range(32)]
    return dst_p, src_p, mask


@FAST
@given(
    case=shuffle_cases(),
    f=st.sampled_from([1, 5, 64]),
    dtype=st.sampled_from(BIT_DTYPES),
    buffers=st.sampled_from([("sbuf", "sbuf"), ("psum", "sbuf"), ("sbuf", "psum"), ("psum", "psum")]),
    in_place=st.booleans(),
    target=targets,
    seed=seeds,
)
def test_nc_stream_shuffle(case, f, dtype, buffers, in_place, target, seed):
    dst_p, src_p, mask = case
    if in_place:
        src_p = dst_p = max(dst_p, src_p)
    rng = np.random.default_rng(seed)
    old = random_bits(rng, (dst_p, f), dtype)
    src = old if in_place else random_bits(rng, (src_p, f), dtype)
    expected = shuffle_reference(old, src, mask)

    def kernel(o, s):
        dst = load(o, buffers[0])
        source = dst if in_place else load(s, buffers[1])
        nisa.nc_stream_shuffle(dst, source, mask)
        return store(dst)

    assert_bits_equal(run_kernel(kernel, [old, src], target), expected)


def test_nc_stream_shuffle_hand_cases():
    """Rotate by one partition in place; broadcast one partition to 32."""
    a = np.arange(64 * 2, dtype=np.float32).reshape(64, 2)

    def rotate(x):
        t = load(x)
        nisa.nc_stream_shuffle(dst=t, src=t, shuffle_mask=[(i + 1) % 32 for i in range(32)])
        return store(t)

    got = run_kernel(rotate, [a])
    np.testing.assert_array_equal(got[0], [2, 3])
    np.testing.assert_array_equal(got[31], [0, 1])
    np.testing.assert_array_equal(got[32], [66, 67])  # the second quadrant rotates by itself
    np.testing.assert_array_equal(got[63], [64, 65])

    def broadcast(x):
        t = load(x)
        dst = sbuf((32, 2))
        nisa.nc_stream_shuffle(dst=dst, src=t[32:33, :], shuffle_mask=[0] * 32)
        return store(dst)

    np.testing.assert_array_equal(run_kernel(broadcast, [a]), np.tile([[64.0, 65.0]], (32, 1)))


@pytest.mark.parametrize(
    ("src_rows", "dst_rows", "ok"),
    [
        ((32, 64), (0, 32), True),  # 32 active: starts 0/32/64/96
        ((96, 128), (64, 96), True),
        ((16, 48), (0, 32), False),
        ((64, 128), (0, 64), True),  # 64 active: starts 0/64
        ((32, 96), (0, 64), False),
        ((0, 96), (0, 96), True),  # 96 active: start 0
        ((0, 65), (64, 128), False),
    ],
)
@pytest.mark.placeholder_tiles
def test_nc_stream_shuffle_start_partitions(src_rows, dst_rows, ok):
    def kernel():
        big = sbuf((128, 4))
        out = sbuf((128, 4))
        mask = [0] * 32
        nisa.nc_stream_shuffle(
            dst=out[dst_rows[0] : dst_rows[1], :], src=big[src_rows[0] : src_rows[1], :], shuffle_mask=mask
        )

    if ok:
        run_kernel(kernel)
    else:
        with pytest.raises(ShapeError, match=r"starts at partition \d+; with \d+ active partitions it must start at"):
            run_kernel(kernel)


@pytest.mark.parametrize(
    ("make", "mask", "error", "match"),
    [
        (lambda: (sbuf((32, 4), nl.bfloat16), sbuf((32, 4))), [0] * 32, DtypeError, r"dst dtype bfloat16 differs"),
        (
            lambda: (sbuf((32, 4)), sbuf((32, 5))),
            [0] * 32,
            ShapeError,
            r"dst has 4 elements per partition but src has 5",
        ),
        (
            lambda: (sbuf((32, 4)), sbuf((32, 4))),
            [0] * 31,
            OperandError,
            r"shuffle_mask has 31 elements; it must have 32",
        ),
        (lambda: (sbuf((32, 4)), sbuf((32, 4))), [40] + [0] * 31, OperandError, r"shuffle_mask\[0\] 40 must be"),
        (
            lambda: (sbuf((32, 4)), sbuf((8, 4))),
            [0] * 31 + [9],
            ShapeError,
            r"shuffle_mask\[31\] 9 sends src partition 9",
        ),
        (lambda: (sbuf((64, 4)), sbuf((32, 4))), [0] * 32, ShapeError, r"sends src partition 32 to dst partition 32"),
        (lambda: (sbuf((32, 4)), hbm((32, 4))), [0] * 32, MemoryKindError, r"src must be in SBUF or PSUM"),
    ],
)
def test_nc_stream_shuffle_rejects(make, mask, error, match):
    def kernel():
        dst, src = make()
        nisa.nc_stream_shuffle(dst=dst, src=src, shuffle_mask=mask)

    with pytest.raises(error, match=match):
        run_kernel(kernel)


@pytest.mark.placeholder_tiles
def test_nc_stream_shuffle_all_255_keeps_dst():
    a = np.arange(64 * 3, dtype=np.int32).reshape(64, 3)

    def kernel(x):
        t = load(x)
        nisa.nc_stream_shuffle(dst=t, src=sbuf((64, 3), nl.int32), shuffle_mask=[255] * 32)
        return store(t)

    np.testing.assert_array_equal(run_kernel(kernel, [a]), a)


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize("n", [16, 100, 2048])
def test_nc_stream_shuffle_cost(target, n):
    """max(MIN_II, N) Vector cycles."""
    hw = load_target(target)

    def kernel():
        nisa.nc_stream_shuffle(
            dst=sbuf((P, n), nl.bfloat16), src=psum((P, n), nl.bfloat16), shuffle_mask=list(range(32))
        )

    rec = only_instruction(kernel, target=target)
    assert rec.engine == "Vector"
    assert rec.end_ns == pytest.approx(max(hw.vector.min_ii_cycles, n) / hw.vector.clock_ghz, rel=REL)
