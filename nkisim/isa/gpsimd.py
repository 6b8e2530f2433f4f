"""GpSimd Engine instructions."""

from __future__ import annotations

import numpy as np

from nkisim.errors import OperandError, ShapeError
from nkisim.hw import Engine, HwConfig
from nkisim.isa.common import affine_values, check_in, write
from nkisim.isa.spec import Check, Cost, EngineState, Operands, Out, engine_cost, instruction, sets_all_of_dst
from nkisim.memory import Buffer


class IotaOps(Operands):
    dst: Out
    pattern: list[list[int]] | tuple[tuple[int, int], ...]
    offset: int = 0  # required in NKI 0.2; NKI 0.3 defaults it to 0
    channel_multiplier: int = 0


def _iota_validate(ops: IotaOps, chk: Check) -> None:
    check_in(chk, "dst", ops.dst, Buffer.sbuf)
    if not 1 <= len(ops.pattern) <= 4 or any(len(pair) != 2 for pair in ops.pattern):
        chk.fail(OperandError, "pattern", "must be 1 to 4 [step, num] pairs")
    count = int(np.prod([num for _, num in ops.pattern]))
    if count != ops.dst.free_size:
        chk.fail(ShapeError, "pattern", f"yields {count} elements per partition but dst has {ops.dst.free_size}")


def _iota_cost(ops: IotaOps, hw: HwConfig, engine: Engine) -> Cost:
    """``GPSIMD_START + N`` GpSimd cycles."""
    return engine_cost(hw, engine, hw.gpsimd.startup_cycles + ops.dst.free_size)


@instruction(
    "iota",
    IotaOps,
    engines=(Engine.gpsimd,),
    cost=_iota_cost,
    validate=_iota_validate,
    dtypes="int32 values (offset, channel_multiplier, steps), cast to any dst dtype",
    overwrites=sets_all_of_dst,
)
def iota(ops: IotaOps, state: EngineState) -> None:
    """``dst[c, w, z, y, x] = offset + c * channel_multiplier + sum(step * index)`` in int32."""
    wrapped = affine_values(ops.dst.partitions, ops.pattern, ops.offset, ops.channel_multiplier).astype(np.int32)
    if ops.dst.dtype == np.int32:
        ops.dst.array[...] = wrapped.reshape(ops.dst.shape)
    else:
        write(ops.dst, wrapped.astype(np.float64))
