"""Vector Engine statistics and top-8 instructions: bn_stats, bn_aggr, max8, nc_find_index8, nc_match_replace8.

Costs follow the NKI 0.1 reference's "Estimated instruction cost" with ``N`` the
elements per partition: ``max(MIN_II, N)``, and ``max(MIN_II, 13 * N/3)`` for
``bn_aggr``.
"""

from __future__ import annotations

import numba
import numpy as np

from nkisim.errors import DtypeError, ShapeError
from nkisim.hw import Engine, HwConfig
from nkisim.isa.common import as_rows, check_same_layout, check_same_partitions, f32, write
from nkisim.isa.spec import Check, Cost, EngineState, In, Operands, OptOut, Out, engine_cost, instruction
from nkisim.isa.vector import per_element_cost
from nkisim.memory import Tensor, dtype_name

#: ``nl.tile_size.bn_stats_fmax``: bn_stats reads at most 512 elements per partition.
BN_STATS_FMAX = 512
#: bn_stats writes (count, mean, variance * count) for the even, then the odd elements.
BN_STATS_OUT = 6
#: max8, nc_find_index8 and nc_match_replace8 work on 8 values per partition.
TOP_K = 8
#: Elements per partition that max8 and nc_find_index8 read: 8 to 16384.
TOP8_MIN_ELEMENTS = 8
TOP8_MAX_ELEMENTS = 16384
#: Dimensions (partition dim included) of the data and vals operands of the top-8 instructions.
TOP8_DATA_MAX_DIMS = 5
TOP8_VALS_MAX_DIMS = 3

F32 = np.float32


def _check_elements(chk: Check, name: str, t: Tensor, lo: int, hi: int) -> None:
    if not lo <= t.free_size <= hi:
        chk.fail(ShapeError, name, f"has {t.free_size} elements per partition; it must have {lo} to {hi}")


def _check_dims(chk: Check, name: str, t: Tensor, most: int) -> None:
    if t.ndim > most:
        chk.fail(ShapeError, name, f"has {t.ndim} dimensions; at most {most} are allowed")


def _check_eight(chk: Check, name: str, t: Tensor) -> None:
    if t.free_size != TOP_K:
        chk.fail(ShapeError, name, f"has {t.free_size} elements per partition; it must have exactly {TOP_K}")


# -- bn_stats -------------------------------------------------------------------------


class BnStatsOps(Operands):
    dst: Out
    data: In


def _bn_stats_validate(ops: BnStatsOps, chk: Check) -> None:
    check_same_partitions(chk, "data", ops.data, "dst", ops.dst)
    if ops.data.free_size > BN_STATS_FMAX:
        chk.fail(
            ShapeError,
            "data",
            f"has {ops.data.free_size} elements per partition; bn_stats reads at most {BN_STATS_FMAX} "
            "(nl.tile_size.bn_stats_fmax); split it and combine the results with bn_aggr",
        )
    if ops.dst.free_size != BN_STATS_OUT:
        chk.fail(ShapeError, "dst", f"has {ops.dst.free_size} elements per partition; bn_stats writes {BN_STATS_OUT}")


@numba.njit(cache=True)
def _bn_stats_kernel(x: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    p, n = x.shape
    out = np.zeros((p, 6), np.float32)
    one = np.float32(1.0)
    for i in range(p):
        for parity in range(2):
            count = np.float32(0.0)
            mean = np.float32(0.0)
            m2 = np.float32(0.0)
            for j in range(parity, n, 2):
                v = x[i, j]
                count += one
                delta = v - mean
                mean += delta / count
                m2 += delta * (v - mean)
            out[i, 3 * parity] = count
            out[i, 3 * parity + 1] = mean
            out[i, 3 * parity + 2] = m2
    return out


def bn_stats_numba(x: np.ndarray) -> np.ndarray:
    """The six statistics of each row of a float32 ``(P, N)`` array (compiled)."""
    return _bn_stats_kernel(np.ascontiguousarray(x, dtype=F32))


def bn_stats_reference(x: np.ndarray) -> np.ndarray:
    """Plain-numpy twin of :func:`bn_stats_numba`, the same float32 operations in the same order.

    Each parity class is reduced by Welford's update in float32, one element at a time:
    ``count += 1; delta = x - mean; mean += delta / count; m2 += delta * (x - mean)``.
    """
    x = np.asarray(x, dtype=F32)
    p, n = x.shape
    out = np.zeros((p, BN_STATS_OUT), F32)
    for parity in (0, 1):
        count = F32(0.0)
        mean = np.zeros(p, F32)
        m2 = np.zeros(p, F32)
        for j in range(parity, n, 2):
            v = x[:, j]
            count = F32(count + F32(1.0))
            delta = v - mean
            mean = mean + delta / count
            m2 = m2 + delta * (v - mean)
        out[:, 3 * parity] = count
        out[:, 3 * parity + 1] = mean
        out[:, 3 * parity + 2] = m2
    return out


def _bn_stats_cost(ops: BnStatsOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N)`` Vector cycles."""
    return per_element_cost(engine, hw, ops.data.free_size)


@instruction(
    "bn_stats",
    BnStatsOps,
    engines=(Engine.vector,),
    cost=_bn_stats_cost,
    validate=_bn_stats_validate,
    dtypes="any (fp32 math, cast to dst)",
)
def bn_stats(ops: BnStatsOps, state: EngineState) -> None:
    """Per partition: (count, mean, variance * count) of the even elements, then of the odd ones.

    The free dims are flattened; element ``j`` is even when ``j % 2 == 0``. Statistics
    are computed in float32 by Welford's update; an empty class (one element per
    partition leaves no odd ones) gives ``(0, 0, 0)``.
    """
    write(ops.dst, bn_stats_numba(as_rows(f32(ops.data), ops.data.partitions)))


# -- bn_aggr --------------------------------------------------------------------------


class BnAggrOps(Operands):
    dst: Out
    data: In


def _bn_aggr_validate(ops: BnAggrOps, chk: Check) -> None:
    check_same_partitions(chk, "data", ops.data, "dst", ops.dst)
    if ops.data.free_size % 3:
        chk.fail(
            ShapeError,
            "data",
            f"has {ops.data.free_size} elements per partition; it must hold (count, mean, variance*count) "
            "triples, a multiple of 3",
        )
    if ops.dst.free_size != 2:
        chk.fail(ShapeError, "dst", f"has {ops.dst.free_size} elements per partition; bn_aggr writes mean, variance")


def _bn_aggr_cost(ops: BnAggrOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, 13 * N/3)`` Vector cycles."""
    groups = ops.data.free_size / 3
    return engine_cost(hw, engine, max(hw.vector.min_ii_cycles, hw.vector.bn_aggr_cycles_per_group * groups))


def bn_aggr_values(stats: np.ndarray) -> np.ndarray:
    """(mean, population variance) per row of float32 ``(P, 3G)`` (count, mean, variance*count) triples.

    Groups are merged left to right with Chan's parallel update in float32; groups
    with a count of zero change nothing. A row whose counts are all zero gives (0, 0).
    """
    stats = np.asarray(stats, dtype=F32)
    p = stats.shape[0]
    n = np.zeros(p, F32)
    mean = np.zeros(p, F32)
    m2 = np.zeros(p, F32)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for g in range(stats.shape[1] // 3):
            nb, mb, m2b = stats[:, 3 * g], stats[:, 3 * g + 1], stats[:, 3 * g + 2]
            total = n + nb
            live = nb != 0
            safe = np.where(total != 0, total, F32(1.0))
            delta = mb - mean
            mean = np.where(live, mean + delta * (nb / safe), mean)
            m2 = np.where(live, m2 + m2b + delta * delta * (n * nb / safe), m2)
            n = total
        var = np.where(n != 0, m2 / np.where(n != 0, n, F32(1.0)), F32(0.0))
    return np.stack([mean, var], axis=1).astype(F32)


@instruction(
    "bn_aggr",
    BnAggrOps,
    engines=(Engine.vector,),
    cost=_bn_aggr_cost,
    validate=_bn_aggr_validate,
    dtypes="any (fp32 math, cast to dst)",
)
def bn_aggr(ops: BnAggrOps, state: EngineState) -> None:
    """Merge ``bn_stats`` triples into a mean and a population variance per partition."""
    write(ops.dst, bn_aggr_values(as_rows(f32(ops.data), ops.data.partitions)))


# -- max8 -----------------------------------------------------------------------------


class Max8Ops(Operands):
    dst: Out
    src: In


def _max8_validate(ops: Max8Ops, chk: Check) -> None:
    check_same_partitions(chk, "src", ops.src, "dst", ops.dst)
    _check_dims(chk, "src", ops.src, TOP8_DATA_MAX_DIMS)
    _check_elements(chk, "src", ops.src, TOP8_MIN_ELEMENTS, TOP8_MAX_ELEMENTS)
    if ops.dst.ndim != 2 or ops.dst.shape[1] != TOP_K:
        chk.fail(ShapeError, "dst", f"shape {list(ops.dst.shape)} must be [par_dim, {TOP_K}]")


def _max8_cost(ops: Max8Ops, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N)`` Vector cycles (published: ``N``)."""
    return per_element_cost(engine, hw, ops.src.free_size)


@numba.njit(cache=True, inline="always")
def _ranks_above(a: float, b: float) -> bool:  # pragma: no cover - compiled
    """Whether ``a`` comes before ``b`` in max8's order: NaN first, then descending."""
    if b != b:
        return False
    return a != a or a > b


@numba.njit(cache=True)
def _top8_kernel(x: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    p, n = x.shape
    out = np.empty((p, TOP_K), np.float32)
    for row in range(p):
        count = 0
        for c in range(n):
            v = x[row, c]
            if count < TOP_K:
                i = count
                count += 1
            elif _ranks_above(v, out[row, TOP_K - 1]):
                i = TOP_K - 1
            else:
                continue
            while i > 0 and _ranks_above(v, out[row, i - 1]):
                out[row, i] = out[row, i - 1]
                i -= 1
            out[row, i] = v
    return out


def top8_numba(x: np.ndarray) -> np.ndarray:
    """The 8 largest values of each row of a ``(P, N >= 8)`` array, descending, NaN first (one pass, compiled)."""
    return _top8_kernel(np.ascontiguousarray(x, dtype=F32))


@instruction(
    "max8",
    Max8Ops,
    engines=(Engine.vector,),
    cost=_max8_cost,
    validate=_max8_validate,
    dtypes="src any (compared in fp32); dst any (cast)",
)
def max8(ops: Max8Ops, state: EngineState) -> None:
    """The 8 largest float32 values of each partition, in descending order (NaN ranks above +inf)."""
    write(ops.dst, top8_numba(as_rows(f32(ops.src), ops.src.partitions)))


# -- nc_find_index8 and nc_match_replace8 ---------------------------------------------


@numba.njit(cache=True)
def _match_kernel(
    data: np.ndarray, vals: np.ndarray, first: int, step: int
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    p, n = data.shape
    k = vals.shape[1]
    index = np.zeros((p, k), np.int64)
    found = np.zeros((p, k), np.bool_)
    taken = np.empty(k, np.int64)
    for row in range(p):
        count = 0
        j = first
        for _ in range(k):
            v = vals[row, j]
            for c in range(n):
                if data[row, c] == v:
                    free = True
                    for t in range(count):
                        if taken[t] == c:
                            free = False
                            break
                    if free:
                        index[row, j] = c
                        found[row, j] = True
                        taken[count] = c
                        count += 1
                        break
            j += step
    return index, found


def match_positions_numba(data: np.ndarray, vals: np.ndarray, order: range) -> tuple[np.ndarray, np.ndarray]:
    """:func:`match_positions`, compiled: one scan per val that stops at its match."""
    assert order.step in (1, -1) and len(order) == vals.shape[1]
    return _match_kernel(
        np.ascontiguousarray(data, dtype=F32), np.ascontiguousarray(vals, dtype=F32), order.start, order.step
    )


def match_positions(data: np.ndarray, vals: np.ndarray, order: range) -> tuple[np.ndarray, np.ndarray]:
    """Pair each of the 8 vals of a row with a distinct matching position of ``data`` (the plain-numpy reference).

    Vals are taken in ``order``; each takes the first position equal to it (float32
    comparison, so NaN never matches) that an earlier val has not taken. Returns the
    positions ``(P, 8)`` and whether each val matched.
    """
    p = data.shape[0]
    rows = np.arange(p)
    taken = np.zeros(data.shape, dtype=bool)
    index = np.zeros(vals.shape, dtype=np.int64)
    found = np.zeros(vals.shape, dtype=bool)
    for j in order:
        hits = (data == vals[:, j : j + 1]) & ~taken
        first = hits.argmax(axis=1)
        ok = hits[rows, first]
        index[:, j] = first
        found[:, j] = ok
        taken[rows[ok], first[ok]] = True
    return index, found


class NcFindIndex8Ops(Operands):
    dst: Out
    data: In
    vals: In


_INDEX_DTYPES = ("uint16", "uint32")


def _find_index8_validate(ops: NcFindIndex8Ops, chk: Check) -> None:
    check_same_partitions(chk, "data", ops.data, "vals", ops.vals)
    check_same_partitions(chk, "data", ops.data, "dst", ops.dst)
    _check_dims(chk, "data", ops.data, TOP8_DATA_MAX_DIMS)
    _check_dims(chk, "vals", ops.vals, TOP8_VALS_MAX_DIMS)
    _check_elements(chk, "data", ops.data, TOP8_MIN_ELEMENTS, TOP8_MAX_ELEMENTS)
    _check_eight(chk, "vals", ops.vals)
    if ops.dst.ndim != 2 or ops.dst.shape[1] != TOP_K:
        chk.fail(ShapeError, "dst", f"shape {list(ops.dst.shape)} must be [par_dim, {TOP_K}]")
    if dtype_name(ops.dst.dtype) not in _INDEX_DTYPES:
        chk.fail(DtypeError, "dst", f"dtype {dtype_name(ops.dst.dtype)} must be uint16 or uint32")


def _find_index8_cost(ops: NcFindIndex8Ops, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N)`` Vector cycles (published: ``N``)."""
    return per_element_cost(engine, hw, ops.data.free_size)


@instruction(
    "nc_find_index8",
    NcFindIndex8Ops,
    engines=(Engine.vector,),
    cost=_find_index8_cost,
    validate=_find_index8_validate,
    dtypes="data, vals any (compared in fp32); dst uint16/uint32",
)
def nc_find_index8(ops: NcFindIndex8Ops, state: EngineState) -> None:
    """Index of the first occurrence of each of the 8 vals in its partition's flattened data.

    A val repeated in ``vals`` takes the next occurrence (vals in ascending order of
    columns); a val with no (remaining) occurrence gets all-ones (0xFFFF / 0xFFFFFFFF).
    """
    p = ops.data.partitions
    index, found = match_positions_numba(as_rows(f32(ops.data), p), as_rows(f32(ops.vals), p), range(TOP_K))
    sentinel = np.iinfo(ops.dst.dtype).max
    ops.dst.array[...] = np.where(found, index, sentinel).astype(ops.dst.dtype).reshape(ops.dst.shape)


class NcMatchReplace8Ops(Operands):
    dst: Out
    data: In
    vals: In
    imm: float
    dst_idx: OptOut = None


def _match_replace8_validate(ops: NcMatchReplace8Ops, chk: Check) -> None:
    check_same_partitions(chk, "data", ops.data, "vals", ops.vals)
    check_same_layout(chk, "data", ops.data, "dst", ops.dst)
    _check_dims(chk, "data", ops.data, TOP8_DATA_MAX_DIMS)
    _check_dims(chk, "vals", ops.vals, TOP8_VALS_MAX_DIMS)
    _check_elements(chk, "data", ops.data, 1, TOP8_MAX_ELEMENTS)
    _check_eight(chk, "vals", ops.vals)
    if ops.dst_idx is not None:
        check_same_partitions(chk, "data", ops.data, "dst_idx", ops.dst_idx)
        _check_eight(chk, "dst_idx", ops.dst_idx)


def _match_replace8_cost(ops: NcMatchReplace8Ops, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N)`` Vector cycles (published as ``min(MIN_II, N)``, read as the usual max)."""
    return per_element_cost(engine, hw, ops.data.free_size)


@instruction(
    "nc_match_replace8",
    NcMatchReplace8Ops,
    engines=(Engine.vector,),
    cost=_match_replace8_cost,
    validate=_match_replace8_validate,
    dtypes="data, vals, dst any (compared in fp32); imm fp32; dst_idx uint32 indices",
)
def nc_match_replace8(ops: NcMatchReplace8Ops, state: EngineState) -> None:
    """Replace the first occurrence of each of the 8 vals with ``imm``; optionally write their indices.

    Vals are matched in reverse order (column 7 first), each against a position no
    other val took, so duplicate vals pair with successive occurrences and the first
    occurrence goes to the highest column. An unmatched val replaces nothing and its
    index is 0, as in the documented numpy equivalent.
    """
    p = ops.data.partitions
    data = as_rows(f32(ops.data), p)
    index, found = match_positions_numba(data, as_rows(f32(ops.vals), p), range(TOP_K - 1, -1, -1))
    replaced = data.copy()
    rows = np.repeat(np.arange(p), TOP_K).reshape(p, TOP_K)
    replaced[rows[found], index[found]] = F32(ops.imm)
    write(ops.dst, replaced)
    if ops.dst_idx is not None:
        write(ops.dst_idx, np.where(found, index, 0).astype(np.float64))
