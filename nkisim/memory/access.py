"""DMA gather and scatter through dynamic access patterns.

DMA instructions read and write :class:`~nkisim.memory.tensor.DynamicTensor` views
through :func:`gather` and :func:`apply_dynamic`, which also implement
``oob_mode.skip``: an out-of-bounds row is dropped and its destination elements keep
their values.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nkisim.errors import BoundsError
from nkisim.memory.tensor import DynamicTensor, Tensor


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


def _read(t: Tensor, skip_oob: bool, role: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Values (a copy), per-element in-bounds mask, and flat addresses (dynamic views only)."""
    if not isinstance(t, DynamicTensor):
        return t.array.copy(), np.ones(t.shape, dtype=bool), None
    addr, ok = t.addresses()
    if not skip_oob and not ok.all():
        raise BoundsError(f"{role} {t!r}: {t.first_bad_row(ok)} is out of bounds (oob_mode.error)")
    rows = t._layout.typed_rows()
    r, c = t.locate(np.where(ok, addr, 0))
    return rows[r, c], ok, addr


def gather(src: Tensor, skip_oob: bool) -> tuple[np.ndarray, np.ndarray]:
    """The values a dynamic view reads, in its shape, and which are in bounds.

    Out-of-bounds rows raise :class:`BoundsError` unless ``skip_oob`` (then their mask is False).
    """
    values, ok, _ = _read(_resolved(src), skip_oob, "src")
    return values, ok


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
    src_values, src_ok, _ = _read(src, skip_oob, "src")
    dst_values, dst_ok, dst_addr = _read(dst, skip_oob, "dst")
    keep = dst_ok & src_ok.reshape(dst.shape)
    if dst_addr is None:
        staged = _staged(dst_values, dst)
        body(staged, _staged(src_values.reshape(dst.shape), src))
        dst.array[keep] = staged.array[keep]
        return
    assert isinstance(dst, DynamicTensor)
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
