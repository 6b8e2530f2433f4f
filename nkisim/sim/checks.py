"""The sanitizer: findings about what the hardware leaves undefined or what is probably a mistake.

A :class:`Checker` belongs to one core of one run. The machine calls it around each
instruction; it keeps a shadow map of the on-chip bytes that have been written, to
report reads of never-written memory, and it collects every finding as a
:class:`~nkisim.errors.Diagnostic`. Under ``check="strict"`` an error-severity
finding stops the run with a :class:`~nkisim.errors.CheckError`; warnings are issued
as :class:`~nkisim.errors.CheckWarning` once per check and kernel line in a run.
The checks, their rules and example messages are listed in docs/checks.md.
"""

from __future__ import annotations

import warnings

import numpy as np

from nkisim.errors import CheckError, CheckWarning, Diagnostic, SourceLoc
from nkisim.isa.spec import Access, Operands
from nkisim.memory import Storage, Tensor, dtype_name
from nkisim.memory.dtypes import ConversionLog

#: The values of ``check=``.
CHECK_MODES = ("strict", "warn", "off")


class Findings:
    """What one run found, shared by its cores and by the attempts of the liveness retry.

    Attributes:
        mode: ``"strict"`` or ``"warn"``.
        warned: (check, file, line) of the warnings already issued in this run.
    """

    def __init__(self, mode: str) -> None:
        if mode not in CHECK_MODES:
            raise ValueError(f"check must be one of {', '.join(map(repr, CHECK_MODES))}, got {mode!r}")
        self.mode = mode
        self.warned: set[tuple[str, str, int]] = set()


class Checker:
    """The sanitizer of one core in one attempt of a run (see the module docstring)."""

    def __init__(self, findings: Findings, target: str) -> None:
        self.findings = findings
        self.target = target
        self._by_site: dict[tuple[str, str, int], Diagnostic] = {}
        self._shadows: dict[int, np.ndarray] = {}
        self.conversions = ConversionLog()

    @property
    def diagnostics(self) -> list[Diagnostic]:
        """Every finding so far, one per check and kernel line, in the order first found."""
        return list(self._by_site.values())

    # -- reporting ----------------------------------------------------------------------

    def report(self, severity: str, check: str, loc: SourceLoc, instruction: str, rule: str) -> None:
        """Record a finding; raise it under strict when it is an error; warn once per line otherwise."""
        where = f"{instruction} [{self.target}]: " if instruction else ""
        message = f"{loc}: {where}{rule}"
        site = (check, loc.file, loc.line)
        known = self._by_site.get(site)
        count = 1 if known is None else known.count + 1
        self._by_site[site] = Diagnostic(severity, check, loc, instruction, message, count)
        if severity == "error" and self.findings.mode == "strict":
            raise CheckError(rule, check=check, loc=loc, instruction=instruction, target=self.target)
        if site not in self.findings.warned:
            self.findings.warned.add(site)
            warnings.warn_explicit(f"{message} [{check}]", CheckWarning, loc.file, loc.line)

    # -- uninitialised reads (the shadow map of written on-chip bytes) --------------------------

    def _shadow(self, storage: Storage) -> np.ndarray:
        shadow = self._shadows.get(storage.uid)
        if shadow is None or shadow.shape != storage.bytes.shape:
            shadow = self._shadows[storage.uid] = np.zeros(storage.bytes.shape, dtype=np.uint8)
        return shadow

    def allocated(self, tensor: Tensor, placed: bool) -> None:
        """A new on-chip tile: its bytes are unwritten (unless placed on purpose over another's)."""
        if not placed:
            self._view(tensor, every_byte=True)[...] = 0

    def _view(self, t: Tensor, every_byte: bool) -> np.ndarray:
        """The shadow bytes of a static view: every byte of each element, or the first byte of each."""
        shadow = self._shadow(t.storage)
        array = t.array
        shape, strides = array.shape, array.strides
        if every_byte:
            shape, strides = (*shape, t.itemsize), (*strides, 1)
        return np.ndarray(shape, np.uint8, buffer=shadow, offset=t.byte_offset, strides=strides)

    def wrote(self, writes: list[tuple[str, Tensor]]) -> None:
        """Mark what an instruction wrote on chip (a dynamic view: its whole allocation)."""
        for _, t in writes:
            if not _tracked(t):
                continue
            if t.is_dynamic:
                r = t.region
                self._shadow(r.storage)[r.r0 : r.r1, r.b0 : r.b1] = 1
            else:
                self._view(t, every_byte=True)[...] = 1

    def read(self, opcode: str, loc: SourceLoc, reads: list[tuple[str, Tensor]], ops: Operands) -> None:
        """Report the first read of never-written on-chip memory by this instruction's input operands.

        Operands that are both read and written (``InOut``) are left out: whether the old
        value is read depends on the instruction's arguments.
        """
        inputs = {name for name, access in ops.tensor_fields if access is Access.read}
        for name, t in reads:
            if name not in inputs or not _tracked(t) or t.is_dynamic or t.size == 0:
                continue
            written = self._view(t, every_byte=False)
            if written.all():
                continue
            missing = np.argwhere(written == 0)
            first = tuple(int(i) for i in missing[0])
            self.report(
                "error",
                "uninitialized-read",
                loc,
                f"nisa.{opcode}",
                f"{name} reads {len(missing)} of the {t.size} elements of {t.buffer.value.upper()} tile "
                f"{t.name!r} {dtype_name(t.dtype)}{list(t.shape)} that were never written, the first at "
                f"index {list(first)}; write them first (nl.zeros, nisa.memset, a load)",
            )

    # -- lossy conversions -------------------------------------------------------------

    def converted(self, opcode: str, loc: SourceLoc) -> None:
        """Report float-to-integer writes of this instruction that saturated or met NaN."""
        log = self.conversions
        if not (log.saturated or log.nan):
            return
        info = np.iinfo(log.dtype) if log.dtype is not None else None
        parts = []
        if log.saturated and info is not None:
            parts.append(
                f"{log.saturated} values saturated to {dtype_name(log.dtype)}'s range [{info.min}, {info.max}]"
            )
        if log.nan:
            parts.append(f"{log.nan} NaN values became 0")
        log.clear()
        self.report(
            "warning", "saturation", loc, f"nisa.{opcode}", "; ".join(parts) + " on the write to an integer dst"
        )


def _tracked(t: Tensor) -> bool:
    return t.buffer.is_on_chip and t.storage.kind in ("sbuf", "psum")
