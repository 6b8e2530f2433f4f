"""DMA instructions: copies between HBM and SBUF, run by the DMA engines."""

from __future__ import annotations

from nkisim.errors import OperandError, ShapeError
from nkisim.hw import Engine, HwConfig
from nkisim.isa import enums
from nkisim.isa.common import check_in, copy_bits, f32, same_format, write
from nkisim.isa.ops import OPS, Op
from nkisim.isa.spec import Check, Cost, EngineState, In, Operands, Out, instruction
from nkisim.memory import Buffer


class DmaCopyOps(Operands):
    dst: Out
    src: In
    dst_rmw_op: Op | None = None
    oob_mode: enums.oob_mode = enums.oob_mode.error
    dge_mode: enums.dge_mode = enums.dge_mode.unknown
    unique_indices: bool = True


def _dma_copy_validate(ops: DmaCopyOps, chk: Check) -> None:
    check_in(chk, "src", ops.src, Buffer.hbm, Buffer.private_hbm, Buffer.shared_hbm, Buffer.sbuf)
    check_in(chk, "dst", ops.dst, Buffer.hbm, Buffer.private_hbm, Buffer.shared_hbm, Buffer.sbuf)
    if ops.src.size != ops.dst.size:
        chk.fail(
            ShapeError,
            "dst",
            f"has {ops.dst.size} elements ({list(ops.dst.shape)}) but src has {ops.src.size} ({list(ops.src.shape)})",
        )
    if ops.dst_rmw_op is not None and ops.dst_rmw_op is not OPS["add"]:
        chk.fail(OperandError, "dst_rmw_op", f"{ops.dst_rmw_op!r} is not supported; only nl.add")
    if ops.dge_mode is enums.dge_mode.hwdge and chk.hw.nc_version < 3:
        chk.fail(OperandError, "dge_mode", "hardware DGE needs NeuronCore-v3 or newer")


def _dma_copy_cost(ops: DmaCopyOps, hw: HwConfig, engine: Engine) -> Cost:
    nbytes = max(ops.src.size * ops.src.itemsize, ops.dst.size * ops.dst.itemsize)
    return Cost(busy_ns=nbytes / hw.dma.bytes_per_ns, latency_ns=hw.dma.fixed_latency_ns, bytes=nbytes)


@instruction("dma_copy", DmaCopyOps, engines=(Engine.dma,), cost=_dma_copy_cost, validate=_dma_copy_validate)
def dma_copy(ops: DmaCopyOps, state: EngineState) -> None:
    """Copy ``src`` to ``dst`` element by element in row-major order (shapes may differ).

    A dtype change goes through float32. ``dst_rmw_op=nl.add`` stores ``dst + src``
    computed in float32.
    """
    if ops.dst_rmw_op is not None:
        write(ops.dst, f32(ops.dst).reshape(-1) + f32(ops.src).reshape(-1))
    elif same_format(ops.src, ops.dst):
        copy_bits(ops.dst, ops.src)
    else:
        write(ops.dst, f32(ops.src))
