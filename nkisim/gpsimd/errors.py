"""Errors of GPSIMD custom operators: every one is a :class:`nkisim.errors.KernelError`.

Messages start with the ``file:line`` of the kernel (or shape function, or registration)
statement that broke a rule, then name the operator, the GPSIMD core where one is involved,
and the rule::

    relu.py:21: gpsimd my_ops.relu [core 7]: tcm_to_tensor writes elements 1000..1003 past the end (1000)
"""

from __future__ import annotations

from nkisim.errors import BoundsError, CapacityError, KernelError, SourceLoc, user_location


class GpsimdError(KernelError):
    """Base of the GPSIMD custom-operator errors."""

    def __init__(self, rule: str, *, loc: SourceLoc | None = None, op: str = "", core: int | None = None) -> None:
        where = f"gpsimd {op}" if op else "gpsimd"
        super().__init__(
            rule,
            loc=loc if loc is not None else user_location(3),
            instruction=where,
            engine=f"core {core}" if core is not None else "",
        )
        self.op = op
        self.core = core


class GpsimdLibraryError(GpsimdError):
    """A library or operator definition breaks a registration rule (name, count, flags)."""


class GpsimdLoadError(GpsimdLibraryError):
    """The library cannot be loaded (for instance a ``-DSTACK_SIZE`` above the maximum)."""


class GpsimdArgumentError(GpsimdError):
    """An argument or the returned value has a type, dtype or size an operator may not have."""


class GpsimdShapeFunctionError(GpsimdError):
    """The shape function read tensor data or returned something other than one shape tensor."""


class GpsimdBroadcastError(GpsimdError):
    """An ATen operation was given tensors of different shapes (the device library does not broadcast)."""


class GpsimdUndefinedBehavior(GpsimdError):  # noqa: N818 (the name the C++ docs' concept has)
    """The kernel did something the C++ API leaves undefined (standard accessor in multicore, foreign tcm_free)."""


class GpsimdStreamError(GpsimdError, BoundsError):
    """A stream accessor was read or written past its end, or used after ``close()``."""


class GpsimdBoundsError(GpsimdError, BoundsError):
    """An element offset or count reaches outside a tensor or a TCM buffer."""


class GpsimdCoherenceError(GpsimdError):
    """Accessors were mixed on one tensor in a way that is not coherent (policy COHERENT)."""


class GpsimdRaceError(GpsimdError):
    """In multicore mode, two cores wrote the same output elements, or no core wrote some."""


class GpsimdStackOverflow(GpsimdError, CapacityError):  # noqa: N818 (as GPSIMD reports it)
    """The kernel's stack grew past the fast local memory (or past its declared ``-DSTACK_SIZE``)."""
