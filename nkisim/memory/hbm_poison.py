"""The poison of a new HBM tensor, made late: only in the bytes no instruction set first.

A kernel's output is poisoned when it is allocated (NaN where nothing writes it), then
written block by block: for a large output that is a pass over all its bytes that the
writes undo. In a run on one core, where every use of HBM goes through an instruction,
:class:`PendingPoison` keeps instead the boxes of bytes the instructions set whole (a
static block view, rows x bytes, of an instruction that sets all of its ``dst``). The
poison is made outside those boxes when something else comes: the first instruction that
reads the tensor, or writes it otherwise (a strided, partial or run-time-offset write), a
value set outside any instruction, and the end of the run, before its outputs are read.
The bytes are the same as with the poison made first: only the order of the writes moves.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: Boxes a pending poison keeps at most (after merging neighbours); one more makes the poison at once.
MAX_BOXES = 1024


class PendingPoison:
    """The poison still to be made in ``data`` (an HBM tensor's ``rows x row_bytes`` bytes), around ``boxes``."""

    __slots__ = ("boxes", "data", "last")

    def __init__(self, data: np.ndarray) -> None:
        self.data = data
        #: ``(r0, r1, b0, b1)``: bytes instructions set whole since the tensor was made (they may overlap).
        self.boxes: set[tuple[int, int, int, int]] = set()
        self.last: tuple[int, int, int, int] | None = None  # the latest box, which the next may extend

    def wrote(self, box: tuple[int, int, int, int]) -> bool:
        """An instruction sets every byte of ``box``; False once there are too many boxes to keep (make it now)."""
        boxes, last = self.boxes, self.last
        if box in boxes:
            return True
        merged = None
        if last is not None:  # the latest box extended by this one stands for both
            r0, r1, b0, b1 = last
            if box[0] == r0 and box[1] == r1 and box[2] == b1:  # the next block of the same rows
                merged = (r0, r1, b0, box[3])
            elif box[2] == b0 and box[3] == b1 and box[0] == r1:  # the next rows of the same bytes
                merged = (r0, box[1], b0, b1)
        if merged is not None:
            boxes.discard(last)
            box = merged
        elif len(boxes) >= MAX_BOXES:
            return False
        boxes.add(box)
        self.last = box
        return True

    def make(self, filled: Callable[[np.ndarray], None]) -> None:
        """Fill every byte outside the boxes with 0xFF, telling ``filled`` of each view filled."""
        data = self.data
        if not self.boxes:
            data.fill(0xFF)
            filled(data)
            return
        rows, row_bytes = data.shape
        ys = sorted({0, rows, *(b[0] for b in self.boxes), *(b[1] for b in self.boxes)})
        xs = sorted({0, row_bytes, *(b[2] for b in self.boxes), *(b[3] for b in self.boxes)})
        y_at = {y: i for i, y in enumerate(ys)}
        x_at = {x: i for i, x in enumerate(xs)}
        covered = np.zeros((len(ys) - 1, len(xs) - 1), dtype=bool)  # cells between consecutive edges
        for r0, r1, b0, b1 in self.boxes:
            covered[y_at[r0] : y_at[r1], x_at[b0] : x_at[b1]] = True
        bands = np.flatnonzero(~covered.all(axis=1))
        for band in bands.tolist():
            # runs of uncovered cells in this band of rows: edges where the padded row changes
            flags = np.concatenate(([True], covered[band], [True]))
            edges = np.flatnonzero(flags[1:] != flags[:-1]).tolist()
            y0, y1 = ys[band], ys[band + 1]
            for start, stop in zip(edges[0::2], edges[1::2]):
                view = data[y0:y1, xs[start] : xs[stop]]
                view.fill(0xFF)
                filled(view)
