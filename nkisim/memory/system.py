"""The memories of one NeuronCore, and the creation of tensors in them.

Spilling: in a run that allocates by a recorded plan, an automatic SBUF or PSUM tile that
does not fit even with tiles freed after their last use is placed in a spill store of its
own, standing for the next-tier memory the compiler spills it to (device memory for SBUF,
SBUF for PSUM). The store has the memory's partition layout, so the tile is an SBUF or PSUM
tile to the kernel (its ``buffer`` is unchanged) with the same views and values; the machine
adds the refill and save transfers its instructions cost (:mod:`nkisim.sim.machine`).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import numpy as np

from nkisim.errors import CapacityError, OperandError, SourceLoc
from nkisim.hw import HwConfig
from nkisim.memory.deferred import DeferredCopies
from nkisim.memory.hbm_poison import PendingPoison
from nkisim.memory.liveness import TilePlan
from nkisim.memory.space import ON_CHIP_BUFFERS, Buffer, OnChipMemory, Storage, describe
from nkisim.memory.tensor import Tensor
from nkisim.memory.views import Region, new_region


class MemoryRecorder(Protocol):
    """What records the memory events that set values, for a program replayed on new inputs (nkisim.sim.program)."""

    def filled(self, view: np.ndarray, byte: int) -> None:
        """Every byte of ``view`` (a ``uint8`` view of a storage) was set to ``byte``."""
        ...

    def placed_input(self, view: np.ndarray) -> None:
        """A kernel input was copied into ``view`` (inputs are placed in argument order)."""
        ...

    def allocated(self, tensor: Tensor) -> None:
        """A new on-chip tensor was allocated (after it was poisoned)."""
        ...


#: An instruction's ``(operand name, view)`` reads or writes.
Accesses = list[tuple[str, Tensor]]
#: ``sets_all(ops)``: whether an instruction sets every element of ``ops.dst`` (an instruction spec's ``overwrites``).
SetsAll = Callable[[Any], bool]

#: The buffer kernel inputs report: ``nl.hbm``, which NKI's samples assert of their inputs
#: (``assert x.buffer == nl.hbm``). The programs of a launch share them all the same.
INPUT_BUFFER = Buffer.hbm
#: Tile layouts (:func:`_tile_layout`) a run keeps; a kernel of more shapes than this starts the memo again.
MAX_LAYOUTS = 1024
_SBUF = Buffer.sbuf  # an enum's class attribute costs ~0.15 us in Python 3.11: read once


class MemorySystem:
    """SBUF, PSUM and the HBM tensors of one run.

    Attributes:
        poison: fill fresh memory with NaN (floats) or a pattern (integers), so that
            reads of never-written memory show up in the results.
    """

    def __init__(self, hw: HwConfig, poison: bool = True, plan: TilePlan | None = None) -> None:
        self.hw = hw
        self.poison = poison
        self.plan = plan
        # with poison, every tile is filled when allocated: the memories' first bytes are never read
        self.sbuf = OnChipMemory("sbuf", hw.sbuf, plan, zeroed=not poison)
        self.psum = OnChipMemory("psum", hw.psum, plan, zeroed=not poison)
        #: New automatic SBUF and PSUM tiles whose poison is not made yet, by tensor uid: the bytes of their storage
        #: and their box (r0, r1, b0, b1). The first instruction that uses one makes it, unless it sets all of the
        #: tile without reading it (:meth:`settle_poison`): then the poison would never be seen. Live automatic
        #: tiles never share bytes, so a late fill reaches no other tile's values.
        self.unpoisoned: dict[int, tuple[np.ndarray, int, int, int, int]] = {}
        self.sbuf.unpoisoned = self.psum.unpoisoned = self.unpoisoned  # type: ignore[assignment]
        #: DMA loads into new SBUF tiles whose copy waits (:mod:`nkisim.memory.deferred`), under ``defer_poison``.
        self.deferred = DeferredCopies()
        self.sbuf.deferred = self.deferred
        #: Whether new tiles' poison may wait: only where every use of a tile's bytes goes through the machine
        #: (instructions, ``Machine.store``, ``Machine.effect``), as in a kernel's run on one core; the cores of a
        #: launch exchange tiles, and a host that writes a tile's array itself must see its poison there first.
        self.defer_poison = False
        #: Whether a new HBM tensor's poison may wait too (:mod:`nkisim.memory.hbm_poison`): only in a run whose HBM
        #: is its own, which makes it at the end (:meth:`settle_outputs`) before its outputs are read.
        self.defer_hbm_poison = False
        #: The new HBM tensors whose poison waits, by tensor uid (a view's uid is its tensor's).
        self.hbm_unpoisoned: dict[int, PendingPoison] = {}
        #: While recording a plan: tensor uid -> (memory, allocation serial).
        self._allocations: dict[int, tuple[OnChipMemory, int]] = {}
        #: Called with each new on-chip tensor and whether it was placed at an explicit address.
        self.on_allocate: Callable[[Tensor, bool], None] | None = None
        #: The spill stores of this run's spilled SBUF and PSUM tiles, by storage uid.
        self.spilled: dict[int, Storage] = {}
        #: Called with each spilled tile, the bytes per partition of its memory free when it did not fit,
        #: and the kernel line that allocated it.
        self.on_spill: Callable[[Tensor, int, SourceLoc | None], None] | None = None
        #: Told of every event that sets values outside an instruction, while a program is being recorded.
        self.recorder: MemoryRecorder | None = None
        #: (partitions, bytes per partition, free-dim strides) of a tile shape and dtype, worked out once.
        self._layouts: dict[tuple[tuple[int, ...], np.dtype], tuple[int, int, tuple[int, ...]]] = {}
        self._hbm_next_address = 0x1_0000_0000
        self.hbm_bytes = 0
        self._counter = 0
        #: The storage uids of the inputs read in place (:meth:`hbm_tensor_from` with ``borrow``), shared by the
        #: cores of a launch; it also holds :data:`BROKEN` once one of them tried to write a borrowed input.
        self.borrowed: set[int] = set()

    def on_chip(self, buffer: Buffer) -> OnChipMemory:
        return self.sbuf if buffer is _SBUF else self.psum

    def issued(self, index: int, *operands: Iterable[tuple[str, Tensor]]) -> None:
        """Instruction ``index`` was issued with these ``(name, tensor)`` operands (tile lifetimes for a plan)."""
        self.sbuf.now = self.psum.now = index + 1
        if self.plan is None or not self.plan.recording:
            return
        for group in operands:
            for _, tensor in group:
                for used in (tensor, *tensor.index_tensors):
                    found = self._allocations.get(used.uid)
                    if found is not None:
                        found[0].touch(found[1], index)

    def new_tensor(
        self,
        shape: tuple[int, ...],
        dtype: np.dtype,
        buffer: Buffer,
        name: str = "",
        loc: SourceLoc | None = None,
        address: tuple[int, int] | None = None,
    ) -> Tensor:
        """Allocate an uninitialised tensor (poisoned, if enabled: at once, or before anything can see it, for an
        automatic tile under :attr:`defer_poison` and an HBM tensor under :attr:`defer_hbm_poison`).

        ``address=(partition_offset, free_offset)`` places an SBUF or PSUM tensor at
        that partition and byte offset instead of letting the allocator choose.

        Raises:
            CapacityError: no room, or ``address`` overlaps a live allocation or leaves the memory.
            OperandError: ``address`` is malformed, given for HBM, or (PSUM) not on a bank boundary.
        """
        self._counter += 1
        on_chip = buffer in ON_CHIP_BUFFERS
        name = name or f"{buffer._value_ if on_chip else 'hbm'}{self._counter}"  # Buffer.kind, without the calls
        if address is not None and not on_chip:
            raise OperandError(f"nl.ndarray: address= places SBUF or PSUM tensors, not {buffer.value}", loc=loc)
        if on_chip:
            tensor = self._on_chip_tensor(shape, dtype, buffer, name, loc, address)
        else:
            storage = self._hbm_storage(shape, dtype, name, loc, written=self.poison)
            tensor = Tensor(_typed_view(storage, 0, shape, dtype), dtype, buffer, name, storage, None)
            if self.defer_hbm_poison:
                self.hbm_unpoisoned[tensor.uid] = PendingPoison(storage.bytes)
                # a tensor dropped with its poison due never has it made (nothing can read its bytes), nor keeps them
                weakref.finalize(tensor, self.hbm_unpoisoned.pop, tensor.uid, None)
        if self.poison:
            if tensor.uid not in self.unpoisoned and tensor.uid not in self.hbm_unpoisoned:
                self._filled(_poison(tensor))
            if on_chip and self.recorder is not None:
                self.recorder.allocated(tensor)
        return tensor

    def settle_poison(self, reads: Accesses, writes: Accesses, overwrites: SetsAll | None, ops: Any) -> None:
        """Make the poison of the new tiles an instruction reads or writes in part, before it runs.

        ``overwrites(ops)``: whether the instruction sets all of its ``ops.dst`` without reading it (see
        :attr:`nkisim.isa.spec.InstructionSpec.overwrites`; None for an instruction that may not): a new tile that
        is that operand itself (not a view of it) keeps no poison, as nothing could read it before these values.
        An instruction with registers or views at run-time offsets has had every poison made first
        (:meth:`settle_pending`).
        """
        pending = self.unpoisoned
        for _, t in reads:
            box = pending.pop(t.uid, None)  # a view's uid is its tile's
            if box is not None:
                self._fill_box(box)
        for _, t in writes:
            box = pending.pop(t.uid, None)
            if box is not None and not (
                overwrites is not None and t is ops.dst and t._base is None and overwrites(ops)
            ):
                self._fill_box(box)

    def settle_hbm_poison(self, reads: Accesses, writes: Accesses, overwrites: SetsAll | None, ops: Any) -> None:
        """Make the poison of the new HBM tensors an instruction reads, or writes other than by a block it sets
        whole; of those it writes by such a block, keep the block unpoisoned (:class:`PendingPoison`).

        ``overwrites(ops)``: whether the instruction sets all of its ``ops.dst`` (see
        :attr:`nkisim.isa.spec.InstructionSpec.overwrites`); None for an instruction that may not.
        """
        pending = self.hbm_unpoisoned  # by HBM tensor uid: an on-chip view's uid is never one of them
        for _, t in reads:
            if t.uid in pending:
                pending.pop(t.uid).make(self._filled)
        for _, t in writes:
            if t.uid in pending:
                block = t.row_box if overwrites is not None and t is ops.dst and overwrites(ops) else None
                if block is None or not pending[t.uid].wrote(block):
                    pending.pop(t.uid).make(self._filled)

    def settle_pending(self) -> None:
        """Make every poison and copy not made yet (before anything reads or writes memory outside an instruction)."""
        self.deferred.make_all()
        pending = self.unpoisoned
        while pending:  # one at a time: a tile the garbage collector frees meanwhile takes its own out
            self._fill_box(pending.popitem()[1])
        self.settle_outputs()

    def settle_outputs(self) -> None:
        """Make the poison of every HBM tensor whose poison waits (at the end of a run, before its outputs are read)."""
        pending = self.hbm_unpoisoned
        while pending:
            pending.popitem()[1].make(self._filled)

    def _fill_box(self, box: tuple[np.ndarray, int, int, int, int]) -> None:
        data, r0, r1, b0, b1 = box
        view = data[r0:r1, b0:b1]
        view.fill(0xFF)
        self._filled(view)

    def _filled(self, view: np.ndarray) -> None:
        if self.recorder is not None:
            self.recorder.filled(view, 0xFF)

    def hbm_tensor_from(self, values: np.ndarray, dtype: np.dtype, name: str, borrow: bool = False) -> Tensor:
        """Copy a kernel input into fresh HBM (an input reports ``nl.hbm``: see :data:`INPUT_BUFFER`).

        With ``borrow``, an input of :data:`BORROW_BYTES` or more whose layout is already the HBM
        tensor's (C order, aligned, of ``dtype``) is read in place instead, through a read-only
        view: an instruction that writes it raises :class:`BorrowedInputWritten` (see
        :meth:`check_writes`), and the run starts again with copies.
        """
        if borrow and _borrowable(values, dtype):
            data = np.asarray(values).reshape(-1).view(np.uint8).reshape(_hbm_layout(values.shape, dtype))
            data.flags.writeable = False  # this view only: the caller's array keeps its flags
            storage = self._hbm_storage(values.shape, dtype, name, data=data)
            self.borrowed.add(storage.uid)
            return Tensor(_typed_view(storage, 0, values.shape, dtype), dtype, INPUT_BUFFER, name, storage, None)
        storage = self._hbm_storage(values.shape, dtype, name, written=True)
        tensor = Tensor(_typed_view(storage, 0, values.shape, dtype), dtype, INPUT_BUFFER, name, storage, None)
        tensor.array[...] = values
        if self.recorder is not None:
            self.recorder.placed_input(tensor.array)
        return tensor

    @property
    def borrow_broken(self) -> bool:
        """Whether an instruction (of any core of the launch) tried to write a borrowed input: the run must start
        again with copies, even if the kernel caught the :class:`BorrowedInputWritten` raised then."""
        return BROKEN in self.borrowed

    def check_writes(self, writes: Iterable[tuple[str, Tensor]]) -> None:
        """Raise :class:`BorrowedInputWritten` if one of ``writes`` is a view of a borrowed input."""
        borrowed = self.borrowed
        for _, tensor in writes:
            if tensor.storage.uid in borrowed:
                borrowed.add(BROKEN)
                raise BorrowedInputWritten(tensor.name)

    def broke_borrow(self) -> None:
        """A write into a borrowed input was refused outside :meth:`check_writes` (a read-only array's error)."""
        self.borrowed.add(BROKEN)
        raise BorrowedInputWritten("")

    def _on_chip_tensor(
        self,
        shape: tuple[int, ...],
        dtype: np.dtype,
        buffer: Buffer,
        name: str,
        loc: SourceLoc | None,
        address: tuple[int, int] | None,
    ) -> Tensor:
        memory = self.sbuf if buffer is _SBUF else self.psum
        layout = self._layouts.get((shape, dtype))
        if layout is None:
            if len(self._layouts) >= MAX_LAYOUTS:
                self._layouts.clear()
            layout = self._layouts[(shape, dtype)] = _tile_layout(shape, dtype)
        partitions, free_bytes, free_strides = layout
        what = (name, shape, dtype)
        if address is None:
            alloc = memory.allocate(free_bytes, partitions, what, loc)
        else:
            row, col = _check_address(address, partitions, free_bytes, memory, loc)
            alloc = memory.place(col, row, free_bytes, partitions, what, loc)
        offset, row = alloc.offset, alloc.partition_offset
        storage = memory.storage
        if alloc.spilled_free >= 0:
            storage = memory.new_storage(alloc.nbytes)
            self.spilled[storage.uid] = storage
        start = row * storage.row_bytes + offset
        # positional arguments: numpy parses keywords at about twice the cost of the view itself
        array = np.ndarray(shape, dtype, storage.bytes, start, (storage.row_bytes, *free_strides))
        tensor = Tensor(array, dtype, buffer, name, storage, None, start)
        if free_bytes and partitions and len(shape) >= 2:  # what the view properties would work out from the array
            tensor._row_box = (row, row + partitions, offset, offset + free_bytes)
            tensor._region = new_region(Region, (storage, row, row + partitions, offset, offset + free_bytes))
            if storage is memory.storage:  # a whole tile's geometry: its layout, dtype, memory and first partition
                key = (id(layout), id(dtype), row)
                known = memory.geometries.get(key)
                if known is not None and known[0] is layout and known[1] is dtype:
                    tensor._geometry = known[2]
                elif len(memory.geometries) < MAX_LAYOUTS:
                    memory.geometries[key] = (layout, dtype, tensor.geometry)
        if alloc.spilled_free >= 0:
            if self.on_spill is not None:
                self.on_spill(tensor, alloc.spilled_free, loc)
        else:
            memory.free_when_gone(tensor, alloc.handle)
            if self.defer_poison and address is None and tensor._row_box is not None:
                alloc.tile_uid = tensor.uid
                self.unpoisoned[tensor.uid] = (storage.bytes, row, row + partitions, offset, offset + free_bytes)
        if memory.plan is not None and memory.recording:
            self._allocations[tensor.uid] = (memory, alloc.serial)
        if self.on_allocate is not None:
            self.on_allocate(tensor, address is not None)
        return tensor

    def _hbm_storage(
        self,
        shape: tuple[int, ...],
        dtype: np.dtype,
        name: str,
        loc: SourceLoc | None = None,
        written: bool = False,
        data: np.ndarray | None = None,
    ) -> Storage:
        """Bytes for an HBM tensor, refused (before any is allocated) beyond the target's HBM capacity, and when
        they are ``written`` at once (poisoned, or an input's values) beyond the memory this machine has free.

        Bytes nothing writes cost no memory until a kernel does (a shapes-only profile's tensors); ``data``,
        bytes of the :func:`_hbm_layout`, stands for them instead (a borrowed input)."""
        rows, row_bytes = _hbm_layout(shape, dtype)
        nbytes = rows * row_bytes
        capacity = self.hw.hbm.capacity_bytes
        if self.hbm_bytes + nbytes > capacity:
            raise CapacityError(
                f"HBM is full: cannot allocate {nbytes} bytes for {name} {describe(shape, dtype)}; "
                f"{capacity - self.hbm_bytes} of the {capacity} bytes of {self.hw.name}'s HBM per NeuronCore are free",
                loc=loc,
            )
        available = host_memory_available() if written and nbytes >= HOST_CHECK_BYTES else None
        if available is not None and nbytes > available:
            raise CapacityError(
                f"{name} {describe(shape, dtype)} would take {nbytes} bytes of this machine's memory to simulate "
                f"in HBM, and {available} are available; simulate a smaller size, or free memory first",
                loc=loc,
            )
        storage = Storage("hbm", rows, row_bytes, self._hbm_next_address, data)
        self._hbm_next_address += -(-nbytes // 4096) * 4096
        self.hbm_bytes += nbytes
        return storage


#: HBM tensors from this many bytes on are checked against the machine's available memory first.
HOST_CHECK_BYTES = 64 << 20

#: Inputs from this many bytes on may be read in place (:meth:`MemorySystem.hbm_tensor_from`): below it a
#: copy costs less than the run a kernel that writes its input must start again.
BORROW_BYTES = 1 << 20


#: In :attr:`MemorySystem.borrowed` (never a storage uid): a write into a borrowed input was tried.
BROKEN = -1


class BorrowedInputWritten(BaseException):  # a signal to start again, not an error of the kernel
    """An instruction would write an input that the run reads in place; the run starts again with copies.

    A ``BaseException``, so that a kernel's ``except Exception`` does not swallow it (and
    :attr:`MemorySystem.borrow_broken` records it for a kernel that catches everything).
    """


def _hbm_layout(shape: tuple[int, ...], dtype: np.dtype) -> tuple[int, int]:
    """An HBM tensor's storage shape: (rows, bytes per row), the first dimension as rows (one row for 0-1 dims)."""
    rows = max(shape[0] if len(shape) >= 2 else 1, 1)
    row_bytes = max(math.prod(shape[1:] if len(shape) >= 2 else shape) * dtype.itemsize, 1)
    return rows, row_bytes


def _borrowable(values: np.ndarray, dtype: np.dtype) -> bool:
    """Whether an input's own bytes are its HBM tensor's: of ``dtype``, C order, aligned, and large enough."""
    flags = values.flags
    return values.dtype == dtype and flags.c_contiguous and flags.aligned and values.nbytes >= BORROW_BYTES


def host_memory_available() -> int | None:
    """Bytes this process may still take: Linux's MemAvailable, or less under a cgroup (v2) limit; None if unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            available = next(int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    try:
        with open("/sys/fs/cgroup/memory.max") as limit, open("/sys/fs/cgroup/memory.current") as current:
            cap = limit.read().strip()
            if cap != "max":
                available = min(available, int(cap) - int(current.read()))
    except (OSError, ValueError):
        pass
    return available


def _check_address(
    address: object, partitions: int, free_bytes: int, memory: OnChipMemory, loc: SourceLoc | None
) -> tuple[int, int]:
    """The ``(partition_offset, free_offset)`` of ``nl.ndarray(address=...)``, checked against the memory."""
    if (
        not isinstance(address, (tuple, list))
        or len(address) != 2
        or not all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in address)
    ):
        raise OperandError(f"nl.ndarray: address {address!r} must be (partition_offset, free_offset) integers", loc=loc)
    row, col = int(address[0]), int(address[1])
    config = memory.config
    kind = memory.name.upper()
    if row < 0 or col < 0:
        raise OperandError(f"nl.ndarray: address {(row, col)} must not be negative", loc=loc)
    if row + partitions > config.partitions:
        raise CapacityError(
            f"nl.ndarray: {partitions} partitions from partition {row} exceed the {config.partitions} of {kind}",
            loc=loc,
        )
    if col + free_bytes > config.bytes_per_partition:
        raise CapacityError(
            f"nl.ndarray: {free_bytes} bytes per partition from byte {col} exceed the "
            f"{config.bytes_per_partition} bytes of a {kind} partition",
            loc=loc,
        )
    if config.banks > 1 and col % config.bank_bytes:
        raise OperandError(
            f"nl.ndarray: {kind} address byte offset {col} must be on a {config.bank_bytes}-byte bank boundary",
            loc=loc,
        )
    return row, col


def _tile_layout(shape: tuple[int, ...], dtype: np.dtype) -> tuple[int, int, tuple[int, ...]]:
    """A tile's partitions, bytes per partition and free-dim byte strides (row-major within a partition)."""
    free_strides = (dtype.itemsize,) if len(shape) == 2 else _contiguous_strides(shape[1:], dtype.itemsize)
    return shape[0], math.prod(shape[1:]) * dtype.itemsize, free_strides


def _contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides = []
    step = itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def _typed_view(storage: Storage, offset: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    flat = storage.bytes.reshape(-1)
    nbytes = math.prod(shape) * dtype.itemsize
    return flat[offset : offset + nbytes].view(dtype).reshape(shape)


def _poison(tensor: Tensor) -> np.ndarray:
    """Fill with all-ones bytes: NaN for every float type, -1 or the maximum for integers; returns the bytes filled."""
    array = tensor.array
    if array.flags.c_contiguous:
        view = array.view(np.uint8)
    else:  # an on-chip tile: the same byte range in each of its partitions
        row, col = divmod(tensor.byte_offset, tensor.storage.row_bytes)
        view = tensor.storage.bytes[row : row + tensor.partitions, col : col + tensor.free_size * tensor.itemsize]
    view.fill(0xFF)
    return view
