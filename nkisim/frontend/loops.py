"""``nl.affine_range``: a loop whose iterations may run in any order.

Inside a kernel run with the sanitizer on, each iteration tells the core's
:class:`~nkisim.sim.loops.LoopTracker` which loop and iteration the next
instructions belong to, so it can report loop-carried dependencies and races.
``affine_order`` runs the iterations reversed or shuffled, to expose what depends
on program order (outputs then differ only by floating-point summation order).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

import numpy as np

from nkisim.errors import SourceLoc
from nkisim.frontend.context import current_context, is_running

#: The orders ``affine_range`` iterations may run in (``nkisim.run(..., affine_order=)``).
AFFINE_ORDERS = ("in-order", "reversed", "shuffled")

_ORDER: ContextVar[str] = ContextVar("nkisim_affine_order", default="in-order")


@contextlib.contextmanager
def affine_order(order: str) -> Iterator[None]:
    """Run ``affine_range`` iterations of kernels started inside in ``order`` (one of :data:`AFFINE_ORDERS`)."""
    if order not in AFFINE_ORDERS:
        raise ValueError(f"affine_order must be one of {', '.join(map(repr, AFFINE_ORDERS))}, got {order!r}")
    token = _ORDER.set(order)
    try:
        yield
    finally:
        _ORDER.reset(token)


class AffineRange:
    """The iterations of ``nl.affine_range(start, stop, step)``: a ``range`` that reports its iterations."""

    __slots__ = ("loc", "values")

    def __init__(self, values: range, loc: SourceLoc) -> None:
        self.values = values
        self.loc = loc

    def __len__(self) -> int:
        return len(self.values)

    def __repr__(self) -> str:
        return f"affine_range({self.values.start}, {self.values.stop}, {self.values.step})"

    def __iter__(self) -> Iterator[int]:
        ctx = current_context() if is_running() else None
        checker = ctx.machine.checker if ctx is not None else None
        order = _ORDER.get()
        values = list(self.values)
        if order == "reversed":
            values.reverse()
        elif order == "shuffled":
            seed = (self.loc.line, self.values.start, self.values.stop, self.values.step)
            values = [values[i] for i in np.random.default_rng(seed).permutation(len(values))]
        if checker is None:
            yield from values
            return
        loops = checker.loops
        assert ctx is not None
        ctx.flush_deferred()  # an instruction held back (legacy API) belongs to the code before the loop
        instance = loops.enter()
        try:
            for position, value in enumerate(values):
                ctx.flush_deferred()  # ... or to the iteration that made it
                loops.iterate(instance, position, value, self.loc)
                yield value
            ctx.flush_deferred()  # not when the loop is abandoned (an error, or a break)
        finally:
            loops.leave(instance)
