"""Synchronisation between the two NeuronCores of an LNC=2 launch: ``core_barrier`` and ``sendrecv``.

Both need ``kernel[2]`` on NeuronCore-v3 or newer. The two programs meet at each
call (the machine pairs them: see ``nkisim/sim/multicore.py``); the instruction
is held back until the later of the two arrives (``not_before``), so the earlier
core's engine or DMA queue waits, as a semaphore wait.

* ``core_barrier(data, cores, engine)``: a remote semaphore update to the other
  core (``hw.sync.remote_semaphore_latency_ns``) after both cores arrive. It reads
  and writes ``data`` for dependency tracking: it starts after this core's writes
  to ``data`` and every later access to ``data`` waits for it.
* ``sendrecv``: a DMA from this core's ``src`` into the other core's ``dst`` (and
  from the other's ``src`` into this ``dst``), starting when both are ready: the
  fixed DMA latency, then the bytes at the DMA bandwidth.

The data exchange happens at the meeting, not in the (empty) semantics functions.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator

from nkisim.errors import DtypeError, OperandError, ShapeError, TargetError
from nkisim.hw import Engine, HwConfig
from nkisim.isa import enums
from nkisim.isa.carriers import SENDS
from nkisim.isa.common import check_in
from nkisim.isa.spec import Check, Cost, EngineState, In, Operands, Out, Peer, instruction
from nkisim.memory import Buffer, Region, Tensor, dtype_name

#: The cores an LNC=2 barrier synchronises [nki.isa.core_barrier].
LNC2_CORES = (0, 1)
BARRIER_ENGINES = (Engine.gpsimd, Engine.sync, Engine.vector, Engine.scalar, Engine.tensor)


def _meet(peer: Peer | None, chk: Check, key: tuple[Any, ...], payload: Any) -> list[Any]:
    if peer is None:
        chk.fail(
            TargetError,
            "",
            "needs a kernel launched on two NeuronCores (kernel[2], LNC=2); this kernel runs on one",
        )
    return peer.exchange(key, payload, chk.loc)


# -- core_barrier ---------------------------------------------------------------------


def _as_core_tuple(cores: Any) -> Any:
    """NKI 0.3 kernels write ``cores=(0)``, which is the int 0: read it as the one-core tuple."""
    return (cores,) if isinstance(cores, int) else cores


class CoreBarrierOps(Operands):
    data: Tensor
    cores: Annotated[tuple[int, ...], BeforeValidator(_as_core_tuple)]
    engine: Engine = Engine.unknown


def _core_barrier_accesses(ops: CoreBarrierOps) -> tuple[list[Region], list[Region]]:
    """``data`` lives in HBM, which the barrier's engine does not read: track it here, not as an operand."""
    return [ops.data.region], [ops.data.region]


def _core_barrier_synchronise(
    ops: CoreBarrierOps, peer: Peer | None, arrival_ns: float, cost: Cost, compute: bool, chk: Check
) -> tuple[float, Cost]:
    if len(ops.cores) == 1:  # a barrier of one core: nothing to wait for
        return arrival_ns, cost
    shared = ops.data.buffer is Buffer.shared_hbm
    arrivals = _meet(peer, chk, ("core_barrier",), (arrival_ns, ops.data.storage.uid if shared else None))
    if len({uid for _, uid in arrivals}) != 1:
        chk.fail(OperandError, "data", "must be the same shared HBM tensor in both programs")
    return max(t for t, _ in arrivals), cost


def _core_barrier_validate(ops: CoreBarrierOps, chk: Check) -> None:
    if tuple(ops.cores) not in (LNC2_CORES, (0,), (1,)):
        chk.fail(OperandError, "cores", f"{tuple(ops.cores)} is not supported; only {LNC2_CORES} (LNC=2) or one core")


def _core_barrier_cost(ops: CoreBarrierOps, hw: HwConfig, engine: Engine) -> Cost:
    """``remote_semaphore_latency_ns`` (500 ns) once both cores have arrived: a remote semaphore update (estimate)."""
    return Cost(busy_ns=hw.sync.remote_semaphore_latency_ns)


@instruction(
    "core_barrier",
    CoreBarrierOps,
    engines=BARRIER_ENGINES,
    cost=_core_barrier_cost,
    validate=_core_barrier_validate,
    extra_accesses=_core_barrier_accesses,
    synchronise=_core_barrier_synchronise,
    requires=("lnc2_collectives",),
    dtypes="data: any (a shared-HBM tensor, used only for dependencies)",
)
def core_barrier(ops: CoreBarrierOps, state: EngineState) -> None:
    """Both cores wait here until both have arrived; nothing is computed."""


# -- sendrecv -------------------------------------------------------------------------


class SendRecvOps(Operands):
    src: In
    dst: Out
    send_to_rank: int
    recv_from_rank: int
    pipe_id: int
    dma_engine: enums.dma_engine = enums.dma_engine.dma  # NKI 0.3; the GpSimd DMA path costs the same here


def _sendrecv_synchronise(
    ops: SendRecvOps, peer: Peer | None, arrival_ns: float, cost: Cost, compute: bool, chk: Check
) -> tuple[float, Cost]:
    if peer is not None:
        other = 1 - peer.program_id
        for name in ("send_to_rank", "recv_from_rank"):
            if getattr(ops, name) != other:
                chk.fail(
                    OperandError,
                    name,
                    f"is {getattr(ops, name)}; program {peer.program_id} exchanges with the other core, {other}",
                )
    values = ops.src.array.copy() if compute else None
    sent = (arrival_ns, ops.src.shape, ops.src.dtype, values)
    arrivals = _meet(peer, chk, ("sendrecv", ops.pipe_id), sent)
    _, shape, dtype, received = arrivals[1 - peer.program_id]  # type: ignore[union-attr]
    if shape != ops.dst.shape or dtype != ops.dst.dtype:
        chk.fail(
            ShapeError,
            "dst",
            f"is {dtype_name(ops.dst.dtype)}{list(ops.dst.shape)} but the other core sends "
            f"{dtype_name(dtype)}{list(shape)}",
        )
    if compute:
        ops.dst.array[...] = received
    return max(a[0] for a in arrivals), cost


def _sendrecv_validate(ops: SendRecvOps, chk: Check) -> None:
    check_in(chk, "src", ops.src, Buffer.sbuf)
    check_in(chk, "dst", ops.dst, Buffer.sbuf)
    if ops.src.dtype != ops.dst.dtype:
        chk.fail(DtypeError, "dst", f"dtype {dtype_name(ops.dst.dtype)} differs from src {dtype_name(ops.src.dtype)}")
    if ops.src.shape != ops.dst.shape:
        chk.fail(ShapeError, "dst", f"shape {list(ops.dst.shape)} differs from src {list(ops.src.shape)}")
    for name in ("send_to_rank", "recv_from_rank"):
        if getattr(ops, name) not in LNC2_CORES:
            chk.fail(OperandError, name, f"{getattr(ops, name)} must be 0 or 1 (the cores of an LNC=2 pair)")


def _sendrecv_cost(ops: SendRecvOps, hw: HwConfig, engine: Engine) -> Cost:
    """``DMA_LAT + src bytes / DMA_BW`` ns once both cores have arrived (estimate)."""
    nbytes = ops.src.size * ops.src.itemsize
    return Cost(busy_ns=nbytes / hw.dma.bytes_per_ns, latency_ns=hw.dma.fixed_latency_ns, bytes=nbytes)


@instruction(
    "sendrecv",
    SendRecvOps,
    carries=SENDS,
    engines=(Engine.dma,),
    cost=_sendrecv_cost,
    validate=_sendrecv_validate,
    synchronise=_sendrecv_synchronise,
    requires=("lnc2_collectives",),
    dtypes="any; dst = src dtype",
)
def sendrecv(ops: SendRecvOps, state: EngineState) -> None:
    """``dst`` (this core) receives the other core's ``src``; it sends its own ``src`` to the other's ``dst``."""
