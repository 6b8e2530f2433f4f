"""``nki.collectives`` for nkisim: collectives between the ranks of a replica group.

Kernels use it as NKI's: ``import nkisim.nki.collectives as ncc`` (or ``import nki.collectives``
under :func:`nkisim.install_nki_alias`)::

    ncc.all_gather(srcs=[src], dsts=[dst], replica_group=ReplicaGroup([[0, 1]]), collective_dim=0)

Run a kernel on several ranks with ``nkisim.run(kernel, [inputs of rank 0, inputs of rank 1], ranks=2)``;
a kernel run the usual way is rank 0 of a world of one. Each collective is an instruction on
a DMA queue of every rank that takes part, timed by the ring model of the target's
``[collectives]`` table (docs/collectives.md).

``all_gather_v``, ``all_to_all_v`` and their ``_prepare``/``_trigger`` halves are not modelled:
calling one raises :class:`~nkisim.errors.UnsupportedError`.
"""

from __future__ import annotations

from typing import Any

from nkisim.errors import OperandError, UnsupportedError, user_location
from nkisim.frontend.context import current_context
from nkisim.frontend.handles import NkiInstruction
from nkisim.frontend.stubs import make_stub
from nkisim.isa.rank_collectives import COLLECTIVES
from nkisim.isa.registers import VirtualRegister
from nkisim.isa.replica_group import ReplicaGroup, as_replica_group, rg_partition_op

_STUBS = {name: make_stub(spec, __name__) for name, spec in COLLECTIVES.items()}
all_reduce = _STUBS["all_reduce"]
all_gather = _STUBS["all_gather"]
reduce_scatter = _STUBS["reduce_scatter"]
all_to_all = _STUBS["all_to_all"]
collective_permute = _STUBS["collective_permute"]
collective_permute_implicit = _STUBS["collective_permute_implicit"]
collective_permute_implicit_reduce = _STUBS["collective_permute_implicit_reduce"]


def rank_id(name: str | None = None) -> VirtualRegister:
    """The rank of the program calling it, in a register (``.ap(scalar_offset=ncc.rank_id())``).

    Rank 0 when the kernel runs on one rank (a plain ``nkisim.run``).
    """
    return VirtualRegister(current_context().rank, name=name or "")


def collective_permute_implicit_current_processing_rank_id(
    iteration_id: int,
    replica_group: ReplicaGroup,
    channel_id: int = 0,
    num_channels: int = 1,
    name: str | None = None,
) -> VirtualRegister:
    """The rank whose data this rank holds after ``iteration_id`` steps of ``collective_permute_implicit``.

    Iteration 0 is this rank's own data; each step brings the predecessor's, so after ``i``
    steps a rank holds the data of the rank ``i`` places before it in its rank list (the
    rank's id, not its place in the list). Every channel runs the ring in the same
    direction, so ``channel_id`` and ``num_channels`` do not change the answer.
    """
    loc = user_location()
    ctx = current_context()
    group = as_replica_group(replica_group)
    if not isinstance(group, ReplicaGroup):
        raise OperandError(
            f"must be a ReplicaGroup, got {type(replica_group).__name__}",
            loc=loc,
            instruction="ncc.collective_permute_implicit_current_processing_rank_id",
            operand="replica_group",
        )
    for arg, value in (("iteration_id", iteration_id), ("channel_id", channel_id), ("num_channels", num_channels)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise OperandError(
                f"{value!r} must be a non-negative integer",
                loc=loc,
                instruction="ncc.collective_permute_implicit_current_processing_rank_id",
                operand=arg,
            )
    ranks = group.rank_list(ctx.rank)
    if ranks is None:
        raise OperandError(
            f"{group!r} has no rank list with this rank, {ctx.rank}",
            loc=loc,
            instruction="ncc.collective_permute_implicit_current_processing_rank_id",
            operand="replica_group",
        )
    here = ranks.index(ctx.rank)
    return VirtualRegister(ranks[(here - iteration_id) % len(ranks)], name=name or "")


def _unsupported(name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> NkiInstruction:
        raise UnsupportedError(
            "is not supported by nkisim: variable-length collectives (counts and displacements read from "
            "a metadata tensor at run time) are not modelled",
            loc=user_location(),
            instruction=f"ncc.{name}",
        )

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``nki.collectives.{name}``: not modelled by nkisim (raises :class:`UnsupportedError`)."
    return call


all_gather_v = _unsupported("all_gather_v")
all_gather_v_prepare = _unsupported("all_gather_v_prepare")
all_gather_v_trigger = _unsupported("all_gather_v_trigger")
all_to_all_v = _unsupported("all_to_all_v")
all_to_all_v_prepare = _unsupported("all_to_all_v_prepare")
all_to_all_v_trigger = _unsupported("all_to_all_v_trigger")

__all__ = [
    "ReplicaGroup",
    "all_gather",
    "all_gather_v",
    "all_gather_v_prepare",
    "all_gather_v_trigger",
    "all_reduce",
    "all_to_all",
    "all_to_all_v",
    "all_to_all_v_prepare",
    "all_to_all_v_trigger",
    "collective_permute",
    "collective_permute_implicit",
    "collective_permute_implicit_current_processing_rank_id",
    "collective_permute_implicit_reduce",
    "rank_id",
    "reduce_scatter",
    "rg_partition_op",
]
