"""The Scalar Engine's activation instructions, with their shared ``reduce_regs`` accumulators."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from nkisim.errors import DtypeError, OperandError, TargetError
from nkisim.hw import Engine, HwConfig
from nkisim.isa import enums
from nkisim.isa.carriers import activation_carrier
from nkisim.isa.common import as_rows, check_same_layout, check_vector_operand, f32, per_partition, write
from nkisim.isa.ops import OPS, Op
from nkisim.isa.spec import (
    Check,
    Cost,
    EngineState,
    In,
    Operands,
    OptOut,
    OptScalarOrIn,
    Out,
    ScalarOrIn,
    engine_cost,
    instruction,
    require,
    sets_all_of_dst,
)
from nkisim.isa.vector import per_element_cost
from nkisim.isa.vector_reduce import check_column
from nkisim.memory import Tensor, to_dtype
from nkisim.memory.dtypes import logging_active, note_outside_range

_RESETS = (enums.reduce_cmd.reset, enums.reduce_cmd.reset_reduce)
_ACCUMULATES = (enums.reduce_cmd.reduce, enums.reduce_cmd.reset_reduce)
_FP32 = to_dtype("float32")
F32 = np.float32


class ActivationOps(Operands):
    dst: Out
    op: Op
    data: In
    bias: OptScalarOrIn = None
    scale: ScalarOrIn = 1.0
    reduce_op: Op | None = None
    reduce_res: OptOut = None
    reduce_cmd: enums.reduce_cmd = enums.reduce_cmd.idle


def _activation_validate(ops: ActivationOps, chk: Check) -> None:
    _check_activation_operands(ops, chk)
    if ops.reduce_op is not None and ops.reduce_op != OPS["add"]:
        chk.fail(OperandError, "reduce_op", f"{ops.reduce_op!r} is not supported; only nl.add")
    if ops.reduce_res is not None:
        check_vector_operand(chk, "reduce_res", ops.reduce_res, ops.data.partitions)


def _check_activation_operands(ops: ActivationOps | ActivationReduceOps, chk: Check) -> None:
    """The rules on ``op``, ``data``, ``dst``, ``scale`` and ``bias`` shared with activation_reduce."""
    if not ops.op.is_activation:
        chk.fail(OperandError, "op", f"{ops.op!r} is not an activation function")
    check_same_layout(chk, "data", ops.data, "dst", ops.dst)
    p = ops.data.partitions
    check_vector_operand(chk, "scale", ops.scale, p)
    if isinstance(ops.scale, Tensor) and ops.scale.dtype != _FP32:
        chk.fail(DtypeError, "scale", f"dtype {ops.scale.dtype} must be float32")
    check_vector_operand(chk, "bias", ops.bias, p)
    if ops.bias is not None and not isinstance(ops.bias, Tensor):
        require(
            chk, "activation_scalar_bias", "bias", "must be a (P, 1) tensor on NeuronCore-v2; scalars need v3 or newer"
        )


def _table(op: Op) -> str | None:
    """The activation table ``op`` needs; the identity needs none."""
    return None if op.name == "copy" else op.name


def _activation_cost(ops: ActivationOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N)`` Scalar cycles, ``+ MIN_II`` with reduce_res (the accumulator read-out)."""
    cost = per_element_cost(engine, hw, ops.data.free_size)
    if ops.reduce_res is not None:
        # Reading reduce_regs out into reduce_res is one more (minimum-length) instruction.
        readout = per_element_cost(engine, hw, 1)
        cost = Cost(busy_ns=cost.busy_ns + readout.busy_ns, cycles=cost.cycles + readout.cycles)
    return replace(cost, table=_table(ops.op))


@instruction(
    "activation",
    ActivationOps,
    carries=activation_carrier,
    engines=(Engine.scalar,),
    cost=_activation_cost,
    validate=_activation_validate,
    dtypes="any (fp32 math, cast to dst); scale fp32, bias fp32/fp16/bf16",
    overwrites=sets_all_of_dst,
    reads_values=lambda ops: _plain_number(ops.scale) and (ops.bias is None or _plain_number(ops.bias)),
)
def activation(ops: ActivationOps, state: EngineState) -> None:
    """``dst = op(data * scale + bias)``, then an optional add-reduction into ``reduce_regs``.

    ``reduce_cmd`` ``reset``/``reset_reduce`` zero the registers first; ``reduce`` and
    ``reset_reduce`` add the free-axis sum of the float32 activation output (before
    the cast to ``dst``). ``reduce_res`` receives the registers.
    """
    p = ops.data.partitions
    out = _activate(ops)
    write(ops.dst, out)
    regs = state.scalar_reduce_regs[:p]
    if ops.reduce_cmd in _RESETS:
        regs[...] = 0.0
    if ops.reduce_cmd in _ACCUMULATES:
        regs += out.sum(axis=1, dtype=np.float32)
    if ops.reduce_res is not None:
        write(ops.reduce_res, regs.reshape(p, 1))


def _plain_number(value: object) -> bool:
    """Whether ``value`` is a Python number that is not NaN.

    With scalar ``scale`` and ``bias`` :func:`_activate` computes ``data * scale + bias`` into a new array whatever
    ``data``'s layout (correctly rounded, and a NaN of ``data`` stays its own), then the function over that array:
    the same bits from ``data`` anywhere (``InstructionSpec.reads_values``).
    """
    return value.__class__ in (int, float) and value == value


def _activate(ops: ActivationOps | ActivationReduceOps) -> np.ndarray:
    """``op(data * scale + bias)`` in float32, as ``(partitions, elements)``."""
    p = ops.data.partitions
    x = as_rows(f32(ops.data), p) * per_partition(ops.scale, p)
    if ops.bias is not None:
        x = x + per_partition(ops.bias, p)
    assert ops.op.unary is not None
    if logging_active():
        note_outside_range(ops.op.name, ops.op.valid_range, ops.op.outside_valid_range(x))
    with np.errstate(all="ignore"):
        return np.asarray(ops.op.unary(x.astype(np.float32, copy=False)), dtype=np.float32)


# -- activation_reduce ----------------------------------------------------------------


class ActivationReduceOps(Operands):
    dst: Out
    op: Op
    data: In
    reduce_op: Op
    reduce_res: Out
    bias: OptScalarOrIn = None
    scale: ScalarOrIn = 1.0


#: reduce_op values of activation_reduce (a generation may have fewer: ``activation_reduce_ops``).
_REDUCE_OPS = ("add", "maximum", "minimum")


def _activation_reduce_validate(ops: ActivationReduceOps, chk: Check) -> None:
    _check_activation_operands(ops, chk)
    if ops.reduce_op.name not in _REDUCE_OPS:
        chk.fail(OperandError, "reduce_op", f"{ops.reduce_op!r} is not supported; use nl.add, nl.maximum or nl.minimum")
    allowed = chk.hw.capabilities.activation_reduce_ops
    if ops.reduce_op.name not in allowed:
        chk.fail(
            TargetError,
            "reduce_op",
            f"{ops.reduce_op!r} needs NeuronCore-v3 or newer; {chk.hw.name} has only "
            f"{', '.join('nl.' + op for op in allowed)} (capability activation_reduce_ops)",
        )
    check_column(chk, "reduce_res", ops.reduce_res, ops.data.partitions)


def _activation_reduce_cost(ops: ActivationReduceOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N) + MIN_II`` Scalar cycles (the second term reads the accumulators out)."""
    cost = per_element_cost(engine, hw, ops.data.free_size)
    return engine_cost(hw, engine, cost.cycles + hw.engine(engine).min_ii_cycles, table=_table(ops.op))


@instruction(
    "activation_reduce",
    ActivationReduceOps,
    engines=(Engine.scalar,),
    cost=_activation_reduce_cost,
    validate=_activation_reduce_validate,
    dtypes="any (fp32 math, cast to dst); scale fp32, bias fp32/fp16/bf16",
    overwrites=sets_all_of_dst,
)
def activation_reduce(ops: ActivationReduceOps, state: EngineState) -> None:
    """``dst = op(data * scale + bias)``; ``reduce_res = reduce_op`` of it over every free axis.

    As ``activation`` with ``reduce_cmd=reset_reduce`` and ``reduce_res``: the Scalar
    Engine's ``reduce_regs`` (shared with ``activation``) are reset to the identity of
    ``reduce_op``, reduce the float32 output (before the cast to ``dst``) and are read
    out into ``reduce_res``.
    """
    p = ops.data.partitions
    out = _activate(ops)
    write(ops.dst, out)
    regs = state.scalar_reduce_regs[:p]
    assert ops.reduce_op.reduce is not None
    # Starting from the identity of reduce_op, the registers end up holding the reduction itself.
    regs[...] = ops.reduce_op.reduce.reduce(out, axis=1, dtype=F32)
    write(ops.reduce_res, regs.reshape(p, 1))
