"""``nl.affine_range``: a loop whose iterations may run in any order; loops that run on the device.

Inside a kernel run with the sanitizer on, each iteration tells the core's
:class:`~nkisim.sim.loops.LoopTracker` which loop and iteration the next
instructions belong to, so it can report loop-carried dependencies and races.
``affine_order`` runs the iterations reversed or shuffled, to expose what depends
on program order (outputs then differ only by floating-point summation order).

A dynamic loop (``nl.dynamic_range``, ``nl.fori_loop``, ``nl.while_loop``) is one loop on
the device, its body one block of instructions run again per iteration; each iteration
sets the kernel's :attr:`~nkisim.frontend.context.KernelContext.dynamic_scope`, which
``depends_on`` checks (an edge cannot leave a dynamic loop's body).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Any

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
        values: Iterable[int] = self.values  # a range: a loop of any length takes no memory in order
        if order == "reversed":
            values = self.values[::-1]
        elif order == "shuffled":
            values = _shuffled(self.values, (self.loc.line, self.values.start, self.values.stop, self.values.step))
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


#: Iterations a shuffled loop permutes in full (8 bytes each); a longer loop takes a permutation computed per step.
MAX_PERMUTED = 1 << 22


def _shuffled(values: range, seed: tuple[int, ...]) -> Iterable[int]:
    """``values`` in an order drawn from ``seed``: a uniform permutation, or for a loop longer than
    :data:`MAX_PERMUTED` the affine one ``i -> (a * i + c) mod n`` with ``a`` prime to ``n`` (in bounded memory)."""
    rng = np.random.default_rng(seed)
    n = len(values)
    if n <= MAX_PERMUTED:
        return [values[i] for i in rng.permutation(n)]
    while math.gcd(a := int(rng.integers(1, n)), n) != 1:
        pass
    c = int(rng.integers(0, n))
    return (values[(a * i + c) % n] for i in range(n))


class DynamicRange:
    """The iterations of ``nl.dynamic_range``: a ``range`` whose iterations are iterations of a device loop."""

    __slots__ = ("values",)

    def __init__(self, values: range) -> None:
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    def __repr__(self) -> str:
        return f"dynamic_range({self.values.start}, {self.values.stop}, {self.values.step})"

    def __iter__(self) -> Iterator[int]:
        if not is_running():
            yield from self.values
            return
        ctx = current_context()
        loop, outer = ctx.dynamic_loops, ctx.dynamic_scope
        ctx.dynamic_loops += 1
        try:
            for iteration, value in enumerate(self.values):
                ctx.dynamic_scope = (*outer, (loop, iteration))
                yield value
        finally:
            ctx.dynamic_scope = outer


def dynamic_iterations(condition: Callable[[], bool], body: Callable[[], Any]) -> None:
    """``while condition(): body()`` as a loop on the device (``nl.while_loop``)."""
    ctx = current_context()
    loop, outer = ctx.dynamic_loops, ctx.dynamic_scope
    ctx.dynamic_loops += 1
    iteration = 0
    try:
        while condition():
            ctx.dynamic_scope = (*outer, (loop, iteration))
            body()
            ctx.dynamic_scope = outer
            iteration += 1
    finally:
        ctx.dynamic_scope = outer
