"""DMA gather and scatter through dynamic access patterns.

DMA instructions read and write :class:`~nkisim.memory.tensor.DynamicTensor` views
through :func:`gather` and :func:`apply_dynamic`, which also implement
``oob_mode.skip``: an out-of-bounds row is dropped and its destination elements keep
their values.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from nkisim.errors import BoundsError
from nkisim.memory.tensor import DynamicTensor, Tensor, row_mask


def _staged(values: np.ndarray, like: Tensor) -> Tensor:
    """A plain tensor over ``values`` (a copy) standing in for ``like`` during one instruction."""
    return Tensor(values, like.dtype, like.buffer, like.name, like.storage, None)


def _resolved(t: Tensor) -> Tensor:
    """A ``scalar_offset`` view of an HBM tensor that lies in bounds, as the static view at the offset's value.

    Its elements are those :meth:`DynamicTensor.addresses` names (the flat allocation at the offset plus
    the pattern's steps), read through one strided view instead of gathered element by element. Anything
    else is returned as it is: views that leave the allocation (``oob_mode`` decides per row), row gathers
    by ``vector_offset``, and on-chip views.
    """
    if isinstance(t, DynamicTensor) and t._vector is None and not t._layout.on_chip:
        static = t.at_current_offset()
        if static is not None:
            return static
    return t


def _row_runs(t: DynamicTensor) -> tuple[np.ndarray, np.ndarray, int] | None:
    """The rows of a run-time-offset view of HBM as runs of the flat allocation, when each row is one.

    A row is then its first element's index (``starts``) plus the offsets of the pattern's inner dims, which
    all step forward and never name one element twice; ``span`` is the last element's offset from the first.
    Returns ``(starts, ok, span)``, ``ok`` saying which rows lie inside the allocation (the rows
    :meth:`DynamicTensor.addresses` finds in bounds), or None for any other view, which that method serves.
    """
    layout = t._layout
    if layout.on_chip:
        return None
    inner = t._pairs[1:]
    if not _one_to_one(inner):
        return None
    span = sum((num - 1) * step for step, num in inner)
    end = layout.total - span  # a row starting here or later leaves the allocation
    if end < 1:
        return None
    if t._vector is not None:
        starts = t._vector.array.reshape(-1).astype(np.int64) * t._stride + t._offset
    else:
        step, num = t._pairs[0]
        starts = np.arange(num, dtype=np.int64) * step + (t._offset + t._scalar_value() * t._stride)
    return starts, (starts >= 0) & (starts < end), span


def _one_to_one(pairs: tuple[tuple[int, int], ...]) -> bool:
    """Whether ``[[step, num], ...]`` steps forward in every dim and names each element once: from the smallest
    step up, each step is longer than the dims below it reach together (a mixed-radix numbering)."""
    reach = 0
    for step, num in sorted(pair for pair in pairs if pair[1] > 1):
        if step <= reach:
            return False
        reach += (num - 1) * step
    return True


def _read(t: Tensor, skip_oob: bool, role: str) -> tuple[np.ndarray, np.ndarray]:
    """Values (a copy) and per-element in-bounds mask; elements of rows out of bounds hold element 0's value."""
    if not isinstance(t, DynamicTensor):
        return t.array.copy(), np.ones(t.shape, dtype=bool)
    runs = _row_runs(t)
    if runs is None:
        values, ok, _ = _read_elements(t, skip_oob, role)
        return values, ok
    starts, inside, span = runs
    ok = row_mask(inside, t.shape)
    _check_bounds(t, ok, skip_oob, role)
    windows = _row_windows(t, span)
    values = windows[np.where(inside, starts, 0)]
    if not inside.all():
        values[~inside] = windows[(0,) * windows.ndim]  # element 0, as the element-wise path reads there
    return values, ok


def _read_elements(t: DynamicTensor, skip_oob: bool, role: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Values (a copy), per-element in-bounds mask and flat addresses, element by element."""
    addr, ok = t.addresses()
    _check_bounds(t, ok, skip_oob, role)
    rows = t._layout.typed_rows()
    r, c = t.locate(np.where(ok, addr, 0))
    return rows[r, c], ok, addr


def _check_bounds(t: DynamicTensor, ok: np.ndarray, skip_oob: bool, role: str) -> None:
    if not skip_oob and not ok.all():
        raise BoundsError(f"{role} {t!r}: {t.first_bad_row(ok)} is out of bounds (oob_mode.error)")


def _row_windows(t: DynamicTensor, span: int) -> np.ndarray:
    """Every run a row of ``t`` (see :func:`_row_runs`) could be, by its first element: a strided view
    of the flat allocation shaped ``(starts, *inner dims)``, in which a fancy index of starts gathers or scatters
    whole rows."""
    flat = t._layout.typed_rows().reshape(-1)
    inner = t._pairs[1:]
    size = flat.itemsize
    shape = (flat.size - span, *(num for _, num in inner))
    # a dim of one element never steps: its stride is 0 whatever its step (which may not even fit numpy's strides)
    return as_strided(flat, shape, (size, *(step * size if num > 1 else 0 for step, num in inner)))


def gather(src: Tensor, skip_oob: bool) -> tuple[np.ndarray, np.ndarray]:
    """The values a dynamic view reads, in its shape, and which are in bounds.

    Out-of-bounds rows raise :class:`BoundsError` unless ``skip_oob`` (then their mask is False).
    """
    return _read(_resolved(src), skip_oob, "src")


def apply_dynamic(dst: Tensor, src: Tensor, skip_oob: bool, body: Callable[[Tensor, Tensor], None]) -> None:
    """Run ``body(dst, src)`` (a DMA's element-wise semantics) with dynamic views resolved.

    Static tensors are passed through untouched. Otherwise ``body`` sees plain
    tensors holding the gathered elements; elements pair up in row-major order.
    Rows out of bounds raise :class:`BoundsError`, or with ``skip_oob`` are dropped
    (their destination elements keep their values). Scattered writes to one address
    apply in order, so with ``dst_rmw_op`` repeated indices accumulate.
    """
    src = _resolved(src)  # a read only: a strided destination could name one address twice
    if not (dst.is_dynamic or src.is_dynamic):
        body(dst, src)
        return
    src_values, src_ok = _read(src, skip_oob, "src")
    if not isinstance(dst, DynamicTensor):
        keep = src_ok.reshape(dst.shape)
        if keep.all():  # every element comes: straight into dst
            body(dst, _staged(src_values.reshape(dst.shape), src))
            return
        staged = _staged(dst.array.copy(), dst)
        body(staged, _staged(src_values.reshape(dst.shape), src))
        dst.array[keep] = staged.array[keep]
        return
    runs = _row_runs(dst)
    if runs is not None and _scatter_rows(dst, runs, src, src_values, src_ok, skip_oob, body):
        return
    _, dst_ok, dst_addr = _read_elements(dst, skip_oob, "dst")
    keep = dst_ok & src_ok.reshape(dst.shape)
    rows = dst._layout.typed_rows()
    positions = np.flatnonzero(keep.reshape(-1))
    flat_addr = dst_addr.reshape(-1)[positions]
    flat_src = src_values.reshape(-1)
    for wave in _waves(flat_addr):
        sel = positions[wave]
        r, c = dst.locate(flat_addr[wave])
        staged = _staged(rows[r, c], dst)
        body(staged, _staged(flat_src[sel], src))
        rows[r, c] = staged.array


def _scatter_rows(
    dst: DynamicTensor,
    runs: tuple[np.ndarray, np.ndarray, int],
    src: Tensor,
    src_values: np.ndarray,
    src_ok: np.ndarray,
    skip_oob: bool,
    body: Callable[[Tensor, Tensor], None],
) -> bool:
    """:func:`apply_dynamic` into ``dst`` whole rows at a time, when each row is written whole or not at all and
    two rows written are the same run or share no element; False (nothing done) otherwise, for the element-wise
    path. A run written again is written again in a later wave, as each of its elements would be."""
    starts, inside, span = runs
    _check_bounds(dst, row_mask(inside, dst.shape), skip_oob, "dst")
    if src.is_dynamic:
        keep = src_ok.reshape(len(starts), -1) & inside[:, None]
        kept = keep.all(axis=1)
        if not np.array_equal(kept, keep.any(axis=1)):
            return False  # a row written in part
    else:
        kept = inside  # every element of a static source comes
    picked = starts[kept]
    gaps = np.diff(np.sort(picked))
    if ((gaps > 0) & (gaps <= span)).any():
        return False  # rows that overlap in part
    windows = _row_windows(dst, span)
    values = src_values.reshape(dst.shape)
    if not kept.all():
        values = values[kept]
    waves = _waves(picked) if (gaps == 0).any() else [slice(None)]  # no run repeats: one wave
    for wave in waves:
        rows = picked[wave]
        staged = _staged(windows[rows], dst)
        body(staged, _staged(values[wave], src))
        windows[rows] = staged.array
    return True


def _waves(addr: np.ndarray) -> list[np.ndarray]:
    """Split positions into groups of distinct addresses: the k-th write to each address goes in group k."""
    if addr.size == 0:
        return []
    order = np.argsort(addr, kind="stable")
    sorted_addr = addr[order]
    starts = np.r_[True, sorted_addr[1:] != sorted_addr[:-1]]
    group_start = np.maximum.accumulate(np.where(starts, np.arange(addr.size), 0))
    rank = np.empty(addr.size, dtype=np.int64)
    rank[order] = np.arange(addr.size) - group_start
    return [np.flatnonzero(rank == k) for k in range(int(rank.max()) + 1)]
