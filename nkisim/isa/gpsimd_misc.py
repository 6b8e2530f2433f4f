"""GpSimd Engine index instructions: sequence_bounds and nonzero_with_count.

Costs are not published; like ``iota`` they are ``GPSIMD_START + N`` GpSimd cycles,
with ``N`` the elements per partition read.
"""

from __future__ import annotations

import numpy as np

from nkisim.errors import DtypeError, OperandError, ShapeError
from nkisim.hw import Engine, HwConfig
from nkisim.isa.carriers import GPSIMD_ROWS
from nkisim.isa.common import as_rows, check_in, check_same_partitions, write
from nkisim.isa.spec import Check, Cost, EngineState, In, Operands, Out, engine_cost, instruction
from nkisim.memory import Buffer, Tensor, dtype_name

_ID_DTYPES = ("float32", "int32")
#: nonzero_with_count runs on the first partition of each GpSimd core: every 16th partition.
PARTITIONS_PER_GPSIMD_CORE = 16
_INT32 = np.iinfo(np.int32)


def _gpsimd_cost(n: int, hw: HwConfig, engine: Engine) -> Cost:
    """``GPSIMD_START + N`` GpSimd cycles (not published; as iota's)."""
    return engine_cost(hw, engine, hw.gpsimd.startup_cycles + n)


def _check_dtype(chk: Check, name: str, t: Tensor, allowed: tuple[str, ...]) -> None:
    if dtype_name(t.dtype) not in allowed:
        chk.fail(DtypeError, name, f"dtype {dtype_name(t.dtype)} must be {' or '.join(allowed)}")


# -- sequence_bounds ------------------------------------------------------------------


class SequenceBoundsOps(Operands):
    dst: Out
    segment_ids: In


def _sequence_bounds_validate(ops: SequenceBoundsOps, chk: Check) -> None:
    for name, t in (("segment_ids", ops.segment_ids), ("dst", ops.dst)):
        if t.partitions != 1:
            chk.fail(ShapeError, name, f"partition dim {t.partitions} must be 1")
        _check_dtype(chk, name, t, _ID_DTYPES)
    n = ops.segment_ids.free_size
    if ops.dst.free_size != 2 * n:
        chk.fail(ShapeError, "dst", f"shape {list(ops.dst.shape)} must be [1, 2, {n}]: a start and an end per id")
    if ops.dst.ndim == 3 and ops.dst.shape[1] != 2:
        chk.fail(ShapeError, "dst", f"shape {list(ops.dst.shape)} must be [1, 2, {n}]")


def sequence_bounds_values(ids: np.ndarray) -> np.ndarray:
    """``[2, n]`` (start, end) of the run of equal ids each element is in; id 0 gives ``(n, -1)``.

    ``end`` is one past the run's last element.
    """
    n = ids.size
    pos = np.arange(n)
    first = np.ones(n, dtype=bool)
    first[1:] = ids[1:] != ids[:-1]
    last = np.ones(n, dtype=bool)
    last[:-1] = ids[:-1] != ids[1:]
    start = np.maximum.accumulate(np.where(first, pos, 0))
    end = np.minimum.accumulate(np.where(last, pos + 1, n)[::-1])[::-1]
    pad = ids == 0
    return np.stack([np.where(pad, n, start), np.where(pad, -1, end)])


def _sequence_bounds_cost(ops: SequenceBoundsOps, hw: HwConfig, engine: Engine) -> Cost:
    """``GPSIMD_START + N`` GpSimd cycles, ``N`` the segment ids per partition, as iota's (estimate)."""
    return _gpsimd_cost(ops.segment_ids.free_size, hw, engine)


@instruction(
    "sequence_bounds",
    SequenceBoundsOps,
    engines=(Engine.gpsimd,),
    cost=_sequence_bounds_cost,
    validate=_sequence_bounds_validate,
    dtypes="segment_ids and dst fp32 or int32",
)
def sequence_bounds(ops: SequenceBoundsOps, state: EngineState) -> None:
    """For each segment id, the start and (exclusive) end index of its run of equal ids.

    Segments are runs of consecutive equal ids; padding (id 0) gets start ``n`` and
    end ``-1``. Ids are compared in their own type.
    """
    ids = ops.segment_ids.array.reshape(-1)
    write(ops.dst, sequence_bounds_values(ids).astype(np.float64))


# -- nonzero_with_count ---------------------------------------------------------------


class NonzeroWithCountOps(Operands):
    dst: Out
    src: In
    index_offset: int = 0
    padding_val: int = -1


def _nonzero_with_count_validate(ops: NonzeroWithCountOps, chk: Check) -> None:
    check_in(chk, "src", ops.src, Buffer.sbuf)
    check_in(chk, "dst", ops.dst, Buffer.sbuf)
    _check_dtype(chk, "src", ops.src, _ID_DTYPES)
    _check_dtype(chk, "dst", ops.dst, ("int32",))
    check_same_partitions(chk, "src", ops.src, "dst", ops.dst)
    if ops.dst.free_size != ops.src.free_size + 1:
        chk.fail(
            ShapeError,
            "dst",
            f"has {ops.dst.free_size} elements per partition; it must have src's {ops.src.free_size} plus 1",
        )
    for name in ("index_offset", "padding_val"):
        value = getattr(ops, name)
        if not _INT32.min <= value <= _INT32.max:
            chk.fail(OperandError, name, f"{value} is not an int32")


def _nonzero_with_count_cost(ops: NonzeroWithCountOps, hw: HwConfig, engine: Engine) -> Cost:
    """``GPSIMD_START + N`` GpSimd cycles, ``N`` the src elements per partition, as iota's (estimate)."""
    return _gpsimd_cost(ops.src.free_size, hw, engine)


@instruction(
    "nonzero_with_count",
    NonzeroWithCountOps,
    carries=GPSIMD_ROWS,
    engines=(Engine.gpsimd,),
    cost=_nonzero_with_count_cost,
    validate=_nonzero_with_count_validate,
    dtypes="src fp32 or int32; dst int32; index_offset, padding_val int32",
    requires=("gpsimd_nonzero_with_count",),
)
def nonzero_with_count(ops: NonzeroWithCountOps, state: EngineState) -> None:
    """On partitions 0, 16, ..., 112 of the tiles: nonzero indices + offset, padding, then the count.

    Other partitions of ``dst`` are left unchanged. Partitions are counted from the
    start of each tile (the first partition of each GpSimd core for tiles that start
    at partition 0). Indices wrap as int32.
    """
    p = ops.src.partitions
    src = as_rows(ops.src.array, p)
    n = src.shape[1]
    rows = range(0, p, PARTITIONS_PER_GPSIMD_CORE)
    out = np.full((len(rows), n + 1), ops.padding_val, dtype=np.int64)
    for k, row in enumerate(rows):
        hits = np.flatnonzero(src[row] != 0)
        out[k, : hits.size] = hits + ops.index_offset
        out[k, n] = hits.size
    updated = as_rows(ops.dst.array, p).copy()
    updated[list(rows)] = out.astype(np.int32)  # int32 wrap-around
    ops.dst.array[...] = updated.reshape(ops.dst.shape)
