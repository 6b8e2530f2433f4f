"""Selection instructions: ``affine_select`` (GpSimd), ``select_reduce`` and ``range_select`` (Vector).

``select_reduce`` and ``range_select`` max-reduce their output into the Vector
Engine's accumulator registers (``EngineState.vector_reduce_regs``), shared with
``exponential``, ``tensor_scalar_reduce`` and ``tensor_scalar_cumulative``.
"""

from __future__ import annotations

import numpy as np

from nkisim.errors import DtypeError, OperandError, ShapeError
from nkisim.hw import Engine, HwConfig
from nkisim.isa import enums
from nkisim.isa.common import (
    affine_values,
    as_rows,
    check_in,
    check_not_both_psum,
    check_same_layout,
    check_vector_operand,
    f32,
    per_partition,
    same_format,
    write,
)
from nkisim.isa.ops import OPS, Op
from nkisim.isa.spec import Check, Cost, EngineState, In, Operands, OptOut, Out, ScalarOrIn, engine_cost, instruction
from nkisim.isa.vector import per_element_cost
from nkisim.isa.vector_reduce import (
    check_column,
    check_dtype_in,
    check_fp32_operand,
    check_one_of,
    check_reduce_cmd,
    read_out,
    vector_regs,
    with_readout,
)
from nkisim.memory import Buffer, cast, dtype_name, is_float

F32 = np.float32
FP32_MIN = float(np.finfo(np.float32).min)
_INT32 = (-(2**31), 2**31 - 1)
_COMPARISONS = ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")


# -- affine_select --------------------------------------------------------------------


class AffineSelectOps(Operands):
    dst: Out
    pattern: list[list[int]] | tuple[tuple[int, int], ...]
    offset: int = 0  # required in NKI 0.2 (third); NKI 0.3 moved it last with default 0
    channel_multiplier: int
    on_true_tile: In
    on_false_value: float | int
    cmp_op: Op = OPS["equal"]


def _affine_select_validate(ops: AffineSelectOps, chk: Check) -> None:
    check_in(chk, "dst", ops.dst, Buffer.sbuf)
    check_in(chk, "on_true_tile", ops.on_true_tile, Buffer.sbuf)
    check_same_layout(chk, "on_true_tile", ops.on_true_tile, "dst", ops.dst)
    if not 1 <= len(ops.pattern) <= 4 or any(len(pair) != 2 for pair in ops.pattern):
        chk.fail(OperandError, "pattern", "must be 1 to 4 [step, num] pairs")
    if any(num < 1 for _, num in ops.pattern):
        chk.fail(OperandError, "pattern", "sizes (num) must be positive")
    count = int(np.prod([num for _, num in ops.pattern]))
    if count != ops.dst.free_size:
        chk.fail(ShapeError, "pattern", f"yields {count} elements per partition but dst has {ops.dst.free_size}")
    for name, value in (("offset", ops.offset), ("channel_multiplier", ops.channel_multiplier)):
        if not _INT32[0] <= value <= _INT32[1]:
            chk.fail(OperandError, name, f"{value} is not an int32 value")
    value = float(ops.on_false_value)
    with np.errstate(over="ignore"):
        overflows = np.isfinite(value) and not np.isfinite(np.float32(value))  # -3.4028235e38 rounds to -max
    if overflows:
        chk.fail(DtypeError, "on_false_value", f"{value} is not a float32 value")
    check_one_of(chk, "cmp_op", ops.cmp_op, _COMPARISONS)


def _affine_select_cost(ops: AffineSelectOps, hw: HwConfig, engine: Engine) -> Cost:
    """``GPSIMD_START + N`` GpSimd cycles."""
    return engine_cost(hw, engine, hw.gpsimd.startup_cycles + ops.dst.free_size)


@instruction(
    "affine_select",
    AffineSelectOps,
    engines=(Engine.gpsimd,),
    cost=_affine_select_cost,
    validate=_affine_select_validate,
    dtypes="on_true_tile, dst any (cast through fp32 if they differ); on_false_value fp32",
)
def affine_select(ops: AffineSelectOps, state: EngineState) -> None:
    """``dst = on_true_tile`` where ``cmp_op(affine, 0)``, else ``on_false_value``.

    ``affine = offset + c * channel_multiplier + sum(step * index)`` for partition ``c``
    and the pattern's indices (as ``iota``), in exact integer arithmetic.

    Selected elements are copied bit-exactly when ``on_true_tile`` and ``dst`` have one
    dtype, and through float32 otherwise; ``on_false_value`` is cast from float32.
    """
    p = ops.dst.partitions
    assert ops.cmp_op.binary is not None
    affine = affine_values(p, ops.pattern, ops.offset, ops.channel_multiplier)
    keep = np.asarray(ops.cmp_op.binary(affine, 0)) != 0
    false_value = np.full((p, ops.dst.free_size), F32(ops.on_false_value), dtype=F32)
    if same_format(ops.on_true_tile, ops.dst):
        out = np.array(cast(false_value, ops.dst.dtype), dtype=ops.dst.dtype)
        out[keep] = as_rows(ops.on_true_tile.array, p)[keep]
        ops.dst.array[...] = out.reshape(ops.dst.shape)
        return
    write(ops.dst, np.where(keep, as_rows(f32(ops.on_true_tile), p), false_value))


# -- select_reduce --------------------------------------------------------------------


class SelectReduceOps(Operands):
    dst: Out
    predicate: In
    on_true: In
    on_false: ScalarOrIn
    reduce_res: OptOut = None
    reduce_cmd: enums.reduce_cmd = enums.reduce_cmd.idle
    reduce_op: Op = OPS["maximum"]
    reverse_pred: bool = False


_PREDICATE_DTYPES = ("int8", "uint8", "int16", "uint16", "bool_")
_SELECT_CMDS = (enums.reduce_cmd.idle, enums.reduce_cmd.reset_reduce, enums.reduce_cmd.reduce)


def _select_reduce_validate(ops: SelectReduceOps, chk: Check) -> None:
    p = ops.on_true.partitions
    check_same_layout(chk, "on_true", ops.on_true, "dst", ops.dst)
    check_same_layout(chk, "on_true", ops.on_true, "predicate", ops.predicate)
    check_not_both_psum(chk, "on_true", ops.on_true, "predicate", ops.predicate)
    if dtype_name(ops.on_true.dtype) in ("tfloat32", "int32", "uint32"):
        chk.fail(
            DtypeError,
            "on_true",
            f"dtype {dtype_name(ops.on_true.dtype)} is not supported (no tfloat32 or 32-bit integers)",
        )
    check_dtype_in(chk, "predicate", ops.predicate, _PREDICATE_DTYPES)
    check_vector_operand(chk, "on_false", ops.on_false, p)
    check_one_of(chk, "reduce_op", ops.reduce_op, ("maximum",))
    check_reduce_cmd(chk, ops.reduce_cmd, _SELECT_CMDS)
    if ops.reduce_res is not None:
        check_column(chk, "reduce_res", ops.reduce_res, p)
        if not is_float(ops.reduce_res.dtype):
            chk.fail(DtypeError, "reduce_res", f"dtype {dtype_name(ops.reduce_res.dtype)} must be a float type")


def _select_reduce_cost(ops: SelectReduceOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, c*N)`` Vector cycles, c=1 on split SBUF/PSUM inputs else 2, +MIN_II with reduce_res (estimate).

    The inputs are ``on_true`` and ``predicate``. Not published: as tensor_copy_predicated,
    plus the accumulator read-out of tensor_scalar_reduce.
    """
    split = {ops.on_true.buffer, ops.predicate.buffer} == {Buffer.sbuf, Buffer.psum}
    per = 1.0 if split else hw.vector.two_sbuf_inputs_cycles_per_element
    return with_readout(per_element_cost(engine, hw, ops.on_true.free_size, per), hw, engine, ops.reduce_res)


@instruction(
    "select_reduce",
    SelectReduceOps,
    engines=(Engine.vector,),
    cost=_select_reduce_cost,
    validate=_select_reduce_validate,
    dtypes="on_true any but tf32/int32/uint32; predicate (u)int8/(u)int16; on_false scalar fp32; reduce_res floats",
)
def select_reduce(ops: SelectReduceOps, state: EngineState) -> None:
    """``dst = where(predicate, on_true, on_false)``, with a max into the Vector accumulators.

    A predicate element is true when it is nonzero (``reverse_pred`` negates it). ``reset_reduce`` sets the
    accumulators to -inf and ``reduce`` keeps them; both then take the max with the
    per-partition max of the float32 result. ``idle`` leaves them. ``reduce_res``
    receives the accumulators.
    """
    p = ops.on_true.partitions
    keep = as_rows(ops.predicate.array, p) != 0
    if ops.reverse_pred:
        keep = ~keep
    result = np.where(keep, as_rows(f32(ops.on_true), p), per_partition(ops.on_false, p)).astype(F32, copy=False)
    write(ops.dst, result)
    regs = vector_regs(state, p)
    if ops.reduce_cmd is enums.reduce_cmd.reset_reduce:
        regs[...] = -np.inf
    if ops.reduce_cmd is not enums.reduce_cmd.idle:
        regs[...] = np.maximum(regs, result.max(axis=1))
    read_out(ops.reduce_res, regs)


# -- range_select ---------------------------------------------------------------------


class RangeSelectOps(Operands):
    dst: Out
    on_true_tile: In
    comp_op0: Op
    comp_op1: Op
    bound0: In
    bound1: In
    reduce_cmd: enums.reduce_cmd = enums.reduce_cmd.reset_reduce
    reduce_res: OptOut = None
    reduce_op: Op = OPS["maximum"]
    range_start: float | int = 0.0
    on_false_value: float | int = -3.4028235e38


_RANGE_COMPARISONS = ("equal", "less", "less_equal", "greater", "greater_equal")
_INDEX_LIMIT = 2**24


def _range_select_validate(ops: RangeSelectOps, chk: Check) -> None:
    p = ops.on_true_tile.partitions
    check_one_of(chk, "comp_op0", ops.comp_op0, _RANGE_COMPARISONS)
    check_one_of(chk, "comp_op1", ops.comp_op1, _RANGE_COMPARISONS)
    check_one_of(chk, "reduce_op", ops.reduce_op, ("maximum",))
    check_same_layout(chk, "on_true_tile", ops.on_true_tile, "dst", ops.dst)
    if not is_float(ops.on_true_tile.dtype):
        chk.fail(DtypeError, "on_true_tile", f"dtype {dtype_name(ops.on_true_tile.dtype)} must be a float type")
    for name, bound in (("bound0", ops.bound0), ("bound1", ops.bound1)):
        check_column(chk, name, bound, p)
        check_fp32_operand(chk, name, bound)
    if ops.reduce_res is not None:
        check_column(chk, "reduce_res", ops.reduce_res, p)
    start = float(ops.range_start)
    if start != int(start):
        chk.fail(OperandError, "range_start", f"{ops.range_start} must be an integer")
    first, last = int(start), int(start) + ops.on_true_tile.free_size - 1
    if max(abs(first), abs(last)) > _INDEX_LIMIT:
        chk.fail(OperandError, "range_start", f"+ free index reaches {last}, beyond the 2^24 float32 range")


def _range_select_cost(ops: RangeSelectOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N)`` Vector cycles."""
    return per_element_cost(engine, hw, ops.on_true_tile.free_size)


@instruction(
    "range_select",
    RangeSelectOps,
    engines=(Engine.vector,),
    cost=_range_select_cost,
    validate=_range_select_validate,
    requires=("vector_range_select",),
    dtypes="on_true_tile floats; bound0/bound1 fp32; compared in fp32",
)
def range_select(ops: RangeSelectOps, state: EngineState) -> None:
    """Keep ``on_true_tile[j]`` where ``comp_op0(j + range_start, bound0)`` and ``comp_op1(j + range_start, bound1)``.

    Other elements become FP32_MIN; ``j`` is the flattened free index, compared in
    float32. As the NKI 0.2 docs say, ``on_false_value`` and ``reduce_cmd`` are ignored:
    the fill is always FP32_MIN and the accumulators are always reset, then set to the
    per-partition max of the float32 result, which ``reduce_res`` receives.
    """
    p = ops.on_true_tile.partitions
    n = ops.on_true_tile.free_size
    assert ops.comp_op0.binary is not None and ops.comp_op1.binary is not None
    index = (int(ops.range_start) + np.arange(n, dtype=np.int64)).astype(F32)[None, :]
    keep = (np.asarray(ops.comp_op0.binary(index, per_partition(ops.bound0, p))) != 0) & (
        np.asarray(ops.comp_op1.binary(index, per_partition(ops.bound1, p))) != 0
    )
    result = np.where(keep, as_rows(f32(ops.on_true_tile), p), F32(FP32_MIN)).astype(F32, copy=False)
    write(ops.dst, result)
    regs = vector_regs(state, p)
    regs[...] = np.maximum(F32(-np.inf), result.max(axis=1))
    read_out(ops.reduce_res, regs)
