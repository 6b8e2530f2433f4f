"""``nki.collectives`` permutes: ``collective_permute`` and the ring permutes ``collective_permute_implicit*``.

* ``collective_permute(srcs, dsts, source_target_pairs)``: for each ``(source, target)``
  pair, the target's ``dsts[0]`` receives the source's ``srcs[0]``. Every rank of the
  launch takes part; a rank that is no target keeps its ``dsts`` unchanged.
* ``collective_permute_implicit(srcs_by_channel, dsts_by_channel, replica_group, channel_ids)``:
  a ring step: on each channel, every rank sends its source to its successor in its rank
  list and receives its predecessor's into its destination. Channels run at once.
* ``collective_permute_implicit_reduce``: the same, sending ``op(srcs0, srcs1)``.

One step costs ``B / link_bytes_per_ns + hop_latency_ns`` (channels in parallel: the
largest channel's bytes), see :mod:`nkisim.isa.replica_group`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from nkisim.errors import OperandError, ShapeError
from nkisim.hw import Engine, HwConfig
from nkisim.isa.ops import Op
from nkisim.isa.rank_collectives import (
    Group,
    check_dtypes,
    check_memories,
    check_op,
    check_priority,
    copies,
    largest_list,
    meet_ranks,
    named,
    nbytes_of,
    rank_list_of,
    reduce_ranks,
    register_collective,
    same_everywhere,
    signature,
)
from nkisim.isa.replica_group import hop_cost
from nkisim.isa.spec import Check, Cost, EngineState, InList, InLists, Operands, OutList, OutLists, Peer

# -- collective_permute ---------------------------------------------------------------


class CollectivePermuteOps(Operands):
    srcs: InList
    dsts: OutList
    source_target_pairs: list[tuple[int, int]]
    priority: int | None = None


def _permute_validate(ops: CollectivePermuteOps, chk: Check) -> None:
    for name, tensors in (("srcs", ops.srcs), ("dsts", ops.dsts)):
        if len(tensors) != 1:
            chk.fail(OperandError, name, f"holds {len(tensors)} tensors; collective_permute takes exactly one")
    check_memories(chk, named("srcs", ops.srcs), named("dsts", ops.dsts), sbuf=False)
    check_dtypes(chk, ops.srcs, ops.dsts)
    if ops.srcs[0].shape != ops.dsts[0].shape:
        chk.fail(
            ShapeError, "dsts[0]", f"shape {list(ops.dsts[0].shape)} differs from srcs[0] {list(ops.srcs[0].shape)}"
        )
    targets: dict[int, int] = {}
    for source, target in ops.source_target_pairs:
        if source < 0 or target < 0:
            chk.fail(OperandError, "source_target_pairs", f"({source}, {target}) names a negative rank")
        if target in targets:
            chk.fail(
                OperandError,
                "source_target_pairs",
                f"rank {target} is the target of both {targets[target]} and {source}; a rank receives from one source",
            )
        targets[target] = source
    check_priority(chk, ops.priority)


def _permute_cost(ops: CollectivePermuteOps, hw: HwConfig, engine: Engine) -> Cost:
    """``B / link_bytes_per_ns + hop_latency_ns`` ns, B = src bytes: one hop to the target (estimate)."""
    return hop_cost(hw, 2, nbytes_of(ops.srcs))


def _permute_synchronise(
    ops: CollectivePermuteOps, peer: Peer | None, arrival: float, cost: Cost, compute: bool, chk: Check
) -> tuple[float, Cost]:
    rank, world = (peer.rank, peer.num_ranks) if peer is not None else (0, 1)
    pairs = [(int(s), int(t)) for s, t in ops.source_target_pairs]
    beyond = [r for pair in pairs for r in pair if r >= world]
    if beyond:
        chk.fail(
            OperandError,
            "source_target_pairs",
            f"names rank {beyond[0]}, but the kernel runs on {world} rank{'s' * (world != 1)}",
        )
    ranks = tuple(range(world))
    payloads = meet_ranks(peer, chk, ranks, (arrival, signature(ops.srcs), sorted(pairs), copies(ops.srcs, compute)))
    same_everywhere(chk, ranks, rank, payloads, 2, "source_target_pairs")
    source = next((s for s, t in pairs if t == rank), None)
    if source is not None:
        sent = payloads[source]
        if sent[1] != signature(ops.dsts):
            chk.fail(ShapeError, "dsts[0]", f"is {signature(ops.dsts)[0]} but rank {source} sends {sent[1][0]}")
        if compute:
            ops.dsts[0].array[...] = sent[3][0]
    return max(p[0] for p in payloads), hop_cost(chk.hw, 2, nbytes_of(ops.srcs))


@register_collective(
    "collective_permute",
    CollectivePermuteOps,
    _permute_cost,
    validate=_permute_validate,
    synchronise=_permute_synchronise,
    dtypes="any; dsts = srcs dtype and shape",
)
def collective_permute(ops: CollectivePermuteOps, state: EngineState) -> None:
    """For each ``(source, target)`` pair, the target's ``dsts[0]`` receives the source's ``srcs[0]``."""


# -- the ring permutes ----------------------------------------------------------------


def _check_channels(
    chk: Check,
    lists: Sequence[tuple[str, list[list[Any]]]],
    channel_ids: list[int],
) -> None:
    """One tensor per channel in each list, as many channels as ``channel_ids``, distinct ids below the maximum."""
    channels = len(lists[0][1])
    if channels == 0:
        chk.fail(OperandError, lists[0][0], "is empty; give one list of one tensor per channel")
    for name, per_channel in lists:
        if len(per_channel) != channels:
            chk.fail(OperandError, name, f"has {len(per_channel)} channels but {lists[0][0]} has {channels}")
        for c, tensors in enumerate(per_channel):
            if len(tensors) != 1:
                chk.fail(
                    OperandError,
                    f"{name}[{c}]",
                    f"holds {len(tensors)} tensors; each channel takes exactly one (no coalescing)",
                )
    if len(channel_ids) != channels:
        chk.fail(OperandError, "channel_ids", f"{channel_ids} names {len(channel_ids)} channels, the lists {channels}")
    limit = chk.hw.collectives.max_channels
    if len(set(channel_ids)) != len(channel_ids) or any(not 0 <= c < limit for c in channel_ids):
        chk.fail(OperandError, "channel_ids", f"{channel_ids} must be distinct channels 0 to {limit - 1}")


def _firsts(per_channel: list[list[Any]]) -> list[Any]:
    return [tensors[0] for tensors in per_channel]


def _ring_validate(chk: Check, srcs: list[Any], dsts: list[Any], src_name: str) -> None:
    """Sources and destinations all on HBM or all on SBUF; each channel's destination like its source."""
    check_memories(chk, _per_channel(src_name, srcs), _per_channel("dsts_by_channel", dsts), coalesced=False)
    check_dtypes(chk, srcs, dsts, "dsts_by_channel")
    for c, (src, dst) in enumerate(zip(srcs, dsts)):
        if src.shape != dst.shape:
            chk.fail(
                ShapeError,
                f"dsts_by_channel[{c}][0]",
                f"shape {list(dst.shape)} differs from {src_name}[{c}][0] {list(src.shape)}",
            )


def _per_channel(name: str, tensors: list[Any]) -> list[tuple[str, Any]]:
    return [(f"{name}[{c}][0]", t) for c, t in enumerate(tensors)]


def _ring_step(
    chk: Check, peer: Peer | None, group: Any, arrival: float, sent: list[Any] | None, dsts: list[Any], extra: Any
) -> tuple[float, Cost]:
    """Send ``sent`` (one array per channel) to this rank's successor; write the predecessor's into ``dsts``."""
    ranks = rank_list_of(chk, group, peer)
    mine = peer.rank if peer is not None else 0
    payloads = meet_ranks(peer, chk, ranks, (arrival, signature(dsts), extra, sent))
    same_everywhere(chk, ranks, mine, payloads, 1, "dsts_by_channel")
    same_everywhere(chk, ranks, mine, payloads, 2, "channel_ids and op")
    predecessor = payloads[(ranks.index(mine) - 1) % len(ranks)]
    if sent is not None:
        for dst, values in zip(dsts, predecessor[3]):
            dst.array[...] = values.reshape(dst.shape)
    largest = max(d.size * d.itemsize for d in dsts)
    return max(p[0] for p in payloads), hop_cost(chk.hw, len(ranks), largest)


class PermuteImplicitOps(Operands):
    srcs_by_channel: InLists
    dsts_by_channel: OutLists
    replica_group: Group
    channel_ids: list[int] = Field(default_factory=lambda: [0])
    priority: int | None = None


def _implicit_validate(ops: PermuteImplicitOps, chk: Check) -> None:
    _check_channels(
        chk, [("srcs_by_channel", ops.srcs_by_channel), ("dsts_by_channel", ops.dsts_by_channel)], ops.channel_ids
    )
    _ring_validate(chk, _firsts(ops.srcs_by_channel), _firsts(ops.dsts_by_channel), "srcs_by_channel")
    check_priority(chk, ops.priority)


def _implicit_cost(ops: PermuteImplicitOps, hw: HwConfig, engine: Engine) -> Cost:
    """``B / link_bytes_per_ns + hop_latency_ns`` ns, B = the largest channel's bytes (channels at once)."""
    largest = max(t.size * t.itemsize for t in _firsts(ops.srcs_by_channel))
    return hop_cost(hw, largest_list(ops.replica_group), largest)


def _implicit_synchronise(
    ops: PermuteImplicitOps, peer: Peer | None, arrival: float, cost: Cost, compute: bool, chk: Check
) -> tuple[float, Cost]:
    sent = copies(_firsts(ops.srcs_by_channel), compute)
    return _ring_step(chk, peer, ops.replica_group, arrival, sent, _firsts(ops.dsts_by_channel), list(ops.channel_ids))


@register_collective(
    "collective_permute_implicit",
    PermuteImplicitOps,
    _implicit_cost,
    validate=_implicit_validate,
    synchronise=_implicit_synchronise,
    dtypes="any; dsts = srcs dtype and shape, per channel",
)
def collective_permute_implicit(ops: PermuteImplicitOps, state: EngineState) -> None:
    """On each channel, every rank sends its source to its successor in its rank list and receives its predecessor's."""


class PermuteImplicitReduceOps(Operands):
    srcs0_by_channel: InLists
    srcs1_by_channel: InLists
    dsts_by_channel: OutLists
    replica_group: Group
    op: Op
    channel_ids: list[int] = Field(default_factory=lambda: [0])
    priority: int | None = None


def _implicit_reduce_validate(ops: PermuteImplicitReduceOps, chk: Check) -> None:
    lists = [
        ("srcs0_by_channel", ops.srcs0_by_channel),
        ("srcs1_by_channel", ops.srcs1_by_channel),
        ("dsts_by_channel", ops.dsts_by_channel),
    ]
    _check_channels(chk, lists, ops.channel_ids)
    dsts = _firsts(ops.dsts_by_channel)
    _ring_validate(chk, _firsts(ops.srcs0_by_channel), dsts, "srcs0_by_channel")
    _ring_validate(chk, _firsts(ops.srcs1_by_channel), dsts, "srcs1_by_channel")
    check_op(chk, ops.op)
    check_priority(chk, ops.priority)


def _implicit_reduce_cost(ops: PermuteImplicitReduceOps, hw: HwConfig, engine: Engine) -> Cost:
    """``B / link_bytes_per_ns + hop_latency_ns`` ns, B = the largest channel's bytes (the reduction is in line)."""
    largest = max(t.size * t.itemsize for t in _firsts(ops.dsts_by_channel))
    return hop_cost(hw, largest_list(ops.replica_group), largest)


def _implicit_reduce_synchronise(
    ops: PermuteImplicitReduceOps, peer: Peer | None, arrival: float, cost: Cost, compute: bool, chk: Check
) -> tuple[float, Cost]:
    dsts = _firsts(ops.dsts_by_channel)
    sent = None
    if compute:
        pairs = zip(_firsts(ops.srcs0_by_channel), _firsts(ops.srcs1_by_channel), dsts)
        sent = [reduce_ranks(ops.op, [a.array, b.array], d.dtype) for a, b, d in pairs]
    extra = (list(ops.channel_ids), ops.op.name)
    return _ring_step(chk, peer, ops.replica_group, arrival, sent, dsts, extra)


@register_collective(
    "collective_permute_implicit_reduce",
    PermuteImplicitReduceOps,
    _implicit_reduce_cost,
    validate=_implicit_reduce_validate,
    synchronise=_implicit_reduce_synchronise,
    dtypes="any; dsts = srcs dtype and shape, per channel",
)
def collective_permute_implicit_reduce(ops: PermuteImplicitReduceOps, state: EngineState) -> None:
    """On each channel, every rank sends ``op(srcs0, srcs1)`` to its successor and receives its predecessor's."""
