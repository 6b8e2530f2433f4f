"""Memories as real bytes: SBUF and PSUM (partitions x bytes) and HBM, with a liveness allocator.

On-chip memories are one ``uint8`` array of ``partitions x bytes_per_partition``.
An on-chip tensor occupies the same byte range in each of its partitions, as NKI
allocates it. HBM tensors each get their own block of bytes at a virtual address.

Liveness: a tile's bytes return to the allocator as soon as the kernel can no longer
reach the tile (its last Python reference is dropped). Reuse of those bytes by a new
tile is ordered after the old tile's last use by the scheduler's dependency tracking,
as the hardware's semaphores order it.
"""

from __future__ import annotations

import bisect
import itertools
import mmap
import weakref
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from nkisim.errors import CapacityError, SourceLoc
from nkisim.hw.model import OnChipMemoryConfig
from nkisim.memory.dtypes import dtype_name
from nkisim.memory.liveness import RECORDING_SCALE, PlanDivergedError, TilePlan, TileRecord


class Buffer(StrEnum):
    """Where a tensor lives. Compares equal to NKI 0.2's buffer strings (``'sbuf'``)."""

    sbuf = "sbuf"
    psum = "psum"
    hbm = "hbm"
    private_hbm = "private_hbm"
    shared_hbm = "shared_hbm"

    @property
    def is_on_chip(self) -> bool:
        return self in ON_CHIP_BUFFERS  # not ``self is Buffer.sbuf``: an enum's class attribute costs ~0.15 us

    @property
    def is_hbm(self) -> bool:
        return not self.is_on_chip

    @property
    def kind(self) -> str:
        """The physical memory: ``sbuf``, ``psum`` or ``hbm``."""
        return self.value if self.is_on_chip else "hbm"


#: SBUF and PSUM: test ``buffer in ON_CHIP_BUFFERS`` where a call is too dear (it is what ``is_on_chip`` does).
ON_CHIP_BUFFERS = frozenset((Buffer.sbuf, Buffer.psum))

_storage_ids = itertools.count()


#: From this many bytes on, :func:`lazy_zeros` maps fresh pages instead of asking numpy.
LAZY_ZEROS_BYTES = 1 << 20


def lazy_zeros(shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """A zero-filled array whose pages the OS zeroes when they are first touched, one small page at a time.

    numpy's ``zeros`` of a large array may clear all of it at once (about 0.6 ms for an SBUF's 24 MiB, when the C
    allocator hands back a block freed before), though a run that computes no values touches little of it; an
    anonymous memory map costs the same whatever the size, and the pages no one touches are never made. A run that
    writes all of it pays more this way (a fault per page), so runs with values keep numpy's zeros. The map is
    private, as numpy's memory is: a process forked from this one writes its own copy of a page.
    """
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if size < LAZY_ZEROS_BYTES:
        return np.zeros(shape, dtype=dtype)
    if hasattr(mmap, "MAP_PRIVATE"):
        pages = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    else:  # Windows: an anonymous map there belongs to this process alone
        pages = mmap.mmap(-1, size)
    return np.frombuffer(pages, dtype=dtype).reshape(shape)


class Storage:
    """A block of real bytes laid out as ``rows x row_bytes`` (rows are partitions on chip)."""

    __slots__ = (
        "_acc_marks",
        "acc_flags",
        "acc_known",
        "address",
        "base_address",
        "bytes",
        "kind",
        "row_bytes",
        "rows",
        "uid",
    )

    def __init__(
        self,
        kind: str,
        rows: int,
        row_bytes: int,
        base_address: int = 0,
        data: np.ndarray | None = None,
        lazy: bool = False,
    ) -> None:
        """``data``: existing ``uint8`` bytes of shape ``(rows, row_bytes)`` to stand for the storage (else zeros).

        ``lazy``: the zeros are made as they are touched (:func:`lazy_zeros`), for a run that touches few of them.
        """
        self.kind = kind
        new = lazy_zeros if lazy else np.zeros
        self.bytes = new((rows, row_bytes), np.uint8) if data is None else data
        #: The shape of :attr:`bytes`, as plain attributes: read at every view (a property cost ~0.15 us).
        self.rows, self.row_bytes = self.bytes.shape
        #: Where :attr:`bytes` starts in host memory (views find their offset from it).
        self.address: int = self.bytes.ctypes.data
        self.base_address = base_address
        self.uid = next(_storage_ids)
        #: PSUM only: per two bytes (a matmul writes float32 or bfloat16 elements, so never half of two bytes), the
        #: :meth:`acc_mark` of the tile whose matmul wrote them last (0: none). Kept narrow and dense: a matmul
        #: reads and writes the marks of all its elements, and one int64 per byte moved eight times the values' bytes.
        self.acc_flags = new((rows, -(-row_bytes // 2)), np.int32) if kind == "psum" else None
        self._acc_marks: dict[int, int] = {}
        #: The PSUM view the latest matmul wrote, as (byte offset, shape, strides, mark): all its marks hold that mark
        #: until another matmul writes this storage or a replay clears the marks (None: nothing known).
        self.acc_known: tuple[object, ...] | None = None

    def acc_mark(self, uid: int) -> int:
        """The number (1, 2, ...) that marks the bytes tile ``uid``'s matmuls wrote in :attr:`acc_flags`.

        Tensor uids count every tensor of the process; marks count this storage's tiles that met a matmul.
        """
        mark = self._acc_marks.get(uid)
        if mark is None:
            mark = self._acc_marks[uid] = len(self._acc_marks) + 1
        return mark


@dataclass(slots=True)
class Allocation:
    """A live on-chip allocation: a byte range used in ``partitions`` partitions from ``partition_offset``.

    ``handle`` identifies it for :meth:`OnChipMemory.free` (two explicitly placed
    allocations may share a byte offset in disjoint partitions).
    """

    offset: int
    nbytes: int
    partitions: int
    what: tuple[str, tuple[int, ...], np.dtype]
    loc: SourceLoc | None
    partition_offset: int = 0
    handle: int = -1
    placed: bool = False  # at an explicit address (``nl.ndarray(address=...)``)
    serial: int = -1  # creation order in this memory (the index into a TilePlan)
    #: Spilled to the next-tier memory: the bytes per partition that were free in this memory
    #: when it did not fit (``-1``: not spilled; a spilled allocation holds no bytes of this memory).
    spilled_free: int = -1
    #: The tile whose poison is still to be made, if any (its entry in :attr:`OnChipMemory.unpoisoned`).
    tile_uid: int = -1

    def overlaps(self, offset: int, nbytes: int, partition_offset: int, partitions: int) -> bool:
        bytes_meet = offset < self.offset + self.nbytes and self.offset < offset + nbytes
        rows_meet = partition_offset < self.partition_offset + self.partitions and self.partition_offset < (
            partition_offset + partitions
        )
        return bytes_meet and rows_meet

    @property
    def label(self) -> str:
        name, shape, dtype = self.what
        return f"{name} {describe(shape, dtype)}"


def _range_end(byte_range: tuple[int, int]) -> int:
    return byte_range[1]


#: Host bytes after each on-chip partition that no tile is given. SBUF's (192 to 256 KiB) and PSUM's (16 KiB)
#: partitions are multiples of 4 KiB, so a tile's partition rows fall in the same sets of the host CPU's caches;
#: BLAS packs a matmul operand across those rows, and a [128, 512] float32 operand took 12% longer to multiply.
#: One cache line more per row spreads them. The pad is outside every allocation: addresses and bounds are the
#: partition's.
ROW_PAD_BYTES = 64


@dataclass
class OnChipMemory:
    """SBUF or PSUM storage with a next-fit allocator over the per-partition byte range.

    With a :class:`TilePlan` it records allocations (``plan.recording``: automatic
    tiles go above the real memory) or allocates by them (tiles past their last
    use are freed; see :mod:`nkisim.memory.liveness`).
    """

    name: str
    config: OnChipMemoryConfig
    plan: TilePlan | None = None
    #: Whether the storage starts as zeros. A run that poisons every new tile never reads a byte no tile has
    #: covered, so it leaves them as the host gives them (clearing 24 MiB of SBUF was most of a small run).
    zeroed: bool = True
    storage: Storage = field(init=False)
    live: dict[int, Allocation] = field(init=False, default_factory=dict)
    #: The geometry numbers (``Tensor.geometry``) of whole tiles in :attr:`storage`, kept by the memory system:
    #: by the identities of their layout and dtype (held in the entry) and their first partition.
    geometries: dict[tuple[int, int, int], tuple[object, object, int | None]] = field(init=False, default_factory=dict)
    used_bytes: int = field(init=False, default=0)
    peak_bytes: int = field(init=False, default=0)
    #: The index of the next instruction (set by the memory system as instructions are issued).
    now: int = field(init=False, default=0)
    _cursor: int = field(init=False, default=0)
    _handles: itertools.count = field(init=False, default_factory=itertools.count)
    _serials: itertools.count = field(init=False, default_factory=itertools.count)
    #: The weak references :meth:`free_when_gone` waits on, by id, with their allocation handles.
    _dying: dict[int, tuple[weakref.ref[object], int]] = field(init=False, default_factory=dict)
    #: The byte ranges of the live automatic tiles, sorted (they never overlap), and how many placed tiles live.
    _auto_ranges: list[tuple[int, int]] = field(init=False, default_factory=list)
    _placed_live: int = field(init=False, default=0)
    #: The poison fills not made yet, by tile uid (the memory system's, shared by its memories): a freed
    #: tile's is dropped, as its bytes may go to another tile.
    unpoisoned: dict[int, object] = field(init=False, default_factory=dict)
    #: The copies into its tiles not made yet (SBUF's: :mod:`nkisim.memory.deferred`), by tile uid: a freed tile's
    #: is dropped, as nothing reads its bytes before they are poisoned or written again.
    deferred: dict[int, object] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        scale = RECORDING_SCALE if self.recording else 1
        self._end = self.config.bytes_per_partition * scale
        self.storage = self.new_storage(self._end, pad=ROW_PAD_BYTES)
        self._floor = self.config.bytes_per_partition if self.recording else 0
        # read at every tile: a pydantic model's property costs ~0.4 us
        self._align = self.config.alignment_bytes
        self._bank = self.config.bank_bytes if self.config.banks > 1 else None
        self._cursor = self._floor

    def new_storage(self, bytes_per_partition: int, pad: int = 0) -> Storage:
        """Bytes laid out as this memory's partitions (zeros only if :attr:`zeroed`), each ``pad`` bytes longer
        in the host's memory than the partition: bytes no tile is ever given (:data:`ROW_PAD_BYTES`)."""
        shape = (self.config.partitions, bytes_per_partition + pad)
        data = None if self.zeroed else np.empty(shape, dtype=np.uint8)
        return Storage(self.name, *shape, data=data, lazy=self.zeroed)

    @property
    def recording(self) -> bool:
        return self.plan is not None and self.plan.recording

    @property
    def spills(self) -> bool:
        """An automatic tile that does not fit goes to the next-tier memory instead of failing.

        So it is (SBUF to device memory, PSUM to SBUF) in a run that allocates by a recorded
        plan (the compiler's view of the kernel, see :mod:`nkisim.memory.liveness`), unless the
        plan forbids spilling.
        """
        plan = self.plan
        return plan is not None and not plan.recording and plan.spill

    @property
    def records(self) -> list[TileRecord] | None:
        return None if self.plan is None else self.plan.tiles[self.name]

    def allocate(
        self, nbytes: int, partitions: int, what: tuple[str, tuple[int, ...], np.dtype], loc: SourceLoc | None
    ) -> Allocation:
        """Reserve ``nbytes`` per partition and return the allocation (its byte ``offset`` and ``handle``).

        PSUM allocations that fit in one bank never straddle two banks, and larger
        ones start on a bank boundary, as the Tensor Engine writes whole banks.
        When the tile does not fit and the memory :attr:`spills`, the allocation returned
        is marked spilled (``spilled_free``) and takes no bytes of this memory.

        Raises:
            CapacityError: naming the kernel line and the live allocations.
        """
        align = self._align
        size = -(-max(nbytes, 1) // align) * align
        if self.plan is None and not self._placed_live:  # the usual case: the live automatic tiles are all in the way
            serial = next(self._serials)
            obstacles = self._auto_ranges
            offset = self._fit_from(self._cursor, size, obstacles)  # _next_fit, without the call
            if offset is None:
                offset = self._fit_from(self._floor, size, obstacles)
            if offset is not None:  # what _add does for an automatic tile, without the call: this runs at every tile
                self._cursor = offset + size
                # Allocation's fields in order, up to serial (keywords cost twice as much); keep in step with _add
                alloc = Allocation(offset, size, partitions, what, loc, 0, next(self._handles), False, serial)
                self.live[alloc.handle] = alloc
                bisect.insort(obstacles, (offset, offset + size))
                used = self.used_bytes = self.used_bytes + size
                if used > self.peak_bytes:
                    self.peak_bytes = used
                return alloc
        else:
            serial = self._begin(what, None)
            obstacles = self._obstacles(serial, partitions)
            offset = self._next_fit(size, obstacles)
        if offset is None:
            if self.spills:
                free = sum(self._free_ranges(obstacles))
                return Allocation(0, size, partitions, what, loc, serial=serial, spilled_free=free)
            label = Allocation(0, nbytes, partitions, what, loc).label
            raise CapacityError(self._full_message(nbytes, size, label, obstacles), loc=loc)
        self._cursor = offset + size
        return self._add(Allocation(offset, size, partitions, what, loc, serial=serial))

    def place(
        self,
        offset: int,
        partition_offset: int,
        nbytes: int,
        partitions: int,
        what: tuple[str, tuple[int, ...], np.dtype],
        loc: SourceLoc | None,
    ) -> Allocation:
        """Reserve ``nbytes`` per partition at an explicit address (``nl.ndarray(address=...)``).

        The caller has checked that the range fits the memory. The next-fit cursor
        does not move.

        Raises:
            CapacityError: if the range overlaps a live allocation the allocator made, naming both.
                Explicitly placed tiles may overlap each other: kernels that manage their own
                addresses (NKI 0.3 allocators) rotate buffers through the same bytes, as on hardware.
        """
        serial = self._begin(what, (partition_offset, partitions, offset, nbytes))
        # only automatic tiles are in the way: the live ones' byte ranges are sorted and disjoint (so are their
        # ends), and when none meets these bytes there is nothing to look for among every live allocation
        size = max(nbytes, 1)
        ranges = self._auto_ranges
        meets = bisect.bisect_right(ranges, offset, key=_range_end)
        live = self.live.values() if meets < len(ranges) and ranges[meets][0] < offset + size else ()
        for alloc in live:
            if not alloc.placed and alloc.overlaps(offset, size, partition_offset, partitions):
                where = f" (allocated at {alloc.loc})" if alloc.loc else ""
                label = Allocation(offset, nbytes, partitions, what, loc).label
                raise CapacityError(
                    f"{self.name.upper()} address (partition {partition_offset}, byte {offset}) for {label} "
                    f"overlaps live {alloc.label} at partitions {alloc.partition_offset}:"
                    f"{alloc.partition_offset + alloc.partitions}, bytes {alloc.offset}:{alloc.offset + alloc.nbytes}"
                    f"{where}",
                    loc=loc,
                )
        alloc = Allocation(offset, nbytes, partitions, what, loc, partition_offset, placed=True, serial=serial)
        return self._add(alloc)

    def _begin(self, what: tuple[str, tuple[int, ...], np.dtype], placed: tuple[int, int, int, int] | None) -> int:
        """Number a new allocation; record it, or free the tiles the plan says are dead."""
        serial = next(self._serials)
        records = self.records
        if records is None:
            return serial
        key = (what[0], tuple(what[1]), dtype_name(what[2]))
        if self.recording:
            records.append(TileRecord(key, self.now, self.now, placed))
            return serial
        if serial >= len(records) or records[serial].what[1:] != key[1:]:
            raise PlanDivergedError(f"{self.name} allocation {serial} ({key}) differs from the recorded run")
        for handle in [h for h, a in self.live.items() if a.serial >= 0 and records[a.serial].last < self.now]:
            self.free(handle)
        return serial

    def touch(self, serial: int, index: int) -> None:
        """Instruction ``index`` used allocation ``serial`` (recording only)."""
        records = self.records
        if records is not None and self.recording and records[serial].last < index:
            records[serial].last = index

    def _obstacles(self, serial: int, partitions: int) -> list[tuple[int, int]]:
        """Byte ranges a new automatic tile must avoid: live tiles, and (by the plan) future explicit ones."""
        if not self._placed_live and self.plan is None:
            return self._auto_ranges  # kept sorted as tiles come and go: a new list per tile cost ~5 us
        ranges = [
            (a.offset, a.offset + a.nbytes)
            for a in self.live.values()
            if not a.placed or a.partition_offset < partitions
        ]
        records = self.records
        if records is not None and not self.recording:
            mine = records[serial]
            for record in records[serial + 1 :]:
                if record.placed is not None and record.lives_during(mine.first, mine.last):
                    row, _, offset, nbytes = record.placed
                    if row < partitions:
                        ranges.append((offset, offset + max(nbytes, 1)))
        return sorted(ranges)

    def _add(self, alloc: Allocation) -> Allocation:
        alloc.handle = next(self._handles)
        self.live[alloc.handle] = alloc
        if alloc.placed:
            self._placed_live += 1
        else:
            bisect.insort(self._auto_ranges, (alloc.offset, alloc.offset + alloc.nbytes))
        self.used_bytes += alloc.nbytes
        if self.used_bytes > self.peak_bytes:
            self.peak_bytes = self.used_bytes
        return alloc

    def free(self, handle: int) -> None:
        freed = self.live.pop(handle, None)
        if freed is not None:
            if freed.tile_uid >= 0:
                self.unpoisoned.pop(freed.tile_uid, None)
                self.deferred.pop(freed.tile_uid, None)
            self.used_bytes -= freed.nbytes
            if freed.placed:
                self._placed_live -= 1
            else:  # live automatic ranges never overlap: the one starting at its offset is its own
                ranges = self._auto_ranges
                del ranges[bisect.bisect_left(ranges, (freed.offset,))]

    def free_when_gone(self, tile: object, handle: int) -> None:
        """Free allocation ``handle`` when ``tile`` is no longer reachable (its last reference is dropped).

        A weak reference with a callback, kept here until it fires: a third of the cost of ``weakref.finalize``,
        which a kernel allocating a tile per instruction pays at every instruction.
        """
        ref = weakref.ref(tile, self._gone)
        self._dying[id(ref)] = (ref, handle)

    def _gone(self, ref: weakref.ref[object]) -> None:
        entry = self._dying.pop(id(ref), None)
        if entry is not None:
            self.free(entry[1])

    def _next_fit(self, size: int, obstacles: list[tuple[int, int]]) -> int | None:
        """First gap at or after the end of the previous allocation, wrapping around once.

        Rotating through the memory, rather than reusing the bytes freed last, keeps
        a new tile off the bytes that in-flight instructions still use: the same
        multi-buffering a compiler does for loop iterations, so they can overlap.
        """
        found = self._fit_from(self._cursor, size, obstacles)
        return found if found is not None else self._fit_from(self._floor, size, obstacles)

    def _fit_from(self, cursor: int, size: int, obstacles: list[tuple[int, int]]) -> int | None:
        bank, align = self._bank, self._align  # an explicitly placed tile may end off the granule
        for start, end in obstacles:
            if end <= cursor:
                continue
            candidate = cursor if bank is None else self._place(cursor, size, bank)
            if candidate + size <= start:
                return candidate
            cursor = max(cursor, -(-end // align) * align)
        candidate = cursor if bank is None else self._place(cursor, size, bank)
        return candidate if candidate + size <= self._end else None

    @staticmethod
    def _place(cursor: int, size: int, bank: int | None) -> int:
        if bank is None:
            return cursor
        if size > bank:
            return -(-cursor // bank) * bank
        if cursor // bank != (cursor + size - 1) // bank:
            return (cursor // bank + 1) * bank
        return cursor

    def _free_ranges(self, obstacles: list[tuple[int, int]]) -> list[int]:
        """The lengths of the free ranges a new tile could start in, as :meth:`_fit_from` sees them."""
        lo, hi, align = self._floor, self._end, self.config.alignment_bytes
        gaps, cursor = [], lo
        for start, end in obstacles:
            start, end = max(start, lo), min(end, hi)
            if start > cursor:
                gaps.append(start - cursor)
            cursor = max(cursor, -(-end // align) * align)
        gaps.append(max(0, hi - cursor))
        return gaps

    def _full_message(self, nbytes: int, size: int, label: str, obstacles: list[tuple[int, int]]) -> str:
        """What was asked, what is in use and free, by how much it does not fit, and the live allocations."""
        lo, hi, align = self._floor, self._end, self.config.alignment_bytes
        gaps = self._free_ranges(obstacles)
        free = sum(gaps)
        granule = f" ({size} in {align}-byte granules)" if size != nbytes else ""
        if size > free:
            short = f"the request exceeds the free space by {size - free} bytes per partition"
        elif max(gaps) < size:
            short = f"the free bytes are split: the longest free range is {max(gaps)} bytes"
        else:
            short = f"no free range holds it without crossing a {self.config.bank_bytes}-byte bank boundary"
        lines = [
            f"{self.name.upper()} is full: cannot allocate {nbytes} bytes per partition{granule} for {label}: "
            f"{hi - lo - free} of {self.config.bytes_per_partition} bytes per partition in use, {free} free; {short}. "
            f"{_SPILL_RULE[self.name]} (docs/semantics.md, 'Spilling'). Live allocations:"
        ]
        for alloc in sorted(self.live.values(), key=lambda a: -a.nbytes)[:12]:
            where = f" at {alloc.loc}" if alloc.loc else ""
            lines.append(f"  {alloc.label}: {alloc.nbytes} B/partition, offset {alloc.offset}{where}")
        if len(self.live) > 12:
            lines.append(f"  ... and {len(self.live) - 12} more")
        return "\n".join(lines)


#: What a full memory's error says about spilling, by memory.
_SPILL_RULE = {
    "sbuf": "An automatic SBUF tile that does not fit even with tiles freed after their last use is spilled to "
    "device memory, as the compiler does, unless the kernel forbids it (nki.jit(spill=False)); tiles placed "
    "with address= never spill",
    "psum": "An automatic PSUM tile that does not fit even with tiles freed after their last use is spilled to "
    "SBUF, as the compiler does, unless the kernel forbids it (nki.jit(spill=False)); tiles placed with "
    "address= never spill",
}


def describe(shape: tuple[int, ...], dtype: np.dtype) -> str:
    return f"{dtype_name(dtype)}[{', '.join(map(str, shape))}]"
