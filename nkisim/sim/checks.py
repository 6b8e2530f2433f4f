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

import contextlib
import dataclasses
import warnings
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import numba
import numpy as np

from nkisim.errors import CheckError, CheckWarning, Diagnostic, SourceLoc
from nkisim.hw import Engine, HwConfig
from nkisim.isa.carriers import Carrier
from nkisim.isa.spec import Access, InstructionSpec, Operands
from nkisim.memory import ON_CHIP_BUFFERS, Buffer, Storage, Tensor, dtype_name
from nkisim.memory.dtypes import ConversionLog
from nkisim.memory.space import lazy_zeros
from nkisim.sim.loops import LoopTracker
from nkisim.sim.plans import Plan, bind

#: The values of ``check=``.
CHECK_MODES = ("strict", "warn", "off")

#: Every check the sanitizer runs, by name (docs/checks.md): the name a finding carries.
CHECKS = (
    "uninitialized-read",
    "loop-carried-dependency",
    "race",
    "partition-start",
    "access-pattern",
    "psum-accumulate",
    "psum-bank",
    "activation-range",
    "saturation",
    "spill",
)

#: Shadow marks per on-chip byte: never written; written by an engine; written by the Tensor Engine;
#: holding never-written values a carrier moved there (nkisim.isa.carriers; the origin map says which).
_NEVER, _WRITTEN, _TENSOR, _CARRIED = 0, 1, 2, 3

#: All-written views :meth:`Checker._taint` remembers at most (then it starts afresh).
MAX_WRITTEN_VIEWS = 65536
#: Deferred shadow fills a storage holds at most (then they are made).
MAX_DEFERRED_FILLS = 4096

_IGNORED: ContextVar[frozenset[str]] = ContextVar("nkisim_ignored_checks", default=frozenset())


@contextlib.contextmanager
def ignore_checks(*names: str) -> Iterator[None]:
    """Turn the named checks off for the runs started inside the block (in this thread or task only).

    >>> with nkisim.ignore_checks("uninitialized-read"):
    ...     nkisim.run(kernel, inputs, check="strict")
    """
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise ValueError(f"ignore_checks: unknown check {unknown[0]!r}; the checks are {', '.join(CHECKS)}")
    token = _IGNORED.set(_IGNORED.get() | frozenset(names))
    try:
        yield
    finally:
        _IGNORED.reset(token)


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
        #: The checks turned off by :func:`ignore_checks` when the run started.
        self.ignored = _IGNORED.get()


class Checker:
    """The sanitizer of one core in one attempt of a run (see the module docstring)."""

    def __init__(self, findings: Findings, hw: HwConfig, values_known: bool = True) -> None:
        self.findings = findings
        self.hw = hw
        self.target = hw.name
        self._by_site: dict[tuple[str, str, int], Diagnostic] = {}
        self._shadows: dict[int, np.ndarray] = {}
        #: Per byte marked _CARRIED: the number of its entry in ``_origins`` (1-based).
        self._origin_maps: dict[int, np.ndarray] = {}
        #: The geometry numbers (``Tensor.geometry``) of views that passed the operand rules.
        self._legal_geometries: set[int] = set()
        #: The tensor fields each operand model only reads, by model class.
        self._inputs: dict[type, frozenset[str]] = {}
        #: Tiles (allocation uids) every byte of which has been written (see :meth:`_taint`).
        self._written_tiles: set[int] = set()
        #: Views found all written, by tile uid: their row box (``Tensor.row_box``), or else their byte offset,
        #: shape and strides, with their item size (see :meth:`_taint`); and how many are kept.
        self._written_views: dict[int, set[tuple[object, ...]]] = {}
        self._written_view_count = 0
        #: Whole tiles every byte of whose shadow holds one mark, by uid (see :meth:`after`); kept only while no
        #: tile has been placed at an address (placed tiles may share bytes with others).
        self._uniform_marks: dict[int, int] = {}
        self._aliasing = False
        #: Per storage, the fills of whole-tile boxes not yet made in its shadow, in the order they happened
        #: (see :meth:`_defer`); :meth:`_shadow` makes them before anything reads or writes the shadow.
        self._deferred: dict[Storage, dict[tuple[int, int, int, int], int]] = {}
        #: Where carried never-written values were first read: (loc, instruction, rule).
        self._origins: list[tuple[SourceLoc, str, str]] = []
        #: What the instruction running now carries: (dst, per-element taint), and how many dst
        #: values it computes from never-written elements (their NaN or saturation is not reported).
        self._carrying: tuple[Tensor, np.ndarray] | None = None
        self._carried_values = 0
        self.conversions = ConversionLog()
        #: The ``affine_range`` loops running now (the front end enters and leaves them).
        self.loops = LoopTracker(values_known)
        #: While a program is recorded (nkisim.sim.program): told of every finding that does not
        #: depend on values (all but those :meth:`converted` makes), before ``ignore_checks`` applies.
        self.on_report: Callable[[str, str, SourceLoc, str, str], None] | None = None

    @property
    def diagnostics(self) -> list[Diagnostic]:
        """Every finding so far, one per check and kernel line, in the order first found."""
        return list(self._by_site.values())

    # -- reporting ----------------------------------------------------------------------

    def report(self, severity: str, check: str, loc: SourceLoc, instruction: str, rule: str) -> None:
        """Record a finding; raise it under strict when it is an error; warn once per line otherwise."""
        if self.on_report is not None:
            self.on_report(severity, check, loc, instruction, rule)
        if check in self.findings.ignored:
            return
        where = f"{instruction} [{self.target}]: " if instruction else ""
        message = f"{loc}: {where}{rule}"
        site = (check, loc.file, loc.line)
        known = self._by_site.get(site)
        # the first occurrence's message stands (the earliest iterations), with the count of all
        if known is None:
            self._by_site[site] = Diagnostic(severity, check, loc, instruction, message)
        else:
            self._by_site[site] = dataclasses.replace(known, count=known.count + 1)
        if severity == "error" and self.findings.mode == "strict":
            raise CheckError(rule, check=check, loc=loc, instruction=instruction, target=self.target)
        if site not in self.findings.warned:
            self.findings.warned.add(site)
            warnings.warn_explicit(f"{message} [{check}]", CheckWarning, loc.file, loc.line)

    # -- uninitialised reads (the shadow map of written on-chip bytes) --------------------------

    def _shadow(self, storage: Storage) -> np.ndarray:
        """The shadow of a storage's bytes, with every deferred fill made."""
        shadow = self._shadows.get(storage.uid)
        if shadow is None or shadow.shape != storage.bytes.shape:
            # pages made as they are touched, never huge pages: numpy asks the OS for those for a large array, and
            # a kernel asked to compact memory for one can stall the first write to a shadow for most of a second
            shadow = self._shadows[storage.uid] = lazy_zeros(storage.bytes.shape, np.uint8)
        fills = self._deferred.pop(storage, None)
        if fills:
            for (r0, r1, b0, b1), mark in fills.items():
                shadow[r0:r1, b0:b1] = mark
        return shadow

    def _defer(self, t: Tensor, box: tuple[int, int, int, int], mark: int) -> None:
        """Give a whole tile's box ``mark`` later: its mark is known (``_uniform_marks``) without the fill.

        A new tile's zeroing and its whole writes are the sanitizer's largest memory traffic, and most tiles
        are read only whole (or by views a whole write made known written), so the shadow is rarely needed.
        The fills are kept in the order they happened and made in that order; a fill of a box already held
        moves to the end (it is the latest over all of that box). Only while no tile is placed at an address:
        automatic tiles alive at one time never share bytes, so a live tile's box is never filled out of order.
        """
        fills = self._deferred.get(t.storage)
        if fills is None:
            fills = self._deferred[t.storage] = {}
        fills.pop(box, None)
        fills[box] = mark
        if len(fills) > MAX_DEFERRED_FILLS:
            self._shadow(t.storage)
        uniform = self._uniform_marks
        if len(uniform) >= MAX_WRITTEN_VIEWS:
            uniform.clear()
        uniform[t.uid] = mark

    def allocated(self, tensor: Tensor, placed: bool) -> None:
        """A new on-chip tile: its bytes are unwritten (unless placed on purpose over another's)."""
        if placed:  # placed tiles may share bytes: from now on every fill is made at once (after those deferred)
            self._aliasing = True
            self._uniform_marks.clear()
            return
        box = tensor._row_box or tensor.row_box  # the property's memo first: a new tile's view has set it
        if self._aliasing or box is None:
            self._bytes_of(tensor)[...] = 0
        else:
            self._defer(tensor, box, _NEVER)

    def spilled(self, tensor: Tensor, free: int, loc: SourceLoc | None) -> None:
        """A new tile did not fit and was spilled to the next-tier memory: a performance warning at its line."""
        if loc is None:
            return
        memory = tensor.storage.kind
        config, tier = (self.hw.psum, "SBUF") if memory == "psum" else (self.hw.sbuf, "device memory")
        nbytes = tensor.storage.row_bytes
        self.report(
            "warning",
            "spill",
            loc,
            "",
            f"{memory.upper()} tile {tensor.name!r} {dtype_name(tensor.dtype)}[{', '.join(map(str, tensor.shape))}] "
            f"needs {nbytes} bytes per partition but {free} of {config.bytes_per_partition} are free, even with tiles "
            f"freed after their last use; it is spilled to {tier}: every read of it waits for a spill_reload DMA and "
            "every write is followed by a spill_save DMA (the DMA spill queue)",
        )

    def _bytes_of(self, t: Tensor) -> np.ndarray:
        """The shadow of every byte of a static view: a slice of rows and bytes when the view covers one."""
        box = t.row_box
        if box is None:
            return self._view(t, every_byte=True)
        r0, r1, b0, b1 = box
        return self._shadow(t.storage)[r0:r1, b0:b1]

    def _view(self, t: Tensor, every_byte: bool) -> np.ndarray:
        """The shadow bytes of a static view: every byte of each element, or the first byte of each."""
        return _per_byte(self._shadow(t.storage), t, every_byte)

    def _origin_view(self, t: Tensor, every_byte: bool) -> np.ndarray:
        """The origin numbers of a static view's bytes (see ``_origin_maps``)."""
        origins = self._origin_maps.get(t.storage.uid)
        if origins is None or origins.shape != t.storage.bytes.shape:
            origins = self._origin_maps[t.storage.uid] = lazy_zeros(t.storage.bytes.shape, np.int32)  # as _shadow's
        return _per_byte(origins, t, every_byte)

    def _taint(self, t: Tensor) -> np.ndarray | None:
        """Per element of a static view: 0 written, -1 never written, k carried from origin k; None if all written.

        Once a whole tile, or a view of it, was found written, it is not looked at again: bytes of a live tile
        only become unwritten by a carried write (:meth:`after` then forgets what it knew of every tile, as
        tiles placed at an address may share the bytes).
        """
        uid = t.uid
        if uid in self._written_tiles:
            return None
        box = t.row_box
        view_key = (box if box is not None else (t.byte_offset, t.array.shape, t.array.strides), t.itemsize)
        views = self._written_views.get(uid)
        if views is not None and view_key in views:
            return None
        written = False
        if box is not None:  # every byte of the box at once; the first bytes of the elements decide otherwise
            r0, r1, b0, b1 = box
            written = _box_written(self._shadow(t.storage)[r0:r1, b0:b1])
        if not written:
            marks = self._view(t, every_byte=False)
            written = marks.size == 0 or _all_written(marks.reshape(marks.shape[0], -1))
        if written:
            if t._base is None:
                self._written_tiles.add(uid)
            else:
                if self._written_view_count >= MAX_WRITTEN_VIEWS:  # a cache: forgetting costs a scan
                    self._written_views.clear()
                    self._written_view_count, views = 0, None
                if views is None:
                    self._written_views[uid] = {view_key}
                else:
                    views.add(view_key)
                self._written_view_count += 1
            return None
        marks = self._view(t, every_byte=False)
        taint = np.zeros(marks.shape, dtype=np.int32)
        carried = marks == _CARRIED
        if carried.any():
            taint[carried] = self._origin_view(t, every_byte=False)[carried]
        taint[marks == _NEVER] = -1
        return taint

    def before(
        self,
        spec: InstructionSpec,
        engine: Engine,
        loc: SourceLoc,
        ops: Operands | None,
        reads: list[tuple[str, Tensor]],
        writes: list[tuple[str, Tensor]],
        adds: bool | None,
        plan: Plan | None = None,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        """The checks of one instruction before it runs: its reads, its operands, its loops.

        ``adds`` is the spec's ``accumulates`` verdict (True, None: inferred, False). ``ops`` is None when the
        run has not made the operand model (a shapes-only run of a planned call): it is made from ``plan`` and
        the call's ``arguments`` when a check needs it.
        """
        opcode = spec.qualname
        accumulates = adds is not False
        self._carrying, self._carried_values = None, 0
        written = self._written_tiles
        for _, t in reads:
            # else every read is of tiles written whole (the usual case: see _taint), or of HBM, which is not tracked
            if t.uid not in written and t.buffer in ON_CHIP_BUFFERS:
                self._uninitialised(opcode, loc, reads, ops, spec, plan, arguments)
                break
        if engine is not _DMA_ENGINE:
            legal = self._legal_geometries
            for name, t in (*reads, *writes):
                geometry = t._geometry  # the property's memo, read directly
                if geometry is None:
                    geometry = t.geometry
                if geometry is not None and geometry in legal:  # passed before (see _operand_rules)
                    continue
                if _tracked(t) and not t.is_dynamic:
                    self._operand_rules(opcode, loc, name, t, geometry)
        if adds is True:
            self._accumulate_rule(opcode, loc, writes)
        if engine is _TENSOR_ENGINE:
            self._bank_rule(opcode, loc, writes)
        if self.loops.frames:  # inside an affine_range loop (LoopTracker.active, without the call)
            self.loops.access(opcode, loc, reads, writes, accumulates, self._loop_finding(loc, opcode))

    def after(self, spec: InstructionSpec, engine: Engine, writes: list[tuple[str, Tensor]]) -> None:
        """Mark what an instruction wrote on chip (a dynamic view: its whole allocation).

        PSUM bytes a Tensor Engine instruction wrote are marked 2, others 1 (see :meth:`_accumulate_rule`).
        """
        mark = _TENSOR if engine is _TENSOR_ENGINE else _WRITTEN
        uniform = self._uniform_marks
        for _, t in writes:
            if t.buffer not in ON_CHIP_BUFFERS or t.storage.kind not in ("sbuf", "psum"):  # not _tracked(t)
                continue
            if t.is_dynamic:
                r = t.region
                self._shadow(r.storage)[r.r0 : r.r1, r.b0 : r.b1] = mark
                uniform.pop(t.uid, None)
            elif t._base is None and (box := t._row_box or t.row_box) is not None:  # a whole tile (the memo first)
                # a tile written whole again with the mark it holds (the usual case in a loop) needs no fill
                if uniform.get(t.uid) != mark:
                    if self._aliasing:
                        self._bytes_of(t)[...] = mark
                    else:
                        self._defer(t, box, mark)
                self._written_tiles.add(t.uid)  # every byte of the tile is written now (see _taint)
            else:
                self._bytes_of(t)[...] = mark
                uniform.pop(t.uid, None)  # a view's uid is its tile's
        if self._carrying is not None:
            dst, taint = self._carrying
            self._carrying = None
            carried = taint > 0
            self._written_tiles.discard(dst.uid)
            self._uniform_marks.pop(dst.uid, None)
            if carried.any():  # these bytes are unwritten again, for every tile over them (placed ones alias)
                self._written_tiles.clear()
                self._written_views.clear()
                self._written_view_count = 0
            self._view(dst, every_byte=True)[carried] = _CARRIED
            self._origin_view(dst, every_byte=True)[carried] = taint[carried][:, None]

    def _loop_finding(self, loc: SourceLoc, opcode: str) -> Callable[[str, str, str], None]:
        return lambda severity, check, rule: self.report(severity, check, loc, opcode, rule)

    def _uninitialised(
        self,
        opcode: str,
        loc: SourceLoc,
        reads: list[tuple[str, Tensor]],
        ops: Operands | None,
        spec: InstructionSpec,
        plan: Plan | None,
        arguments: dict[str, Any] | None,
    ) -> None:
        """Report the reads of never-written on-chip memory by this instruction's input operands.

        Operands that are both read and written (``InOut``) are left out: whether the old
        value is read depends on the instruction's arguments. A carrier (``spec.carries``, nkisim.isa.carriers)
        moves never-written elements to its dst instead; they are reported, at the line
        that first read them, when an instruction uses them.
        """
        model = spec.operands
        inputs = self._inputs.get(model)
        if inputs is None:
            inputs = self._inputs[model] = frozenset(f for f, a in model.tensor_fields if a is Access.read)
        moves: Carrier | bool | None = False  # looked up when a read is found not all written
        carried: dict[str, np.ndarray] = {}
        written = self._written_tiles
        for operand, t in reads:
            if t.uid in written:  # the usual case (see _taint)
                continue
            if operand.partition("[")[0] not in inputs or not _tracked(t) or t.is_dynamic or t.size == 0:
                continue
            taint = self._taint(t)
            if taint is None:
                continue
            if moves is False:
                if spec.carries is not None and ops is None:
                    assert plan is not None and arguments is not None
                    ops = bind(plan, spec, arguments)
                moves = spec.carries(ops, self.hw) if spec.carries is not None else None
            if moves is None or operand not in moves.srcs:  # type: ignore[union-attr]
                self._used(opcode, loc, operand, t, taint)
                continue
            never = taint == -1
            if never.any():
                self._origins.append((loc, opcode, _never_written(operand, t, never)))
                taint[never] = len(self._origins)
            carried[operand] = taint
        if not carried or not isinstance(moves, Carrier):
            return
        assert ops is not None  # made above, to find the carrier
        if not (_tracked(ops.dst) and not ops.dst.is_dynamic):
            return  # nothing to carry the values to: a dynamic dst, or one off chip
        for operand, t in reads:
            if operand in moves.srcs and operand not in carried:
                carried[operand] = np.zeros(t.shape, dtype=np.int32)
        if "dst" in moves.srcs:  # the part the instruction leaves unchanged
            before = self._taint(ops.dst)
            carried["dst"] = np.zeros(ops.dst.shape, np.int32) if before is None else np.maximum(before, 0)
        dst = moves.taint(carried, ops)
        if dst is not None:
            self._carrying = (ops.dst, dst)
            self._carried_values = int(np.count_nonzero(dst))

    def _used(self, opcode: str, loc: SourceLoc, operand: str, t: Tensor, taint: np.ndarray) -> None:
        """An instruction uses never-written elements: report them here, or where a carrier first read them."""
        never = taint == -1
        if never.any():
            self.report("error", "uninitialized-read", loc, opcode, _never_written(operand, t, never) + _FIX)
            return
        origin_loc, origin_opcode, what = self._origins[int(taint[taint > 0].flat[0]) - 1]
        used = f", and {opcode} at {loc} uses them ({operand})"
        self.report("error", "uninitialized-read", origin_loc, origin_opcode, what + used + _FIX)

    def _operand_rules(self, opcode: str, loc: SourceLoc, name: str, t: Tensor, geometry: int | None) -> None:
        """The partition-start rule and the access-pattern field limits of an engine's on-chip operand.

        Both depend only on the view's geometry (``t.geometry``): one that passes is remembered, and
        :meth:`before` does not call this again for it.
        """
        region = t.region
        caps = self.hw.capabilities
        start, count = region.r0, region.r1 - region.r0
        if caps.partition_start_quadrants and not _legal_start(start, count):
            self.report(
                "error",
                "partition-start",
                loc,
                opcode,
                f"{name} accesses partitions {start}..{start + count - 1} of {t.name!r}: on this target an access "
                f"of {count} partitions must start at {_legal_starts(count)}",
            )
        dims = _free_pattern(t, caps.access_pattern_max_size, caps.access_pattern_max_stride)
        problem = None
        if len(dims) > caps.access_pattern_free_dims:
            problem = (
                f"has {len(dims)} free dims, more than the {caps.access_pattern_free_dims} an access pattern holds"
            )
        elif any(size > caps.access_pattern_max_size for size, _ in dims):
            problem = f"has a free dim of more than {caps.access_pattern_max_size} elements"
        elif any(abs(stride) > caps.access_pattern_max_stride for _, stride in dims):
            problem = f"has a free-dim stride beyond +-{caps.access_pattern_max_stride} elements"
        if problem is not None:
            pattern = ", ".join(f"[{stride}, {size}]" for size, stride in dims)
            self.report(
                "error",
                "access-pattern",
                loc,
                opcode,
                f"{name} ({t.name!r}, pattern [stride, size] {pattern}) {problem}; split the instruction",
            )
        elif geometry is not None and (not caps.partition_start_quadrants or _legal_start(start, count)):
            self._legal_geometries.add(geometry)

    def _accumulate_rule(self, opcode: str, loc: SourceLoc, writes: list[tuple[str, Tensor]]) -> None:
        """``accumulate=True`` onto PSUM nothing wrote (an uninitialised read), or onto values a
        non-matmul instruction wrote (undefined before v4)."""
        onto_any = self.hw.capabilities.psum_accumulate_onto_any_write
        for name, t in writes:
            if t.buffer is not _PSUM_BUFFER or t.is_dynamic or t.size == 0:
                continue
            marks = self._view(t, every_byte=False)
            unwritten = int(np.count_nonzero((marks == _NEVER) | (marks == _CARRIED)))
            if unwritten:
                self.report(
                    "error",
                    "uninitialized-read",
                    loc,
                    opcode,
                    f"{name} accumulates onto {unwritten} of the {t.size} elements of PSUM tile {t.name!r} that "
                    "were never written; start the accumulation with accumulate=False (or leave it to NKI's default)",
                )
            if not onto_any and np.any(marks == _WRITTEN):
                self.report(
                    "warning",
                    "psum-accumulate",
                    loc,
                    opcode,
                    f"{name} accumulates onto PSUM tile {t.name!r}, which another engine wrote; on this target "
                    "a matmul accumulation group must start with a matmul (write zeros with accumulate=False first)",
                )
                return

    def _bank_rule(self, opcode: str, loc: SourceLoc, writes: list[tuple[str, Tensor]]) -> None:
        """A Tensor Engine result accumulates within PSUM banks: it may not straddle a bank boundary."""
        bank = self.hw.psum.bank_bytes
        group = bank * self.hw.capabilities.matmul_dst_psum_banks
        for name, t in writes:
            if t.buffer is not _PSUM_BUFFER or t.size == 0:
                continue
            r = t.region
            if r.b0 // group != (r.b1 - 1) // group:
                self.report(
                    "error",
                    "psum-bank",
                    loc,
                    opcode,
                    f"{name} (PSUM tile {t.name!r}, bytes {r.b0}..{r.b1 - 1} of each partition) crosses a "
                    f"{group}-byte PSUM bank boundary at byte {(r.b0 // group + 1) * group}; place it inside one bank",
                )

    # -- lossy conversions -------------------------------------------------------------

    def converted(self, opcode: str, loc: SourceLoc) -> None:
        """Report float-to-integer writes that saturated or met NaN, and function inputs outside their valid range."""
        log = self.conversions
        # values computed from never-written elements are reported where they are used, not here
        excused = min(log.nan, self._carried_values)
        log.nan -= excused
        log.saturated -= min(log.saturated, self._carried_values - excused)
        self._carried_values = 0
        if not (log.saturated or log.nan or log.outside):
            return
        hook, self.on_report = self.on_report, None  # these findings depend on values: a replay makes its own
        try:
            self._report_conversions(opcode, loc, log)
        finally:
            self.on_report = hook

    def _report_conversions(self, opcode: str, loc: SourceLoc, log: ConversionLog) -> None:
        info = np.iinfo(log.dtype) if log.dtype is not None else None
        parts = []
        if log.saturated and info is not None:
            parts.append(
                f"{log.saturated} values saturated to {dtype_name(log.dtype)}'s range [{info.min}, {info.max}]"
            )
        if log.nan:
            parts.append(f"{log.nan} NaN values became 0")
        outside = list(log.outside)
        log.clear()
        if parts:
            self.report(
                "warning", "saturation", loc, f"nisa.{opcode}", "; ".join(parts) + " on the write to an integer dst"
            )
        for function, valid, count in outside:
            self.report(
                "warning",
                "activation-range",
                loc,
                f"nisa.{opcode}",
                f"{count} inputs of {function} lie outside its valid range {valid}, where the hardware's "
                "approximation is undefined",
            )


#: Members read at every instruction: an enum's class attribute costs ~0.15 us in Python 3.11.
_DMA_ENGINE, _TENSOR_ENGINE = Engine.dma, Engine.tensor
_PSUM_BUFFER = Buffer.psum

_FIX = "; write them first (nl.zeros, nisa.memset, a load)"


def _never_written(operand: str, t: Tensor, never: np.ndarray) -> str:
    first = [int(i) for i in np.argwhere(never)[0]]
    return (
        f"{operand} reads {int(np.count_nonzero(never))} of the {t.size} elements of {t.buffer.value.upper()} "
        f"tile {t.name!r} {dtype_name(t.dtype)}{list(t.shape)} that were never written, the first at index {first}"
    )


@numba.njit(cache=True, nogil=True)
def _all_written(marks: np.ndarray) -> bool:  # pragma: no cover (compiled)
    """Whether every mark is ``_WRITTEN`` or ``_TENSOR`` (one pass, stopping at the first other)."""
    for i in range(marks.shape[0]):
        for j in range(marks.shape[1]):
            m = marks[i, j]
            if m < _WRITTEN or m > _TENSOR:
                return False
    return True


@numba.njit(cache=True, nogil=True)
def _box_written(box: np.ndarray) -> bool:  # pragma: no cover (compiled)
    """Whether every byte of a box of shadow rows is ``_WRITTEN`` or ``_TENSOR``: a branch-free pass per row
    (which the compiler vectorises), stopping after the first row that has another mark."""
    for i in range(box.shape[0]):
        row = box[i]
        outside = False
        for j in range(row.shape[0]):
            m = row[j]
            outside |= (m < _WRITTEN) | (m > _TENSOR)
        if outside:
            return False
    return True


def _per_byte(shadow: np.ndarray, t: Tensor, every_byte: bool) -> np.ndarray:
    """A per-byte map of ``t``'s storage seen through ``t``: every byte of each element, or the first byte."""
    array, scale = t.array, shadow.itemsize
    shape, strides = array.shape, tuple(s * scale for s in array.strides)
    if every_byte:
        shape, strides = (*shape, t.itemsize), (*strides, scale)
    return np.ndarray(shape, shadow.dtype, buffer=shadow, offset=t.byte_offset * scale, strides=strides)


def _tracked(t: Tensor) -> bool:
    return t.buffer in ON_CHIP_BUFFERS and t.storage.kind in ("sbuf", "psum")


def _legal_start(start: int, count: int) -> bool:
    if count > 64:
        return start == 0
    if count > 32:
        return start in (0, 64)
    return start % 32 == 0


def _legal_starts(count: int) -> str:
    return "partition 0" if count > 64 else "partition 0 or 64" if count > 32 else "a multiple of 32"


def _free_pattern(t: Tensor, max_size: int, max_stride: int) -> list[tuple[int, int]]:
    """The free-dim access pattern as (size, stride in elements), innermost last.

    Size-1 dims are dropped and contiguous neighbours merged; a merged run too long for one
    pattern dim is split into two (``inner`` elements, then runs of them), as a compiler would.
    """
    array = t.array
    dims = [(n, st // t.itemsize) for n, st in zip(array.shape[1:], array.strides[1:]) if n != 1]
    merged: list[tuple[int, int]] = []
    for size, stride in reversed(dims):
        if merged:
            inner_size, inner_stride = merged[-1]
            if stride == inner_size * inner_stride:
                merged[-1] = (size * inner_size, inner_stride)
                continue
        merged.append((size, stride))
    pattern: list[tuple[int, int]] = []
    for size, stride in merged:
        pattern.extend(_split(size, stride, max_size, max_stride))
    return pattern[::-1]


def _split(size: int, stride: int, max_size: int, max_stride: int) -> list[tuple[int, int]]:
    """One run as pattern dims, innermost first: itself if it fits, else two dims when some split fits."""
    if size <= max_size:
        return [(size, stride)]
    for inner in range(-(-size // max_size), size):
        if size % inner == 0 and abs(inner * stride) <= max_stride and inner <= max_size:
            return [(inner, stride), (size // inner, inner * stride)]
        if abs(inner * stride) > max_stride:
            break
    return [(size, stride)]
