"""``nki.collectives``: collectives between the ranks of a replica group.

Each collective is an instruction every rank of a rank list issues. The ranks meet at it
(the ``synchronise`` hook: ``Peer.exchange_ranks``, see ``nkisim/sim/multicore.py``): each
brings its arrival time and a copy of its sources, and each then writes its own
destinations from what all brought. The collective starts when the last rank of its list
arrives (``not_before``) and runs on a DMA queue for the time of the ring algorithm
(:mod:`nkisim.isa.replica_group`). With LNC=2 each core of a rank issues the collective
and meets the same core of the other ranks.

The instructions live in their own registry, :data:`COLLECTIVES`, and are called from
``nki.collectives`` (``ncc.all_gather``), not ``nki.isa``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

import numpy as np
from pydantic import BeforeValidator

from nkisim.errors import DtypeError, MemoryKindError, OperandError, ShapeError
from nkisim.hw import Engine, HwConfig
from nkisim.isa.ops import Op
from nkisim.isa.replica_group import ReplicaGroup, as_replica_group, ring_cost
from nkisim.isa.spec import (
    Check,
    Cost,
    EngineState,
    InList,
    InstructionSpec,
    Operands,
    OutList,
    Peer,
    instruction,
)
from nkisim.memory import Tensor, cast, dtype_name

#: The ``nki.collectives`` instructions, by name.
COLLECTIVES: dict[str, InstructionSpec] = {}
#: The reductions collectives take [api all_reduce]: ``nl.add``, ``nl.minimum``, ``nl.maximum``.
REDUCE_OPS = ("add", "minimum", "maximum")
#: ``priority``: a DMA quality-of-service level, 0 (highest) to 3 [api all_reduce]; not modelled in time.
PRIORITIES = range(4)

Group = Annotated[ReplicaGroup, BeforeValidator(as_replica_group)]


def register_collective(name: str, operands: type[Operands], cost: Any, **hooks: Any) -> Callable[[Any], Any]:
    return instruction(
        name,
        operands,
        engines=(Engine.dma,),
        cost=cost,
        registry=COLLECTIVES,
        namespace="ncc",
        requires=("replica_collectives",),
        **hooks,
    )


# -- what every collective checks -------------------------------------------------------


def _shown(t: Tensor) -> str:
    return f"{dtype_name(t.dtype)}{list(t.shape)}"


def _check_lists(
    chk: Check, srcs: Sequence[Tensor], dsts: Sequence[Tensor], src_name: str = "srcs", dst_name: str = "dsts"
) -> None:
    if not srcs:
        chk.fail(OperandError, src_name, "is empty; give one tensor or more")
    if len(srcs) != len(dsts):
        chk.fail(OperandError, dst_name, f"has {len(dsts)} tensors but {src_name} has {len(srcs)}; give one per src")


def check_memories(
    chk: Check,
    srcs: Sequence[tuple[str, Tensor]],
    dsts: Sequence[tuple[str, Tensor]],
    sbuf: bool = True,
    coalesced: bool = True,
) -> None:
    """All on HBM, or (``sbuf``) all on SBUF; never PSUM, never a mix.

    With ``coalesced``, ``srcs`` is one list of tensors moved together, which SBUF allows only one of.
    """
    named = [*srcs, *dsts]
    name0, t0 = named[0]
    for name, t in named:
        if t.buffer.kind == "psum":
            chk.fail(MemoryKindError, name, f"is in PSUM ({t.name}); collectives read and write HBM or SBUF")
        if t.buffer.kind == "sbuf" and not sbuf:
            chk.fail(MemoryKindError, name, f"is in SBUF ({t.name}); this collective needs HBM tensors")
        if t.buffer.is_hbm != t0.buffer.is_hbm:
            chk.fail(
                MemoryKindError,
                name,
                f"is in {t.buffer.kind.upper()} but {name0} is in {t0.buffer.kind.upper()}: "
                "all tensors of a collective must be on HBM or all on SBUF",
            )
    if coalesced and not t0.buffer.is_hbm and len(srcs) > 1:
        chk.fail(
            OperandError,
            srcs[0][0].split("[")[0],
            f"holds {len(srcs)} SBUF tensors: coalesced collectives (several tensors) need HBM tensors",
        )


def check_dtypes(chk: Check, srcs: Sequence[Tensor], dsts: Sequence[Tensor], dst_name: str = "dsts") -> None:
    for i, (src, dst) in enumerate(zip(srcs, dsts)):
        if src.dtype != dst.dtype:
            chk.fail(
                DtypeError,
                f"{dst_name}[{i}]",
                f"dtype {dtype_name(dst.dtype)} differs from src {dtype_name(src.dtype)}",
            )


def check_priority(chk: Check, priority: int | None) -> None:
    if priority is not None and priority not in PRIORITIES:
        chk.fail(OperandError, "priority", f"{priority} must be 0 to 3 (0 is the highest)")


def check_op(chk: Check, op: Op) -> None:
    if op.name not in REDUCE_OPS:
        chk.fail(OperandError, "op", f"{op!r} is not a collective reduction (nl.add, nl.minimum or nl.maximum)")


def rank_list_of(chk: Check, group: ReplicaGroup, peer: Peer | None) -> tuple[int, ...]:
    """The rank list of this rank; the replica group must fit the launch."""
    rank, world = (peer.rank, peer.num_ranks) if peer is not None else (0, 1)
    beyond = [r for r in group.ranks if r >= world]
    if beyond:
        chk.fail(
            OperandError,
            "replica_group",
            f"{group!r} names rank {beyond[0]}, but the kernel runs on {world} rank{'s' * (world != 1)}; "
            f"run it on more with nkisim.run(kernel, [inputs of each rank], ranks=N)",
        )
    ranks = group.rank_list(rank)
    if ranks is None:
        chk.fail(OperandError, "replica_group", f"{group!r} has no rank list with this rank, {rank}")
    return ranks


def meet_ranks(
    peer: Peer | None, chk: Check, ranks: tuple[int, ...], payload: tuple[Any, ...]
) -> list[tuple[Any, ...]]:
    """Every rank's payload, in the order of ``ranks``; a replica group on one rank meets nobody."""
    if peer is None:
        return [payload]
    return peer.exchange_ranks(ranks, (f"ncc.{chk.instruction}",), payload, chk.loc)


def same_everywhere(
    chk: Check, ranks: tuple[int, ...], mine: int, payloads: list[tuple[Any, ...]], index: int, what: str
) -> None:
    """Field ``index`` of every payload equals this rank's (shapes, dtypes, the replica group, ...)."""
    here = payloads[ranks.index(mine)][index]
    for rank, payload in zip(ranks, payloads):
        if payload[index] != here:
            chk.fail(
                ShapeError, what, f"differ between ranks: rank {mine} has {here}, rank {rank} has {payload[index]}"
            )


def signature(tensors: Sequence[Tensor]) -> list[str]:
    return [_shown(t) for t in tensors]


def copies(tensors: Sequence[Tensor], compute: bool) -> list[np.ndarray] | None:
    return [t.array.copy() for t in tensors] if compute else None


def reduce_ranks(op: Op, arrays: Sequence[np.ndarray], dtype: np.dtype) -> np.ndarray:
    """``op`` over the ranks' values in rank-list order: float32 arithmetic for floats, int64 for integers."""
    work = np.int64 if np.dtype(dtype).kind in "iu" else np.float32
    assert op.binary is not None
    total = arrays[0].astype(work)
    for values in arrays[1:]:
        total = op.binary(total, values.astype(work))
    return cast(np.asarray(total), dtype)


def largest_list(group: ReplicaGroup) -> int:
    return max(len(ranks) for ranks in group.rank_lists)


def nbytes_of(tensors: Sequence[Tensor]) -> int:
    return sum(t.size * t.itemsize for t in tensors)


# -- all_reduce -----------------------------------------------------------------------


class AllReduceOps(Operands):
    srcs: InList
    dsts: OutList
    replica_group: Group
    op: Op
    priority: int | None = None


def _all_reduce_validate(ops: AllReduceOps, chk: Check) -> None:
    _check_lists(chk, ops.srcs, ops.dsts)
    check_memories(chk, named("srcs", ops.srcs), named("dsts", ops.dsts))
    check_dtypes(chk, ops.srcs, ops.dsts)
    for i, (src, dst) in enumerate(zip(ops.srcs, ops.dsts)):
        if src.shape != dst.shape:
            chk.fail(ShapeError, f"dsts[{i}]", f"shape {list(dst.shape)} differs from srcs[{i}] {list(src.shape)}")
    check_op(chk, ops.op)
    check_priority(chk, ops.priority)


def _all_reduce_cost(ops: AllReduceOps, hw: HwConfig, engine: Engine) -> Cost:
    """``2 * ((n - 1) / n * B / link_bytes_per_ns + (n - 1) * hop_latency_ns)`` ns, B = src bytes (ring)."""
    return ring_cost(hw, largest_list(ops.replica_group), nbytes_of(ops.srcs), passes=2)


def _all_reduce_synchronise(
    ops: AllReduceOps, peer: Peer | None, arrival: float, cost: Cost, compute: bool, chk: Check
) -> tuple[float, Cost]:
    ranks = rank_list_of(chk, ops.replica_group, peer)
    mine = peer.rank if peer is not None else 0
    payloads = meet_ranks(peer, chk, ranks, (arrival, signature(ops.srcs), ops.op.name, copies(ops.srcs, compute)))
    same_everywhere(chk, ranks, mine, payloads, 1, "srcs")
    same_everywhere(chk, ranks, mine, payloads, 2, "op")
    if compute:
        for i, dst in enumerate(ops.dsts):
            dst.array[...] = reduce_ranks(ops.op, [p[3][i] for p in payloads], dst.dtype).reshape(dst.shape)
    return max(p[0] for p in payloads), ring_cost(chk.hw, len(ranks), nbytes_of(ops.srcs), passes=2)


@register_collective(
    "all_reduce",
    AllReduceOps,
    _all_reduce_cost,
    validate=_all_reduce_validate,
    synchronise=_all_reduce_synchronise,
    dtypes="any; dsts = srcs dtype and shape",
)
def all_reduce(ops: AllReduceOps, state: EngineState) -> None:
    """Every rank's ``dsts[i]`` = ``op`` over the ``srcs[i]`` of all ranks in its rank list."""


def named(name: str, tensors: Sequence[Tensor]) -> list[tuple[str, Tensor]]:
    return [(f"{name}[{i}]", t) for i, t in enumerate(tensors)]


# -- all_gather -----------------------------------------------------------------------


class AllGatherOps(Operands):
    srcs: InList
    dsts: OutList
    replica_group: Group
    collective_dim: int
    priority: int | None = None


def _check_dim(chk: Check, dim: int, tensors: Sequence[Tensor], sbuf_dims: tuple[int, ...] = (0, 1)) -> None:
    """HBM collectives split or join dim 0; SBUF ones 2-D tiles along dim 0 or 1 [api all_gather]."""
    on_hbm = tensors[0].buffer.is_hbm
    allowed = (0,) if on_hbm else sbuf_dims
    if dim not in allowed:
        where = "HBM" if on_hbm else "SBUF"
        chk.fail(OperandError, "collective_dim", f"{dim} is not supported for {where} tensors (only {list(allowed)})")
    if not on_hbm:
        for t in tensors:
            if t.ndim != 2:
                chk.fail(ShapeError, "srcs", f"SBUF collectives take 2-D tiles, not {_shown(t)}")


def _all_gather_validate(ops: AllGatherOps, chk: Check) -> None:
    _check_lists(chk, ops.srcs, ops.dsts)
    check_memories(chk, named("srcs", ops.srcs), named("dsts", ops.dsts))
    check_dtypes(chk, ops.srcs, ops.dsts)
    _check_dim(chk, ops.collective_dim, [*ops.srcs, *ops.dsts])
    check_priority(chk, ops.priority)


def _check_joined(chk: Check, dim: int, n: int, parts: Sequence[Tensor], wholes: Sequence[Tensor], name: str) -> None:
    """Each whole is ``n`` parts joined along ``dim``."""
    for i, (part, whole) in enumerate(zip(parts, wholes)):
        expected = list(part.shape)
        if dim < len(expected):
            expected[dim] *= n
        if list(whole.shape) != expected:
            chk.fail(
                ShapeError,
                f"{name}[{i}]",
                f"shape {list(whole.shape)} must be {expected}: {list(part.shape)} from each of {n} "
                f"rank{'s' * (n != 1)}, joined along dim {dim}",
            )


def _all_gather_cost(ops: AllGatherOps, hw: HwConfig, engine: Engine) -> Cost:
    """``(n - 1) / n * B / link_bytes_per_ns + (n - 1) * hop_latency_ns`` ns, B = dst bytes (ring)."""
    return ring_cost(hw, largest_list(ops.replica_group), nbytes_of(ops.dsts))


def _all_gather_synchronise(
    ops: AllGatherOps, peer: Peer | None, arrival: float, cost: Cost, compute: bool, chk: Check
) -> tuple[float, Cost]:
    ranks = rank_list_of(chk, ops.replica_group, peer)
    mine = peer.rank if peer is not None else 0
    dim = ops.collective_dim
    _check_joined(chk, dim, len(ranks), ops.srcs, ops.dsts, "dsts")
    payloads = meet_ranks(peer, chk, ranks, (arrival, signature(ops.srcs), dim, copies(ops.srcs, compute)))
    same_everywhere(chk, ranks, mine, payloads, 1, "srcs")
    same_everywhere(chk, ranks, mine, payloads, 2, "collective_dim")
    if compute:
        for i, dst in enumerate(ops.dsts):
            dst.array[...] = np.concatenate([p[3][i] for p in payloads], axis=dim)
    return max(p[0] for p in payloads), ring_cost(chk.hw, len(ranks), nbytes_of(ops.dsts))


@register_collective(
    "all_gather",
    AllGatherOps,
    _all_gather_cost,
    validate=_all_gather_validate,
    synchronise=_all_gather_synchronise,
    dtypes="any; dsts = srcs dtype",
)
def all_gather(ops: AllGatherOps, state: EngineState) -> None:
    """Every rank's ``dsts[i]`` = its list's ``srcs[i]``, joined along ``collective_dim`` in list order."""


# -- reduce_scatter -------------------------------------------------------------------


class ReduceScatterOps(Operands):
    srcs: InList
    dsts: OutList
    replica_group: Group
    collective_dim: int
    op: Op
    priority: int | None = None


def _reduce_scatter_validate(ops: ReduceScatterOps, chk: Check) -> None:
    _check_lists(chk, ops.srcs, ops.dsts)
    check_memories(chk, named("srcs", ops.srcs), named("dsts", ops.dsts))
    check_dtypes(chk, ops.srcs, ops.dsts)
    _check_dim(chk, ops.collective_dim, [*ops.srcs, *ops.dsts], sbuf_dims=(0,))
    check_op(chk, ops.op)
    check_priority(chk, ops.priority)


def _reduce_scatter_cost(ops: ReduceScatterOps, hw: HwConfig, engine: Engine) -> Cost:
    """``(n - 1) / n * B / link_bytes_per_ns + (n - 1) * hop_latency_ns`` ns, B = src bytes (ring)."""
    return ring_cost(hw, largest_list(ops.replica_group), nbytes_of(ops.srcs))


def _reduce_scatter_synchronise(
    ops: ReduceScatterOps, peer: Peer | None, arrival: float, cost: Cost, compute: bool, chk: Check
) -> tuple[float, Cost]:
    ranks = rank_list_of(chk, ops.replica_group, peer)
    mine = peer.rank if peer is not None else 0
    dim = ops.collective_dim
    _check_joined(chk, dim, len(ranks), ops.dsts, ops.srcs, "srcs")
    sent = (arrival, signature(ops.srcs), dim, ops.op.name, copies(ops.srcs, compute))
    payloads = meet_ranks(peer, chk, ranks, sent)
    for index, what in ((1, "srcs"), (2, "collective_dim"), (3, "op")):
        same_everywhere(chk, ranks, mine, payloads, index, what)
    if compute:
        position = ranks.index(mine)
        for i, dst in enumerate(ops.dsts):
            total = reduce_ranks(ops.op, [p[4][i] for p in payloads], dst.dtype)
            dst.array[...] = np.split(total, len(ranks), axis=dim)[position]
    return max(p[0] for p in payloads), ring_cost(chk.hw, len(ranks), nbytes_of(ops.srcs))


@register_collective(
    "reduce_scatter",
    ReduceScatterOps,
    _reduce_scatter_cost,
    validate=_reduce_scatter_validate,
    synchronise=_reduce_scatter_synchronise,
    dtypes="any; dsts = srcs dtype",
)
def reduce_scatter(ops: ReduceScatterOps, state: EngineState) -> None:
    """``op`` over the ranks' ``srcs[i]``, split along ``collective_dim``: a list's k-th rank gets part k."""


# -- all_to_all -----------------------------------------------------------------------


class AllToAllOps(Operands):
    srcs: InList
    dsts: OutList
    replica_group: Group
    collective_dim: int
    priority: int | None = None


def _all_to_all_validate(ops: AllToAllOps, chk: Check) -> None:
    _check_lists(chk, ops.srcs, ops.dsts)
    check_memories(chk, named("srcs", ops.srcs), named("dsts", ops.dsts), sbuf=False)
    check_dtypes(chk, ops.srcs, ops.dsts)
    _check_dim(chk, ops.collective_dim, [*ops.srcs, *ops.dsts])
    for i, (src, dst) in enumerate(zip(ops.srcs, ops.dsts)):
        if src.shape != dst.shape:
            chk.fail(ShapeError, f"dsts[{i}]", f"shape {list(dst.shape)} differs from srcs[{i}] {list(src.shape)}")
    check_priority(chk, ops.priority)


def _all_to_all_cost(ops: AllToAllOps, hw: HwConfig, engine: Engine) -> Cost:
    """``(n - 1) / n * B / link_bytes_per_ns + (n - 1) * hop_latency_ns`` ns, B = src bytes (estimate)."""
    return ring_cost(hw, largest_list(ops.replica_group), nbytes_of(ops.srcs))


def _all_to_all_synchronise(
    ops: AllToAllOps, peer: Peer | None, arrival: float, cost: Cost, compute: bool, chk: Check
) -> tuple[float, Cost]:
    ranks = rank_list_of(chk, ops.replica_group, peer)
    mine = peer.rank if peer is not None else 0
    n, dim = len(ranks), ops.collective_dim
    for i, src in enumerate(ops.srcs):
        if src.shape[dim] % n:
            chk.fail(ShapeError, f"srcs[{i}]", f"dim {dim} ({src.shape[dim]}) does not split into {n} equal parts")
    payloads = meet_ranks(peer, chk, ranks, (arrival, signature(ops.srcs), dim, copies(ops.srcs, compute)))
    same_everywhere(chk, ranks, mine, payloads, 1, "srcs")
    same_everywhere(chk, ranks, mine, payloads, 2, "collective_dim")
    if compute:
        position = ranks.index(mine)
        for i, dst in enumerate(ops.dsts):
            parts = [np.split(p[3][i], n, axis=dim)[position] for p in payloads]
            dst.array[...] = np.concatenate(parts, axis=dim)
    return max(p[0] for p in payloads), ring_cost(chk.hw, n, nbytes_of(ops.srcs))


@register_collective(
    "all_to_all",
    AllToAllOps,
    _all_to_all_cost,
    validate=_all_to_all_validate,
    synchronise=_all_to_all_synchronise,
    dtypes="any; dsts = srcs dtype and shape",
)
def all_to_all(ops: AllToAllOps, state: EngineState) -> None:
    """``srcs[i]`` split in n parts along ``collective_dim``: part j goes to the list's j-th rank, in list order."""
