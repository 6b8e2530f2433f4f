"""The Scalar Engine's ``activate2`` (NeuronCore-v4): two tensor-scalar stages, an activation, a reduction."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nkisim.errors import DtypeError, OperandError
from nkisim.hw import Engine, HwConfig
from nkisim.isa import enums
from nkisim.isa.common import apply_alu, as_rows, check_same_layout, check_vector_operand, f32, per_partition, write
from nkisim.isa.ops import Op
from nkisim.isa.spec import Check, Cost, EngineState, In, Operands, OptOut, Out, ScalarOrIn, engine_cost, instruction
from nkisim.isa.vector import per_element_cost
from nkisim.memory import Tensor, dtype_name

F32 = np.float32
_RESETS = (enums.reduce_cmd.reset, enums.reduce_cmd.reset_reduce)
_ACCUMULATES = (enums.reduce_cmd.reduce, enums.reduce_cmd.reset_reduce)

#: The ``(op0, op1)`` pairs of the tensor-scalar stage the documentation lists.
PAIRS = (
    ("multiply", "add"),
    ("multiply", "subtract"),
    ("multiply", "bypass"),
    ("add", "bypass"),
    ("subtract", "bypass"),
    ("bypass", "bypass"),
)
#: ``reduce_op`` values: the accumulators' starting value (the identity) and the reduction of each row,
#: which ``reduce_op`` then combines with the accumulators.
REDUCE: dict[str, tuple[float, Callable[[np.ndarray], np.ndarray]]] = {
    "add": (0.0, lambda rows: rows.sum(axis=1, dtype=F32)),
    "maximum": (-np.inf, lambda rows: rows.max(axis=1)),
    "minimum": (np.inf, lambda rows: rows.min(axis=1)),
    "abs_max": (0.0, lambda rows: np.abs(rows).max(axis=1)),
    "abs_min": (np.inf, lambda rows: np.abs(rows).min(axis=1)),
}


class Activate2Ops(Operands):
    dst: Out
    op: Op
    data: In
    imm0: ScalarOrIn
    imm1: ScalarOrIn
    op0: Op
    op1: Op
    relu_param: ScalarOrIn = 0.0
    reverse0: bool = False
    reverse1: bool = False
    reduce_op: Op | None = None
    reduce_res: OptOut = None
    reduce_cmd: enums.reduce_cmd = enums.reduce_cmd.idle


def _validate(ops: Activate2Ops, chk: Check) -> None:
    if not ops.op.is_activation:
        chk.fail(OperandError, "op", f"{ops.op!r} is not an activation function")
    check_same_layout(chk, "data", ops.data, "dst", ops.dst)
    if (ops.op0.name, ops.op1.name) not in PAIRS:
        pairs = ", ".join(f"(nl.{a}, nl.{b})" for a, b in PAIRS)
        chk.fail(OperandError, "op1", f"(op0, op1) = ({ops.op0!r}, {ops.op1!r}) is not supported; use one of {pairs}")
    if ops.reverse0 and ops.op0.is_bypass:
        chk.fail(OperandError, "reverse0", "requires op0 to be set (not nl.bypass)")
    if ops.reverse1 and ops.op1.is_bypass:
        chk.fail(OperandError, "reverse1", "requires op1 to be set (not nl.bypass)")
    p = ops.data.partitions
    for name in ("imm0", "imm1", "relu_param"):
        check_vector_operand(chk, name, getattr(ops, name), p)
    if isinstance(ops.imm0, Tensor) and isinstance(ops.imm1, Tensor) and ops.imm0.dtype != ops.imm1.dtype:
        chk.fail(
            DtypeError,
            "imm1",
            f"dtype {dtype_name(ops.imm1.dtype)} must match imm0's {dtype_name(ops.imm0.dtype)} when both are tensors",
        )
    if ops.reduce_op is not None and ops.reduce_op.name not in REDUCE:
        allowed = ", ".join(f"nl.{n}" for n in REDUCE)
        chk.fail(OperandError, "reduce_op", f"{ops.reduce_op!r} is not supported; use one of {allowed}")
    if ops.reduce_op is None and ops.reduce_cmd in _ACCUMULATES:
        chk.fail(OperandError, "reduce_op", f"reduce_cmd={ops.reduce_cmd.name} needs a reduce_op")
    if ops.reduce_res is not None:
        check_vector_operand(chk, "reduce_res", ops.reduce_res, p)


def _cost(ops: Activate2Ops, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N)`` Scalar cycles, ``+ MIN_II`` with reduce_res (the accumulator read-out), as activation."""
    cycles = per_element_cost(engine, hw, ops.data.free_size).cycles
    if ops.reduce_res is not None:
        cycles += hw.engine(engine).min_ii_cycles
    return engine_cost(hw, engine, cycles, table=None if ops.op.name == "copy" else ops.op.name)


def _stage(x: np.ndarray, op: Op, imm: Tensor | float | int, reverse: bool, p: int) -> np.ndarray:
    if op.is_bypass:
        return x
    return apply_alu(op, x, per_partition(imm, p), reverse).astype(F32, copy=False)


@instruction(
    "activate2",
    Activate2Ops,
    engines=(Engine.scalar,),
    cost=_cost,
    validate=_validate,
    requires=("scalar_activate2",),
    dtypes="any (fp32 math, cast to dst); imm0/imm1 of one dtype when both are tensors",
)
def activate2(ops: Activate2Ops, state: EngineState) -> None:
    """``dst = op((data op0 imm0) op1 imm1, relu_param)`` in float32, then an optional reduction.

    ``reverse0``/``reverse1`` swap a stage's operands; ``nl.bypass`` skips it. ``relu_param``
    is the slope below zero of ``nl.prelu`` (other functions ignore it). ``reduce_cmd``
    ``reset``/``reset_reduce`` set the Scalar Engine's accumulators (shared with
    ``activation``) to the identity of ``reduce_op``; ``reduce``/``reset_reduce`` reduce
    the float32 output into them; ``reduce_res`` receives them.
    """
    p = ops.data.partitions
    x = as_rows(f32(ops.data), p)
    x = _stage(_stage(x, ops.op0, ops.imm0, ops.reverse0, p), ops.op1, ops.imm1, ops.reverse1, p)
    with np.errstate(all="ignore"):
        if ops.op.parametric is not None:
            out = ops.op.parametric(x, per_partition(ops.relu_param, p))
        else:
            assert ops.op.unary is not None
            out = ops.op.unary(x)
    out = np.asarray(out, dtype=F32)
    write(ops.dst, out)
    regs = state.scalar_reduce_regs[:p]
    if ops.reduce_op is not None and ops.reduce_cmd in _RESETS:
        regs[...] = REDUCE[ops.reduce_op.name][0]
    if ops.reduce_op is not None and ops.reduce_cmd in _ACCUMULATES:
        assert ops.reduce_op.binary is not None
        partial = REDUCE[ops.reduce_op.name][1](out.reshape(p, -1))
        regs[...] = ops.reduce_op.binary(regs, partial.astype(F32))
    if ops.reduce_res is not None:
        write(ops.reduce_res, regs.reshape(p, 1))
