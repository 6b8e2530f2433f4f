"""The Scalar Engine's activation instruction, with its ``reduce_regs`` accumulators."""

from __future__ import annotations

import numpy as np

from nkisim.errors import DtypeError, OperandError, TargetError
from nkisim.hw import Engine, HwConfig
from nkisim.isa import enums
from nkisim.isa.common import as_rows, check_same_layout, check_vector_operand, f32, per_partition, write
from nkisim.isa.ops import OPS, Op
from nkisim.isa.spec import Check, Cost, EngineState, In, Operands, OptOut, OptScalarOrIn, Out, ScalarOrIn, instruction
from nkisim.isa.vector import per_element_cost
from nkisim.memory import Tensor, to_dtype

_RESETS = (enums.reduce_cmd.reset, enums.reduce_cmd.reset_reduce)
_ACCUMULATES = (enums.reduce_cmd.reduce, enums.reduce_cmd.reset_reduce)
_FP32 = to_dtype("float32")


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
    if not ops.op.is_activation:
        chk.fail(OperandError, "op", f"{ops.op!r} is not an activation function")
    check_same_layout(chk, "data", ops.data, "dst", ops.dst)
    p = ops.data.partitions
    check_vector_operand(chk, "scale", ops.scale, p)
    if isinstance(ops.scale, Tensor) and ops.scale.dtype != _FP32:
        chk.fail(DtypeError, "scale", f"dtype {ops.scale.dtype} must be float32")
    check_vector_operand(chk, "bias", ops.bias, p)
    if ops.bias is not None and not isinstance(ops.bias, Tensor) and chk.hw.nc_version < 3:
        chk.fail(TargetError, "bias", "must be a (P, 1) tensor on NeuronCore-v2; scalars need v3 or newer")
    if ops.reduce_op is not None and ops.reduce_op is not OPS["add"]:
        chk.fail(OperandError, "reduce_op", f"{ops.reduce_op!r} is not supported; only nl.add")
    if ops.reduce_res is not None:
        check_vector_operand(chk, "reduce_res", ops.reduce_res, p)


def _activation_cost(ops: ActivationOps, hw: HwConfig, engine: Engine) -> Cost:
    cost = per_element_cost(engine, hw, ops.data.free_size)
    if ops.reduce_res is None:
        return cost
    # Reading reduce_regs out into reduce_res is one more (minimum-length) instruction.
    readout = per_element_cost(engine, hw, 1)
    return Cost(busy_ns=cost.busy_ns + readout.busy_ns, cycles=cost.cycles + readout.cycles)


@instruction(
    "activation",
    ActivationOps,
    engines=(Engine.scalar,),
    cost=_activation_cost,
    validate=_activation_validate,
)
def activation(ops: ActivationOps, state: EngineState) -> None:
    """``dst = op(data * scale + bias)``, then an optional add-reduction into ``reduce_regs``.

    ``reduce_cmd`` ``reset``/``reset_reduce`` zero the registers first; ``reduce`` and
    ``reset_reduce`` add the free-axis sum of the float32 activation output (before
    the cast to ``dst``). ``reduce_res`` receives the registers.
    """
    p = ops.data.partitions
    x = as_rows(f32(ops.data), p) * per_partition(ops.scale, p)
    if ops.bias is not None:
        x = x + per_partition(ops.bias, p)
    assert ops.op.unary is not None
    with np.errstate(all="ignore"):
        out = np.asarray(ops.op.unary(x.astype(np.float32, copy=False)), dtype=np.float32)
    write(ops.dst, out)
    regs = state.scalar_reduce_regs[:p]
    if ops.reduce_cmd in _RESETS:
        regs[...] = 0.0
    if ops.reduce_cmd in _ACCUMULATES:
        regs += out.sum(axis=1, dtype=np.float32)
    if ops.reduce_res is not None:
        write(ops.reduce_res, regs.reshape(p, 1))
