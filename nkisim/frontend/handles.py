"""``nki.isa.NkiInstruction``: the handle a ``nisa.*`` call returns, and its ``depends_on`` edges.

``c.depends_on(a, b)`` makes instruction ``c`` start only after ``a`` and ``b`` have ended,
as a semaphore wait the compiler inserts would. nkisim places an instruction on the
timeline when the next one is issued (``nkisim.sim.machine``), so an edge given to the
latest instruction (``c = nisa.x(...)`` then ``c.depends_on(...)``, or chained on the
call) always takes effect. An edge given to an instruction already placed cannot move
it: it is accepted when it already holds (the consumer starts no earlier than the edge
demands) and raises :class:`~nkisim.errors.DependencyError` otherwise.

NKI's rule on dynamic loops is enforced: the producer sits at the same dynamic-loop
nesting as the consumer (the same iteration of the same ``nl.fori_loop``,
``nl.while_loop`` or ``nl.dynamic_range`` body) or in an enclosing scope; an edge cannot
leave a dynamic loop's body. Python loops and ``nl.affine_range``/``sequential_range``
are unrolled and do not count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nkisim.errors import DependencyError, OperandError, SourceLoc, user_location
from nkisim.frontend.context import current_context, is_running

if TYPE_CHECKING:
    from nkisim.frontend.context import KernelContext


class NkiInstruction:
    """Opaque handle to a traced NKI instruction, as every ``nisa.*`` call returns it.

    Use :meth:`depends_on` to add scheduling dependencies: this instruction runs after
    every listed producer completes.
    """

    __slots__ = ("_ctx", "_index", "_loc", "_opcode", "_scope")

    def __init__(self, ctx: KernelContext, index: int, opcode: str, loc: SourceLoc) -> None:
        self._ctx = ctx.weak
        self._index = index
        self._opcode = opcode
        self._loc = loc
        self._scope = ctx.dynamic_scope

    def __repr__(self) -> str:
        return f"<NkiInstruction {self._opcode} #{self._index} at {self._loc}>"

    def depends_on(self, *producers: NkiInstruction) -> NkiInstruction:
        """Add scheduling dependencies: this instruction (the consumer) runs after each producer.

        Returns self, so ``c.depends_on(b, a)`` and ``c.depends_on(b).depends_on(a)`` are the same.
        A producer on another engine or DMA queue is waited for through a semaphore
        (``hw.sync.semaphore_latency_ns``), as a data dependency is.

        Raises:
            OperandError: a producer is not an ``NkiInstruction``.
            DependencyError: a producer comes from another kernel run (or the other program of
                an LNC=2 launch), is this instruction itself, sits inside a dynamic loop the
                consumer is not in, or the consumer was already placed on the timeline before
                the producer ends.
        """
        loc = user_location()
        where = f"{self._opcode}(...).depends_on"
        ctx = self._ctx()
        if ctx is None or not is_running() or current_context() is not ctx:
            raise DependencyError(
                f"is called on {self!r}, which belongs to a kernel run that has ended or to another "
                "program; an instruction handle is valid only while the run that issued it runs",
                loc=loc,
                instruction=where,
            )
        for i, producer in enumerate(producers):
            self._check(ctx, producer, f"producers[{i}]", where, loc)
        for i, producer in enumerate(producers):
            needed = ctx.machine.depend(self._index, producer._index)
            if needed is not None:
                raise self._too_late(ctx, producer, needed, f"producers[{i}]", where, loc)
        return self

    def _check(self, ctx: KernelContext, producer: object, operand: str, where: str, loc: SourceLoc) -> None:
        if not isinstance(producer, NkiInstruction):
            raise OperandError(
                f"must be an NkiInstruction (what a nisa.* call returns), got {type(producer).__name__}",
                loc=loc,
                instruction=where,
                operand=operand,
            )
        if producer._ctx() is not ctx:
            raise DependencyError(
                f"{producer!r} comes from another kernel run (or the other program of a kernel[2] launch); "
                "an edge joins two instructions of one program",
                loc=loc,
                instruction=where,
                operand=operand,
            )
        if producer._index == self._index:
            raise DependencyError(
                "is the consumer itself: an instruction cannot wait for itself",
                loc=loc,
                instruction=where,
                operand=operand,
            )
        if producer._scope != self._scope[: len(producer._scope)]:
            raise DependencyError(
                f"{producer!r} is inside a dynamic loop (nl.fori_loop, nl.while_loop, nl.dynamic_range) "
                f"that {self!r} is not in, or in another iteration of it; an edge must join instructions at "
                "the same dynamic-loop nesting, or come from an enclosing scope: its semaphore wait is fixed at "
                "compile time and runs on every pass, so an edge out of a loop body could never fire or fire "
                "too often",
                loc=loc,
                instruction=where,
                operand=operand,
            )

    def _too_late(
        self, ctx: KernelContext, producer: NkiInstruction, needed: float, operand: str, where: str, loc: SourceLoc
    ) -> DependencyError:
        timeline = ctx.machine.timeline
        start, end = timeline.start_ns[self._index], timeline.end_ns[producer._index]
        return DependencyError(
            f"{producer!r} ends at {end:.1f} ns, so {self!r} would start at {needed:.1f} ns, but it was already "
            f"placed at {start:.1f} ns: nkisim places an instruction when the next one is issued, so an edge "
            "moves only the latest instruction; call depends_on on the consumer right after its nisa call "
            "(or chain it: nisa.x(...).depends_on(p)), before issuing another instruction",
            loc=loc,
            instruction=where,
            operand=operand,
        )
