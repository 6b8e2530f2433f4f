"""Errors raised for illegal kernels, and the kernel source locations they point at.

Every error about a kernel is a :class:`KernelError`. Its message starts with the
``file:line:`` of the kernel statement that caused it, then names the instruction,
the engine and target, the operand and the rule that was broken::

    kernel.py:17: nisa.tensor_tensor [Vector, trn1]: data1 partition dim 256 exceeds 128
"""

from __future__ import annotations

import os
import sys
import weakref
from dataclasses import dataclass
from types import CodeType

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_EXAMPLES_DIR = _PACKAGE_DIR + "examples" + os.sep


@dataclass(frozen=True, slots=True)
class SourceLoc:
    """A position in the kernel's own source code."""

    file: str
    line: int
    function: str = ""

    def __str__(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"


UNKNOWN_LOC = SourceLoc("<unknown>", 0)


#: Locations already made, by code object (held weakly: kernels made by ``exec`` may go) and bytecode offset of
#: the call; a kernel's statements are met again and again. Keyed by the offset, not the line: a frame works
#: its ``f_lineno`` out by scanning its code's line table from the start (about 10 us at line 2,000 of a
#: function), its ``f_lasti`` is a field. A memo of immutable values: nothing a caller can observe.
_known_locations: dict[tuple[int, int], tuple[weakref.ref[CodeType], SourceLoc]] = {}
#: Past this many entries the memo starts again.
_MAX_KNOWN_LOCATIONS = 1 << 16


def _is_kernel_code(code: CodeType) -> bool:
    filename = code.co_filename
    return not filename.startswith(_PACKAGE_DIR) or filename.startswith(_EXAMPLES_DIR)


def user_location(skip: int = 1) -> SourceLoc:
    """The innermost stack frame of kernel code: outside nkisim, or in its shipped example kernels."""
    frame = sys._getframe(skip)
    while frame is not None:
        code = frame.f_code
        key = (id(code), frame.f_lasti)
        known = _known_locations.get(key)
        if known is not None and known[0]() is code:
            return known[1]
        if _is_kernel_code(code):
            if len(_known_locations) >= _MAX_KNOWN_LOCATIONS:
                _known_locations.clear()
            loc = SourceLoc(code.co_filename, frame.f_lineno, code.co_name)
            _known_locations[key] = (weakref.ref(code), loc)
            return loc
        frame = frame.f_back  # type: ignore[assignment]
    return UNKNOWN_LOC


class KernelError(Exception):
    """Base of every error about a kernel: illegal operands, memory, capacity, bounds.

    Attributes:
        loc: where in the kernel the error was raised.
        instruction: the NKI name of the call, e.g. ``nisa.tensor_tensor``.
        engine: the engine the instruction runs on, if known.
        target: the hardware generation name, if known.
        operand: the argument name the rule is about, if any.
        rule: the human-readable rule that was broken.
    """

    def __init__(
        self,
        rule: str,
        *,
        loc: SourceLoc | None = None,
        instruction: str = "",
        engine: str = "",
        target: str = "",
        operand: str = "",
    ) -> None:
        self.loc = loc if loc is not None else user_location(2)
        self.instruction = instruction
        self.engine = engine
        self.target = target
        self.operand = operand
        self.rule = rule
        super().__init__(self._format())

    def _format(self) -> str:
        parts = [f"{self.loc}:"]
        if self.instruction:
            where = ", ".join(x for x in (self.engine, self.target) if x)
            parts.append(f"{self.instruction} [{where}]:" if where else f"{self.instruction}:")
        text = f"{self.operand} {self.rule}" if self.operand else self.rule
        parts.append(text)
        return " ".join(parts)


class OperandError(KernelError):
    """An operand has the wrong type, a bad value, or a misspelled or missing argument."""


class ShapeError(KernelError):
    """Shapes or element counts of operands do not fit the instruction's rules."""


class DtypeError(KernelError):
    """An operand's data type is not allowed for this instruction."""


class MemoryKindError(KernelError):
    """An operand lives in a memory (HBM, SBUF, PSUM) the instruction cannot access."""


class BoundsError(KernelError, IndexError):
    """An index or slice reaches outside the tensor it is applied to."""


class CapacityError(KernelError, MemoryError):
    """A memory (SBUF, PSUM, or the target's HBM) has no room for a new allocation."""


class TargetError(KernelError):
    """The kernel uses something the chosen hardware generation does not have."""


class UnsupportedError(KernelError, NotImplementedError):
    """The kernel calls an NKI function that nkisim does not model (the message says which and why)."""


class DependencyError(KernelError):
    """A scheduling edge (``NkiInstruction.depends_on``) breaks NKI's rules or cannot be honoured."""


class ExecutionError(KernelError):
    """An instruction failed while computing its result (a bug report is welcome)."""


class SignatureError(KernelError, TypeError):
    """A compiled program (``nkisim.compile``) is called with inputs whose shapes, dtypes or other
    arguments differ from the signature it was compiled for; the message names expected and got."""


class BudgetError(KernelError):
    """The kernel ran past its instruction budget (``max_instructions=``) or its wall-time budget (``timeout=``).

    Attributes:
        instructions: instructions issued when the run was stopped.
        elapsed: seconds the run had taken by then.
    """

    def __init__(self, rule: str, *, instructions: int, elapsed: float, loc: SourceLoc | None = None) -> None:
        self.instructions = instructions
        self.elapsed = elapsed
        super().__init__(rule, loc=loc)


# -- sanitizer findings --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding of the sanitizer (``check="strict"`` or ``"warn"``), as the profile keeps it.

    Attributes:
        severity: ``"error"`` (undefined on hardware: stops a strict run) or ``"warning"``.
        check: the check's name, as docs/checks.md lists it (``uninitialized-read``, ``saturation``, ...).
        loc: the kernel line of the instruction.
        instruction: the NKI name of the instruction (``nisa.tensor_copy``), if any.
        message: the full one-line message, starting with ``file:line:``.
        count: how many times this check fired at this line in the run.
    """

    severity: str
    check: str
    loc: SourceLoc
    instruction: str
    message: str
    count: int = 1

    def __str__(self) -> str:
        times = f" ({self.count} times)" if self.count > 1 else ""
        return f"{self.severity}: {self.message}{times} [{self.check}]"


class CheckError(KernelError):
    """The sanitizer found something the hardware leaves undefined (``check="strict"``).

    Attributes:
        check: the name of the check that fired (see docs/checks.md).
    """

    def __init__(self, rule: str, *, check: str, **where: object) -> None:
        self.check = check
        super().__init__(rule, **where)  # type: ignore[arg-type]


class CheckWarning(UserWarning):
    """A sanitizer warning: legal, but probably not what the kernel means (see docs/checks.md).

    Silence one check with ``warnings.filterwarnings("ignore", message=r".*\\[saturation\\]")``,
    or all of them with ``warnings.simplefilter("ignore", nkisim.CheckWarning)`` or ``check="off"``.
    """
