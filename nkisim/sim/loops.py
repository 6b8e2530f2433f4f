"""The sanitizer's view of ``affine_range``: iterations that may run in any order.

NKI lets the compiler reorder and overlap the iterations of an ``affine_range`` loop,
so an iteration may not depend on another, except through associative accumulation
(matmuls adding into one PSUM tile, DMA writes with ``dst_rmw_op``). nkisim runs the
iterations in program order, where such a dependency silently works; here it is
reported.

Each instruction issued inside an ``affine_range`` loop is an *event* that remembers
the loop iterations it ran in. Shadow arrays hold, per byte, the event that last wrote
it and (on chip) the event that last read it. An instruction then finds:

- ``loop-carried-dependency``: it reads bytes an earlier iteration of an enclosing
  ``affine_range`` wrote (unless both accumulate into them);
- ``race``: it writes on-chip bytes an earlier iteration read (the buffer is reused
  while that iteration may still need it), or HBM bytes an earlier iteration wrote.

Only accesses through one allocation are compared: a tile allocated inside the loop
gets its own buffer in every iteration on hardware, even where nkisim's allocator
reuses the bytes of an earlier iteration's tile. Bytes written outside every active
loop carry the event of an older, finished loop (or none), which never matches a
running one, so they are not reported.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from nkisim.errors import SourceLoc
from nkisim.memory import ON_CHIP_BUFFERS, Region, Storage, Tensor
from nkisim.memory.tensor import uid_mark

#: ``(severity, check, rule)``: how the tracker hands a finding to the checker.
Report = Callable[[str, str, str], None]


@dataclass(frozen=True, slots=True)
class LoopFrame:
    """One running iteration of one ``affine_range`` loop.

    Attributes:
        instance: which execution of a loop statement (unique in the run).
        position: the iteration's place in the order it ran (0, 1, ...).
        value: the loop variable's value in this iteration.
        loc: the ``for`` line of the loop.
        fresh: tensors with a ``uid`` from this number on were allocated in this iteration.
    """

    instance: int
    position: int
    value: int
    loc: SourceLoc
    fresh: int


class Event(NamedTuple):
    """One instruction issued inside ``affine_range`` loops (a tuple: one is made per instruction)."""

    frames: tuple[LoopFrame, ...]
    loc: SourceLoc
    instruction: str
    accumulates: bool
    #: The allocations (``Tensor.uid``) it touched: bytes a later allocation reuses are not shared.
    tiles: tuple[int, ...]


def _carried(earlier: tuple[LoopFrame, ...], now: tuple[LoopFrame, ...]) -> tuple[LoopFrame, LoopFrame] | None:
    """The frames of the outermost loop both ran in, at different iterations; None if there is none."""
    for a, b in zip(earlier, now):
        if a.instance != b.instance:
            return None
        if a.position != b.position:
            return (a, b) if a.position < b.position else None
    return None


class LoopTracker:
    """The ``affine_range`` loops running now, and the shadow maps of who wrote and read each byte."""

    def __init__(self, values_known: bool = True) -> None:
        #: The run computes values, so a ``scalar_offset`` view's offset can be read when it is used
        #: (shapes-only runs count such a view as its whole allocation).
        self.values_known = values_known
        self.frames: tuple[LoopFrame, ...] = ()
        self._instances = 0
        self._events: list[Event | None] = [None]  # event 0: not written or read in a loop
        self._writes: dict[int, _Shadow] = {}
        self._reads: dict[int, _Shadow] = {}
        #: Per loop execution, the tensor-uid mark and loop value at the start of each iteration.
        self._marks: dict[int, list[tuple[int, int]]] = {}
        #: Per running loop, the tensor uids its earlier iterations allocated: [first, fresh).
        self._spans: tuple[tuple[int, int], ...] = ()

    # -- the loops ----------------------------------------------------------------------

    def enter(self) -> int:
        """A new execution of an ``affine_range`` loop; its instance number."""
        self._instances += 1
        return self._instances

    def iterate(self, instance: int, position: int, value: int, loc: SourceLoc) -> None:
        """Iteration ``position`` (loop variable ``value``) of loop ``instance`` begins."""
        frames = [f for f in self.frames if f.instance != instance]
        mark = uid_mark()
        self._marks.setdefault(instance, []).append((mark, value))
        self.frames = (*frames, LoopFrame(instance, position, value, loc, mark))
        self._set_spans()

    def _set_spans(self) -> None:
        spans = []
        for frame in self.frames:
            marks = self._marks.get(frame.instance)
            if marks:
                spans.append((marks[0][0], frame.fresh))
        self._spans = tuple(spans)

    def leave(self, instance: int) -> None:
        self.frames = tuple(f for f in self.frames if f.instance != instance)
        if not self.frames:  # what ran in a finished loop nest can never pair with a later loop
            self._marks.clear()
            self._events = [None]
            self._writes.clear()
            self._reads.clear()
        self._set_spans()

    @property
    def active(self) -> bool:
        return bool(self.frames)

    # -- the accesses --------------------------------------------------------------------

    def access(
        self,
        instruction: str,
        loc: SourceLoc,
        reads: list[tuple[str, Tensor]],
        writes: list[tuple[str, Tensor]],
        accumulates: bool,
        report: Report,
    ) -> None:
        """Check one instruction's accesses against earlier iterations, then record them.

        ``accumulates``: the instruction adds onto its destination (its spec says so). A
        read-modify-write of one tile (``dst`` is also an input) accumulates too.

        Tiles allocated in the innermost running iteration are private to it and skipped.
        """
        # plain loops rather than generators: this runs at every instruction inside an affine_range loop
        fresh = self.frames[-1].fresh
        dynamic = private = False
        for _, t in (*reads, *writes):
            dynamic = dynamic or t.is_dynamic
            private = private or t.uid >= fresh
        if dynamic and self.values_known:
            reads, writes = _at_current_offsets(reads), _at_current_offsets(writes)
        if private:
            shared_reads, shared_writes = [], []  # the accesses to tiles older than this iteration
            for access in reads:
                if access[1].uid < fresh:
                    shared_reads.append(access)
            for access in writes:
                if access[1].uid < fresh:
                    shared_writes.append(access)
            if not shared_reads and not shared_writes:
                return
            reads, writes = shared_reads, shared_writes
        spans = self._spans
        for how, accesses in (("read", reads), ("write", writes)):
            for name, t in accesses:
                uid = t.uid
                for first, end in spans:
                    if first <= uid < end:
                        if self._from_an_earlier_iteration(instruction, loc, name, t, how, report):
                            return
                        break
        on_chip_read = False
        for _, t in reads:
            if t.buffer in ON_CHIP_BUFFERS:
                on_chip_read = True
                break
        if not writes and not on_chip_read:
            # only HBM reads (a load): checked against earlier writes, but nothing records an HBM read
            for name, t in reads:
                shadow = self._writes.get(t.storage.uid)
                if shadow is not None:
                    self._check(shadow, instruction, name, t, accumulates, "read", report)
            return
        both = bool(reads and writes)  # else no access can read and write the same bytes: no sets to make
        written = {_bytes_key(t) for _, t in writes} if both else _NO_BYTES
        read = {_bytes_key(t) for _, t in reads} if both else _NO_BYTES
        rmw = bool(written & read)
        event_id = len(self._events)
        tiles = tuple(t.uid for _, t in (*reads, *writes))
        self._events.append(Event(self.frames, loc, instruction, accumulates or rmw, tiles))
        for name, t in reads:
            folds = accumulates or (both and _bytes_key(t) in written)
            self._check(self._shadow(self._writes, t), instruction, name, t, folds, "read", report)
        for name, t in writes:
            folds = accumulates or (both and _bytes_key(t) in read)
            on_chip = t.buffer in ON_CHIP_BUFFERS
            how = "write" if on_chip else "write HBM"
            shadows = self._reads if on_chip else self._writes
            self._check(self._shadow(shadows, t), instruction, name, t, folds, how, report)
        for _, t in reads:
            if t.buffer in ON_CHIP_BUFFERS:
                self._shadow(self._reads, t).stamp(t, event_id)
        for _, t in writes:
            self._shadow(self._writes, t).stamp(t, event_id)

    def _from_an_earlier_iteration(
        self, instruction: str, loc: SourceLoc, name: str, t: Tensor, how: str, report: Report
    ) -> bool:
        """Report an access to a tile that an earlier iteration of a running loop allocated.

        Such a tile is handed from one iteration to the next (through a Python variable or list),
        and its accesses were not recorded while it was private to the iteration that made it.
        """
        for frame in self.frames:
            marks = self._marks.get(frame.instance, [])
            if not marks or not marks[0][0] <= t.uid < frame.fresh:
                continue
            born = marks[bisect.bisect_right(marks, (t.uid, float("inf"))) - 1][1]
            what = f"{_storage_name(t.storage)} tile {t.name!r}"
            loop = f"the affine_range loop at {frame.loc}"
            if how == "read":
                check = "loop-carried-dependency"
                rule = (
                    f"{name} reads {what}, which iteration {born} of {loop} allocated: a loop-carried dependency, "
                    f"but affine_range iterations may run in any order; use sequential_range (iteration "
                    f"{frame.value} reads it)"
                )
            else:
                check = "race"
                rule = (
                    f"{name} writes {what}, which iteration {born} of {loop} allocated and may still be using: "
                    f"affine_range iterations may overlap; use sequential_range (iteration {frame.value} writes it)"
                )
            report("error", check, rule)
            return True
        return False

    def _check(
        self, shadow: _Shadow, instruction: str, name: str, t: Tensor, accumulates: bool, how: str, report: Report
    ) -> None:
        for event_id in shadow.events(t):
            earlier = self._events[event_id]
            assert earlier is not None
            if t.uid not in earlier.tiles:
                continue  # another allocation at these bytes: the compiler gives each its own buffer
            pair = _carried(earlier.frames, self.frames)
            if pair is None or (accumulates and earlier.accumulates):
                continue
            report(*_finding(how, instruction, name, t, earlier, pair))
            return

    @staticmethod
    def _shadow(shadows: dict[int, _Shadow], t: Tensor) -> _Shadow:
        shadow = shadows.get(t.storage.uid)
        if shadow is None:
            shadow = shadows[t.storage.uid] = _Shadow(t.storage)
        return shadow


#: The byte keys of an instruction that does not both read and write shared tiles.
_NO_BYTES: frozenset[tuple[int, int, int, int, int]] = frozenset()

#: Bytes of a partition per bucket of :class:`_Shadow`'s box index.
BUCKET_BYTES = 1024
#: Rows per bucket of :class:`_Shadow`'s box index, at least: all of an on-chip memory's partitions; an HBM
#: tensor's row blocks (a kernel writes a large output a block of 128 rows at a time) fall in buckets of their own.
BUCKET_ROWS = 128
#: Bands of rows a storage's index has at most (taller storages get taller bands): an access to a whole tensor
#: visits at most this many buckets per 1 KiB of a row.
MAX_BANDS = 32


def _buckets(r0: int, r1: int, b0: int, b1: int, band_rows: int) -> list[int]:
    """The index buckets a non-empty box of rows ``[r0, r1)`` x bytes ``[b0, b1)`` spans, as numbers."""
    columns = range(b0 // BUCKET_BYTES, (b1 - 1) // BUCKET_BYTES + 1)
    bands = range(r0 // band_rows, (r1 - 1) // band_rows + 1)
    return [(band << 32) | column for band in bands for column in columns]


class _Shadow:
    """Which event last touched each byte of one storage, inside the running loop nest.

    Disjoint boxes of bytes (rows ``[r0, r1)`` x bytes ``[b0, b1)``), each with its event:
    most views cover their whole box, and a new access splits what it overlaps. A view that
    does not (a strided one) switches the storage to an array of events per *granule*, exact for
    any view: the largest power of two of bytes that every access so far starts, ends and steps
    on (the item size of a strided view, at most), so that a view of ``n`` items is ``n`` entries
    in one run of the array rather than ``n`` runs of a few bytes. An access on a finer grain
    splits the granules first. Dynamic views count as their whole region.

    The boxes are ``(r0, r1, b0, b1, event)`` tuples by number, and each number is listed in
    the buckets of ``band_rows`` rows (:data:`BUCKET_ROWS`, or more to make at most :data:`MAX_BANDS`
    bands) by :data:`BUCKET_BYTES` bytes its box spans: an access
    looks only at the boxes of the buckets it spans, however many tiles the loop nest has touched.
    """

    __slots__ = ("_seen", "band_rows", "boxes", "buckets", "exact", "granule", "next_box", "per_granule", "storage")

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.band_rows = max(BUCKET_ROWS, -(-storage.rows // MAX_BANDS))
        self.boxes: dict[int, tuple[int, int, int, int, int]] = {}
        self.buckets: dict[int, set[int]] = {}
        #: Box numbers by their rectangle. Boxes are disjoint, so an access to exactly a box's bytes meets no other.
        self.exact: dict[tuple[int, int, int, int], int] = {}
        self.next_box = 0
        #: The events per granule of ``granule`` bytes once a strided view came, stored columns first
        #: (row bytes / granule x rows: see :func:`_columns_first`).
        self.per_granule: np.ndarray | None = None
        self.granule = 0
        #: The last rectangle :meth:`_overlapping` looked up, the boxes it met and its buckets, while no box is
        #: added or removed: an instruction checks a write's bytes (:meth:`events`), then stamps them.
        self._seen: tuple[tuple[int, int, int, int], list[int], list[int]] | None = None

    def _overlapping(self, r0: int, r1: int, b0: int, b1: int) -> list[int]:
        """The numbers of the boxes that meet the rectangle, in the order they were made."""
        rect = (r0, r1, b0, b1)
        seen = self._seen
        if seen is not None and seen[0] == rect:
            return seen[1]
        buckets = self.buckets
        near: set[int] = set()
        spans = _buckets(r0, r1, b0, b1, self.band_rows)
        for bucket in spans:
            near.update(buckets.get(bucket, ()))
        boxes = self.boxes
        numbers = (
            sorted(n for n in near if (box := boxes[n])[0] < r1 and r0 < box[1] and box[2] < b1 and b0 < box[3])
            if near
            else []
        )
        self._seen = (rect, numbers, spans)
        return numbers

    def _add(self, box: tuple[int, int, int, int, int]) -> None:
        number = self.next_box
        self.next_box += 1
        self.boxes[number] = box
        rect = box[:4]
        self.exact[rect] = number
        seen, self._seen = self._seen, None
        spans = seen[2] if seen is not None and seen[0] == rect else _buckets(*rect, self.band_rows)
        for bucket in spans:
            self.buckets.setdefault(bucket, set()).add(number)

    def _remove(self, number: int) -> tuple[int, int, int, int, int]:
        self._seen = None
        box = self.boxes.pop(number)
        del self.exact[box[:4]]
        for bucket in _buckets(*box[:4], self.band_rows):
            self.buckets[bucket].discard(number)
        return box

    def events(self, t: Tensor) -> list[int]:
        """The events (non-zero, earliest first) of the bytes ``t`` touches."""
        if self.per_granule is None and self.boxes and not _dense(t):
            self._to_granules(t)  # a strided view: only the per-granule record is exact
        if self.per_granule is not None:
            target, where = self._granules_of(t)
            stamps = target[where]
            if stamps.size == 0:
                return []
            high = int(stamps.max())
            if high == 0:
                return []
            low = int(stamps.min())
            return [high] if low == high else [int(e) for e in np.unique(stamps) if e]
        if not self.boxes:
            return []
        r = t._region or t.region  # the property's memo first
        if r.r0 >= r.r1 or r.b0 >= r.b1:
            return []
        number = self.exact.get((r.r0, r.r1, r.b0, r.b1))
        if number is not None:
            return [self.boxes[number][4]]
        return sorted({self.boxes[n][4] for n in self._overlapping(r.r0, r.r1, r.b0, r.b1)})

    def stamp(self, t: Tensor, event: int) -> None:
        """``t``'s bytes were last touched by ``event``."""
        if self.per_granule is None and not _dense(t):
            self._to_granules(t)
        if self.per_granule is not None:
            target, where = self._granules_of(t)
            target[where] = event
            return
        r = t._region or t.region
        r0, r1, b0, b1 = r.r0, r.r1, r.b0, r.b1
        if r0 >= r1 or b0 >= b1:
            return
        number = self.exact.get((r0, r1, b0, b1))
        if number is not None:  # the same bytes again (a tile reused, or a new one at its address)
            self.boxes[number] = (r0, r1, b0, b1, event)
            return
        for number in self._overlapping(r0, r1, b0, b1):
            for part in _minus(self._remove(number), r):
                self._add(part)
        self._add((r0, r1, b0, b1, event))

    def _to_granules(self, t: Tensor) -> None:
        """Switch to the per-granule record, on the grain of the boxes so far and of ``t``."""
        bits = self.storage.row_bytes
        for _, _, b0, b1, _ in self.boxes.values():
            bits |= b0 | b1
        self.granule = _granule(t, bits & -bits)
        self.per_granule = _columns_first(self.storage.bytes.shape[0], self.storage.row_bytes // self.granule)
        grid = self.per_granule.T  # rows x granules
        for r0, r1, b0, b1, event in self.boxes.values():
            grid[r0:r1, b0 // self.granule : b1 // self.granule] = event

    def _granules_of(self, t: Tensor) -> tuple[np.ndarray, Any]:
        """The events of the granules ``t`` touches, as ``target[where]`` (a view, or indices for a view whose
        bytes are not a lattice of rows and columns); a finer grain splits the granules first."""
        granule = _granule(t, self.granule)
        per_granule = self.per_granule
        assert per_granule is not None
        if granule < self.granule:
            split = self.granule // granule
            finer = _columns_first(per_granule.shape[1], per_granule.shape[0] * split)
            finer.reshape(per_granule.shape[0], split, per_granule.shape[1])[...] = per_granule[:, None, :]
            self.per_granule, self.granule, per_granule = finer, granule, finer
        grid = per_granule.T
        if t.is_dynamic:
            r = t.region
            return grid, (slice(r.r0, r.r1), slice(r.b0 // granule, r.b1 // granule))
        lattice = _rows_and_columns(t, self.storage.row_bytes)
        if lattice is None:
            return grid, _indices(t, self.storage.row_bytes, granule)
        row, column, axes = lattice
        size, rows = per_granule.itemsize, per_granule.shape[1]
        shape = tuple(n for n, _, _ in axes)
        strides = tuple((row_step + column_step // granule * rows) * size for _, row_step, column_step in axes)
        if t.itemsize > granule:  # the granules of each item, in adjacent columns
            shape, strides = (*shape, t.itemsize // granule), (*strides, rows * size)
        offset = (row + column // granule * rows) * size
        return np.ndarray(shape, np.int32, buffer=per_granule, offset=offset, strides=strides), ...


def _granule(t: Tensor, granule: int) -> int:
    """The largest power of two, at most ``granule``, that ``t``'s bytes start, end and step on."""
    if t.is_dynamic:
        r = t.region
        bits = r.b0 | r.b1
    else:
        bits = t.itemsize | t.byte_offset
        for stride in t.array.strides:
            bits |= abs(stride)
    return min(granule, bits & -bits) if bits else granule


def _columns_first(rows: int, columns: int) -> np.ndarray:
    """Zeroed events, stored column by column (transposed: ``columns x rows``).

    A view's partitions are adjacent there, so a strided view of a tile (one item in every
    few) touches a run of partitions per item rather than a cache line per item and partition.
    """
    return np.zeros((columns, rows), np.int32)


def _rows_and_columns(t: Tensor, row_bytes: int) -> tuple[int, int, list[tuple[int, int, int]]] | None:
    """``t``'s first byte as (row, column), and per axis its extent, row step and column step in bytes;
    None when an axis steps across rows and columns at once, or the columns leave the row."""
    row, column = divmod(t.byte_offset, row_bytes)
    low = high = column
    axes = []
    for n, stride in zip(t.array.shape, t.array.strides):
        if n == 1 or stride == 0:
            axes.append((n, 0, 0))
        elif stride % row_bytes == 0:
            axes.append((n, stride // row_bytes, 0))
        elif abs(stride) < row_bytes:
            axes.append((n, 0, stride))
            if stride > 0:
                high += (n - 1) * stride
            else:
                low += (n - 1) * stride
        else:
            return None
    if low < 0 or high + t.itemsize > row_bytes:
        return None
    return row, column, axes


def _indices(t: Tensor, row_bytes: int, granule: int) -> tuple[np.ndarray, np.ndarray]:
    """The (row, granule) indices of every granule ``t`` touches, from the address of each of its bytes."""
    array = t.array
    starts = np.full((), t.byte_offset, dtype=np.int64)
    for n, stride in zip(array.shape, array.strides):
        starts = np.expand_dims(starts, -1) + np.arange(n, dtype=np.int64) * stride
    touched = starts.reshape(-1, 1) + np.arange(0, t.itemsize, granule, dtype=np.int64)
    rows, columns = np.divmod(touched.ravel(), row_bytes)
    return rows, columns // granule


def _minus(box: tuple[int, int, int, int, int], r: Region) -> list[tuple[int, int, int, int, int]]:
    """The parts of ``box`` outside ``r`` (at most four boxes), keeping its event."""
    r0, r1, b0, b1, event = box
    out = []
    if r0 < r.r0:
        out.append((r0, r.r0, b0, b1, event))
    if r.r1 < r1:
        out.append((r.r1, r1, b0, b1, event))
    lo, hi = max(r0, r.r0), min(r1, r.r1)
    if b0 < r.b0:
        out.append((lo, hi, b0, r.b0, event))
    if r.b1 < b1:
        out.append((lo, hi, r.b1, b1, event))
    return out


def _bytes_key(t: Tensor) -> tuple[int, int, int, int, int]:
    """The storage and rectangle of ``t``'s region as a plain tuple (equal exactly when the regions are)."""
    r = t._region or t.region
    return (id(r.storage), r.r0, r.r1, r.b0, r.b1)


def _at_current_offsets(accesses: list[tuple[str, Tensor]]) -> list[tuple[str, Tensor]]:
    """Each ``scalar_offset`` view replaced by the bytes it touches now (others unchanged)."""
    out = []
    for name, t in accesses:
        static = t.at_current_offset() if t.is_dynamic else None  # type: ignore[attr-defined]
        out.append((name, static if static is not None else t))
    return out


def _dense(t: Tensor) -> bool:
    """The view touches every byte of its region's box exactly once (a dynamic view: taken as its region)."""
    if (t._row_box or t.row_box) is not None:  # its bytes are exactly a box (the property's memo first)
        return True
    if t.is_dynamic:
        return True
    array = t.array
    r = t.region
    if any(s == 0 and n > 1 for n, s in zip(array.shape, array.strides)):
        return False
    return array.size * array.itemsize == (r.r1 - r.r0) * (r.b1 - r.b0)


def _storage_name(storage: Storage) -> str:
    return storage.kind.upper()


def _finding(
    how: str, instruction: str, name: str, t: Tensor, earlier: Event, pair: tuple[LoopFrame, LoopFrame]
) -> tuple[str, str, str]:
    then, now = pair
    loop = f"affine_range loop at {now.loc}"
    what = f"{_storage_name(t.storage)} tile {t.name!r}"
    iterations = f"iteration {then.value} ({earlier.instruction} at {earlier.loc})"
    if how == "read":
        rule = (
            f"{name} reads {what}, which {iterations} of the {loop} wrote: a loop-carried dependency, but "
            f"affine_range iterations may run in any order; use sequential_range, or give each iteration its "
            f"own tile (iteration {now.value} reads it)"
        )
        return "error", "loop-carried-dependency", rule
    if how == "write":
        rule = (
            f"{name} overwrites {what}, which {iterations} of the {loop} read: the iterations may overlap, so "
            f"the earlier one can see the new values; allocate the tile inside the loop or use sequential_range "
            f"(iteration {now.value} writes it)"
        )
        return "error", "race", rule
    rule = (
        f"{name} writes {what}, which {iterations} of the {loop} also wrote: affine_range iterations may run "
        f"in any order, so which value stays is undefined (iteration {now.value} writes it)"
    )
    return "error", "race", rule
