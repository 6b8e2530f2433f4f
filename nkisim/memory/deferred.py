"""DMA loads whose copy waits: a new SBUF tile loaded whole from HBM keeps its values in HBM until it is used.

A kernel's loads copy an HBM block into a new tile that the next instruction reads once (``a + b`` by tiles reads
each loaded tile once). The copy writes the tile's bytes, which that instruction reads back. Instead, the copy is
kept as a pending entry, and an instruction that reads the whole tile by the tile itself, and whose semantics use
only the values they read (``InstructionSpec.reads_values``), is given the HBM view in its place. Every other use
of the tile's bytes makes the copy first:

* an instruction that writes the tile, reads a view of it, or whose semantics may depend on where or how its
  operands lie (every instruction without ``reads_values``, whose checks run on the tile's own bytes);
* a write to the HBM tensor the values wait in;
* anything outside an instruction (``Machine.store``, ``Machine.effect``, views at run-time offsets, registers),
  through :meth:`nkisim.memory.system.MemorySystem.settle_pending`.

A tile freed while its copy waits drops it: the next tile over those bytes is a new automatic tile whose poison
is made before anything reads it, or a placed one, poisoned when allocated, so the bytes the copy would have
written are never seen. Only automatic tiles of a one-core run wait (the memory system's ``defer_poison``):
live automatic tiles never share bytes, so an entry speaks for every byte of its tile.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from nkisim.memory.dtypes import container
from nkisim.memory.space import ON_CHIP_BUFFERS
from nkisim.memory.tensor import Tensor


class DeferredCopies(dict[int, tuple[np.ndarray, Tensor, bool]]):
    """The copies not made yet, by tile uid: the tile's array, the HBM view (in the tile's shape) holding its
    values, and whether an instruction read that view already: the second read makes the copy, so that a tile
    read many times is read from its own bytes, as a plain run reads it (one copy, and no substitute each time).
    """

    def defer(self, dst: Tensor, src: Tensor) -> bool:
        """Keep ``src``'s values for the whole tile ``dst`` (same dtype and element count) without copying them;
        False (nothing kept) when ``src`` has no view in ``dst``'s shape whose elements lie in the tile's order."""
        if src.shape != dst.shape:
            values = src.array.reshape(dst.shape)
            if not np.may_share_memory(values, src.array):  # numpy had to copy: keep to the copy
                return False
            src = Tensor(values, src.dtype, src.buffer, src.name, src.storage, src._base or src)
        if not _in_row_major_order(src.array):
            return False
        self[dst.uid] = (dst.array, src, False)
        return True

    def make(self, uid: int) -> None:
        """Copy one tile's values into its bytes (if still pending)."""
        entry = self.pop(uid, None)
        if entry is not None:
            _copy(entry[0], entry[1])

    def make_all(self) -> None:
        """Copy every pending tile's values into its bytes."""
        while self:  # one at a time: a tile the garbage collector frees meanwhile takes its own out
            dst, src, _ = self.popitem()[1]
            _copy(dst, src)

    def settle(
        self,
        ops: Any,
        reads_values: bool,
        reads: Iterable[tuple[str, Tensor]],
        writes: Iterable[tuple[str, Tensor]],
    ) -> dict[str, Tensor] | None:
        """Make the copies an instruction needs before it runs; the operands to give it in place of waiting tiles.

        ``reads_values``: the semantics use only the values of the operands they read (see module docstring).
        Returns ``{operand name: HBM view}`` for the whole tiles read whose values still wait, or None.
        """
        if not reads_values:
            self.make_all()
            return None
        for _, t in writes:
            if t.uid in self:
                self.make(t.uid)
            elif t.buffer not in ON_CHIP_BUFFERS:  # an HBM write: the values waiting in that tensor are copied first
                storage = t.storage
                # the keys alone: a list of them makes no new object, so no collection can free a tile meanwhile
                for uid in list(self):
                    entry = self.get(uid)
                    if entry is not None and entry[1].storage is storage:
                        self.make(uid)
        substitutes: dict[str, Tensor] = {}
        read: list[int] = []
        for name, t in reads:
            entry = self.get(t.uid)
            if entry is None:
                continue
            if not entry[2] and t._base is None and getattr(ops, name, None) is t:  # the tile itself, read first
                substitutes[name] = entry[1]
                read.append(t.uid)
            else:
                self.make(t.uid)
        for uid in read:  # read once now: the next read makes the copy
            entry = self.get(uid)
            if entry is not None:
                self[uid] = (entry[0], entry[1], True)
        return substitutes or None  # still right if a view of the same tile made its copy: HBM is unchanged


def _in_row_major_order(array: np.ndarray) -> bool:
    """Whether ``array``'s elements lie in memory in row-major order, as a tile's do (steps positive and falling
    over the dims longer than one, gaps allowed). numpy lays out what it computes from a view in the view's
    memory order, and a sum or a matrix product over another order rounds otherwise: a transposed HBM view may
    not stand for a tile."""
    last = None
    for size, stride in zip(array.shape, array.strides):
        if size > 1:
            if stride <= 0 or (last is not None and stride >= last):
                return False
            last = stride
    return True


def _copy(dst: np.ndarray, src: Tensor) -> None:
    words = container(dst.dtype)
    dst.view(words)[...] = src.array.view(words)
