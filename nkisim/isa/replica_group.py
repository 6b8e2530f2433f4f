"""Replica groups and the link model of ``nki.collectives``.

A :class:`ReplicaGroup` is a list of rank lists: a collective runs independently within
each rank list, on all of them at once, and each rank is in at most one list. A rank is
one logical NeuronCore of a replica-group launch (``nkisim.run(kernel, inputs, ranks=N)``).

Time on the links (``hw.collectives``, docs/collectives.md): ranks pass chunks round a
ring, one link per step. With ``n`` ranks in the list, ``B`` the bytes of the whole
gathered (or reduced) buffer, ``bw`` one link's bandwidth and ``h`` one step's fixed time:

* all-gather, reduce-scatter, all-to-all: ``(n - 1) / n * B / bw`` busy, ``(n - 1) * h`` latency;
* all-reduce (a reduce-scatter, then an all-gather): twice both;
* a permute (one step to the next rank, per channel at once): ``B / bw`` and ``h``;
* a list of one rank: a local DMA copy, ``B / dma bandwidth`` and the DMA's fixed latency.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import Enum
from typing import Any

from nkisim.errors import OperandError, user_location
from nkisim.hw import HwConfig
from nkisim.isa.spec import Cost


class rg_partition_op(Enum):
    """How :meth:`ReplicaGroup.from_partition_op` maps a rank to its rank list's id."""

    bitwise_and = "bitwise_and"
    div = "div"
    mod = "mod"

    def apply(self, rank: int, operand: int) -> int:
        """``rank & operand``, ``rank // operand`` or ``rank % operand``."""
        if self is rg_partition_op.bitwise_and:
            return rank & operand
        if self is rg_partition_op.div:
            return rank // operand
        return rank % operand


class ReplicaGroup:
    """The ranks a collective runs on, as a list of rank lists (``ReplicaGroup([[0, 1], [2, 3]])``).

    The collective runs independently within each rank list, on all lists at once. Each
    rank may be in one list only. Within a list, the order is the ring order: a rank's
    successor is the next rank of its list (``collective_permute_implicit``), and
    ``all_gather`` concatenates in list order.

    Raises:
        OperandError: a list is empty, a rank is not a non-negative integer, or a rank is
            in two lists (or twice in one).
    """

    __slots__ = ("rank_lists",)

    def __init__(self, rank_lists: Iterable[Iterable[int]]) -> None:
        loc = user_location(2)
        try:
            lists = tuple(tuple(ranks) for ranks in rank_lists)
        except TypeError:
            raise OperandError(
                f"ReplicaGroup: expected a list of rank lists (ReplicaGroup([[0, 1], [2, 3]])), got {rank_lists!r}",
                loc=loc,
            ) from None
        seen: dict[int, tuple[int, ...]] = {}
        for ranks in lists:
            if not ranks:
                raise OperandError(f"ReplicaGroup: rank list {list(ranks)} of {_show(lists)} is empty", loc=loc)
            for rank in ranks:
                if isinstance(rank, bool) or not hasattr(rank, "__index__"):
                    raise OperandError(f"ReplicaGroup: rank {rank!r} in {_show(lists)} is not an integer", loc=loc)
                if int(rank) < 0:
                    raise OperandError(f"ReplicaGroup: rank {int(rank)} in {_show(lists)} is negative", loc=loc)
                if int(rank) in seen:
                    raise OperandError(
                        f"ReplicaGroup: rank {int(rank)} is in two rank lists ({list(seen[int(rank)])} and "
                        f"{list(ranks)}) of {_show(lists)}; each rank may take part in one rank list only",
                        loc=loc,
                    )
                seen[int(rank)] = ranks
        self.rank_lists: tuple[tuple[int, ...], ...] = tuple(tuple(int(r) for r in ranks) for ranks in lists)

    @staticmethod
    def from_partition_op(world_size: int, op: rg_partition_op, operand: int) -> ReplicaGroup:
        """Partition ranks ``[0, world_size)``: the ranks with one ``op(rank, operand)`` form one rank list.

        Lists are ordered by that id, ranks within a list ascending:
        ``from_partition_op(8, rg_partition_op.mod, 4)`` is ``[[0, 4], [1, 5], [2, 6], [3, 7]]``.
        """
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise OperandError(f"ReplicaGroup.from_partition_op: world_size {world_size!r} must be a positive integer")
        if not isinstance(op, rg_partition_op):
            raise OperandError(f"ReplicaGroup.from_partition_op: op {op!r} must be an rg_partition_op")
        if isinstance(operand, bool) or not isinstance(operand, int) or operand < 0:
            raise OperandError(f"ReplicaGroup.from_partition_op: operand {operand!r} must be a non-negative integer")
        if operand == 0 and op is not rg_partition_op.bitwise_and:
            raise OperandError(f"ReplicaGroup.from_partition_op: rg_partition_op.{op.name} by 0")
        lists: dict[int, list[int]] = {}
        for rank in range(world_size):
            lists.setdefault(op.apply(rank, operand), []).append(rank)
        return ReplicaGroup([lists[key] for key in sorted(lists)])

    def rank_list(self, rank: int) -> tuple[int, ...] | None:
        """The rank list ``rank`` is in, or None."""
        return next((ranks for ranks in self.rank_lists if rank in ranks), None)

    @property
    def ranks(self) -> tuple[int, ...]:
        """Every rank of every list."""
        return tuple(rank for ranks in self.rank_lists for rank in ranks)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReplicaGroup) and other.rank_lists == self.rank_lists

    def __hash__(self) -> int:
        return hash(self.rank_lists)

    def __repr__(self) -> str:
        return f"ReplicaGroup({_show(self.rank_lists)})"


def _show(lists: Sequence[Sequence[int]]) -> str:
    return str([list(ranks) for ranks in lists])


def as_replica_group(value: Any) -> Any:
    """Accept a plain list of rank lists where a :class:`ReplicaGroup` is expected."""
    if isinstance(value, (list, tuple)):
        return ReplicaGroup(value)
    return value


# -- time on the links ---------------------------------------------------------------


def ring_cost(hw: HwConfig, ranks: int, nbytes: int, passes: int = 1, moved: int | None = None) -> Cost:
    """``passes * (n - 1) / n * B / link_bytes_per_ns`` busy and ``passes * (n - 1) * hop_latency_ns`` latency.

    ``moved`` is the bytes one rank sends and receives, for the profile (by default ``B``).
    A ring of one rank is a local DMA copy of ``B`` bytes.
    """
    if ranks <= 1:
        return local_copy_cost(hw, nbytes)
    links = hw.collectives
    return Cost(
        busy_ns=passes * (ranks - 1) / ranks * nbytes / links.link_bytes_per_ns,
        latency_ns=passes * (ranks - 1) * links.hop_latency_ns,
        bytes=nbytes if moved is None else moved,
        dma_engines=collective_dma_engines(hw),
    )


def hop_cost(hw: HwConfig, ranks: int, nbytes: int) -> Cost:
    """``B / link_bytes_per_ns`` busy and ``hop_latency_ns`` latency: one step to the next rank."""
    if ranks <= 1:
        return local_copy_cost(hw, nbytes)
    links = hw.collectives
    return Cost(
        busy_ns=nbytes / links.link_bytes_per_ns,
        latency_ns=links.hop_latency_ns,
        bytes=nbytes,
        dma_engines=collective_dma_engines(hw),
    )


def local_copy_cost(hw: HwConfig, nbytes: int) -> Cost:
    """A collective within one rank: ``B / dma bandwidth`` busy after the DMA's fixed latency."""
    return Cost(
        busy_ns=nbytes / hw.dma.bytes_per_ns,
        latency_ns=hw.dma.fixed_latency_ns,
        bytes=nbytes,
        dma_engines=collective_dma_engines(hw),
    )


def collective_dma_engines(hw: HwConfig) -> tuple[int, int]:
    """A collective drives one DMA ring: it books the core's last DMA engine for its busy time."""
    return (hw.dma.engines - 1, 1)
