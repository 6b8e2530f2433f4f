"""After the members ran: partitions of the index space, and the footprint checks of what each member touched.

* **Partition.** ``contiguous``: the hardware-like split of the index space into one box per TPC
  (the largest dimensions first). ``shuffle``: Habana's test-harness split into at most 32 boxes by
  repeated halving, run in a random order spread over the TPCs, to expose order dependence.
* **Access patterns.** Each vector access of a tensor must lie inside ``a*i + [start_b, end_b]``
  for the member's index-space range ``i`` in every dimension (accesses clipped to the tensor; an
  ``allRequired`` tensor is not checked).
* **Races.** Members run in any order and concurrently: no member may read or write elements
  another member writes.
* **Coverage.** Every element of every output is written by some member.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from nkisim.errors import SourceLoc
from nkisim.tpc.errors import TpcAccessPatternError, TpcRaceError, TpcUnwrittenOutputError
from nkisim.tpc.glue import TensorAccessPattern
from nkisim.tpc.tape import row_base
from nkisim.tpc.trace import AccessLog
from nkisim.tpc.values import TensorState, progression


def _split(n: int, parts: int) -> list[tuple[int, int]]:
    """``n`` points in ``parts`` contiguous chunks (sizes differ by at most one): (start, size)."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for k in range(parts):
        size = base + (k < extra)
        out.append((start, size))
        start += size
    return out


def partition(geometry: list[int], tpcs: int, order: str, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Boxes ``(offset, size)`` (int5 each) covering the index space, in the order they run."""
    geo = np.ones(5, dtype=np.int64)
    geo[: len(geometry)] = geometry
    if order == "contiguous":
        factors = [1] * 5
        remaining = tpcs
        for d in sorted(range(5), key=lambda d: (-geo[d], -d)):
            f = int(min(geo[d], remaining))
            factors[d] = max(f, 1)
            remaining //= max(f, 1)
            if remaining <= 1:
                break
        chunks = [_split(int(geo[d]), factors[d]) for d in range(5)]
        boxes = []
        for combo in itertools.product(*reversed(chunks)):
            parts = combo[::-1]
            boxes.append((np.array([p[0] for p in parts]), np.array([p[1] for p in parts])))
        return boxes
    boxes = [(np.zeros(5, dtype=np.int64), geo.copy())]
    while len(boxes) < 32:  # halve the box with the longest dimension, along it
        k = max(range(len(boxes)), key=lambda i: int(boxes[i][1].max()))
        off, size = boxes[k]
        d = int(np.argmax(size))
        if size[d] < 2:
            break
        half = size[d] // 2
        s1, s2, o2 = size.copy(), size.copy(), off.copy()
        s1[d], s2[d] = half, size[d] - half
        o2[d] += half
        boxes[k : k + 1] = [(off, s1), (o2, s2)]
    rng = np.random.default_rng(seed)
    return [boxes[i] for i in rng.permutation(len(boxes))]


@numba.njit(cache=True)
def _owners(
    owner: np.ndarray,
    coords: np.ndarray,
    member: np.ndarray,
    sizes: np.ndarray,
    strides: np.ndarray,
    lanes: int,
    mode: int,
) -> int:  # pragma: no cover
    """One pass over the in-bounds elements of the accesses ``coords`` (members ``member``) of a tensor.

    ``mode`` 0 marks each element with its member (the last access wins) and returns -1; mode 1
    finds an element owned by another member than the access's, mode 2 one owned by another member
    (not -1). Returns ``row * owner.size + element`` of the first such access, or -1.
    """
    for i in range(coords.shape[0]):
        inside, base = row_base(coords, i, sizes, strides)
        if not inside:
            continue
        m = member[i]
        for j in range(lanes):
            e = coords[i, 0] + j
            if e < 0 or e >= sizes[0]:
                continue
            o = owner[base + e]
            if mode == 0:
                owner[base + e] = m
            elif o != m and (mode == 1 or o >= 0):
                return i * owner.size + base + e
    return -1


def _own(
    owner: np.ndarray, coords: np.ndarray, member: np.ndarray, sizes: np.ndarray, strides: np.ndarray, lanes: int
) -> int:
    """Mark each element the stores write with its member (the last store wins), then find a write-write race.

    Returns ``row * owner.size + element`` of the first store (in program order) whose element ends
    up owned by another member, or -1.
    """
    _owners(owner, coords, member, sizes, strides, lanes, 0)
    return _owners(owner, coords, member, sizes, strides, lanes, 1)


def _foreign(
    owner: np.ndarray, coords: np.ndarray, member: np.ndarray, sizes: np.ndarray, strides: np.ndarray, lanes: int
) -> int:
    """The first load (``row * owner.size + element``) of an element another member writes, or -1."""
    return _owners(owner, coords, member, sizes, strides, lanes, 2)


@numba.njit(cache=True)
def _patterns_ok(
    rows: np.ndarray,
    coords: np.ndarray,
    member: np.ndarray,
    lanes: np.ndarray,
    sizes: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    checked: np.ndarray,
) -> bool:  # pragma: no cover
    """Every access ``rows`` of a tensor (clipped to it) inside its member's range, per checked dim.

    ``low[m, d]``..``high[m, d]``: the elements of dim ``d`` member ``m`` may touch (``a*i + [start_b, end_b]``).
    """
    for i in rows:
        inside = True
        for d in range(5):
            f = coords[i, d]
            e = f + (lanes[i] - 1 if d == 0 else 0)
            if (f if f > 0 else 0) > (e if e < sizes[d] - 1 else sizes[d] - 1):
                inside = False
                break
        if not inside:
            continue
        m = member[i]
        for d in range(checked.shape[0]):
            if not checked[d]:
                continue
            f = coords[i, d]
            e = f + (lanes[i] - 1 if d == 0 else 0)
            if (f if f > 0 else 0) < low[m, d] or (e if e < sizes[d] - 1 else sizes[d] - 1) > high[m, d]:
                return False
    return True


class Footprint:
    """The logged accesses of a run, as arrays, and the checks over them."""

    def __init__(self, access: AccessLog, tensors: list[TensorState], where: dict[str, Any]) -> None:
        self.access = access
        self.tensors = tensors
        self.rows = (
            {
                "tensor": access.tensor,
                "member": access.member,
                "coords": access.coords,
                "lanes": access.lanes,
                "store": access.store,
            }
            if len(access)
            else None
        )
        self.where = where  # kernel, device, kernel loc, member -> tpc
        # [tensor, is store]: the number of accesses
        found = np.bincount(access.tensor * 2 + access.store, minlength=2 * len(tensors)) if len(access) else None
        self._per = np.zeros((len(tensors), 2), dtype=np.int64) if found is None else found.reshape(-1, 2)
        self._selected: dict[tuple[int, bool], np.ndarray] = {}

    def _error(self, cls: type, rule: str, loc: SourceLoc, member: int | None = None) -> Exception:
        w = self.where
        tpc = None if member is None else w["tpc_of"][member]
        return cls(rule, loc=loc, kernel=w["kernel"], tpc=tpc, member=member, device=w["device"])

    def counts(self, store: bool) -> dict[int, int]:
        """Vector loads (or stores) per tensor."""
        return {i: int(c) for i, c in enumerate(self._per[:, int(store)]) if c}

    def _select(self, t: int, store: bool) -> np.ndarray:
        """The access rows of tensor ``t``'s loads (or stores)."""
        key = (t, store)
        if key not in self._selected:
            r = self.rows
            assert r is not None
            self._selected[key] = np.flatnonzero((r["tensor"] == t) & (r["store"] == store))
        return self._selected[key]

    def check_patterns(self, patterns: dict[int, TensorAccessPattern], lo: np.ndarray, hi: np.ndarray) -> None:
        """Every access inside its member's declared range, dimension by dimension."""
        if self.rows is None:
            return
        r = self.rows
        for t, pattern in patterns.items():
            if pattern.allRequired:
                continue
            sel = np.flatnonzero(r["tensor"] == t)
            if not sel.size:
                continue
            sizes = self.tensors[t].sizes
            maps = pattern.mapping[:5]
            checked = np.array(
                [
                    not (sizes[d] == 1 and d > 0 and m.a == 0 and m.start_b == 0 and m.end_b == 0)
                    for d, m in enumerate(maps)
                ],
                dtype=np.bool_,
            )
            low = np.zeros((lo.shape[0], len(maps)))
            high = np.zeros((lo.shape[0], len(maps)))
            for d, m in enumerate(maps):
                a, j = np.float64(m.a), m.indexSpaceDim
                low[:, d] = a * lo[:, j] + np.float64(m.start_b)
                high[:, d] = a * (hi[:, j] - 1) + np.float64(m.end_b)
            if _patterns_ok(sel, r["coords"], r["member"], r["lanes"], sizes, low, high, checked):
                continue  # the common case; the numpy pass below finds and describes the violation
            coords, member, lanes = r["coords"][sel].astype(np.int64), r["member"][sel], r["lanes"][sel]
            first = coords.copy()
            last = coords.copy()
            last[:, 0] += lanes - 1
            first = np.maximum(first, 0)
            last = np.minimum(last, sizes - 1)
            inside = np.all(first <= last, axis=1)
            for d, m in enumerate(pattern.mapping[:5]):
                if sizes[d] == 1 and d > 0 and m.a == 0 and m.start_b == 0 and m.end_b == 0:
                    continue
                j = m.indexSpaceDim
                allowed_lo = m.a * lo[member, j] + m.start_b
                allowed_hi = m.a * (hi[member, j] - 1) + m.end_b
                bad = inside & ((first[:, d] < allowed_lo) | (last[:, d] > allowed_hi))
                if bad.any():
                    k = int(np.flatnonzero(bad)[0])
                    row = int(sel[k])
                    kind = "writes" if r["store"][row] else "reads"
                    mb = int(member[k])
                    raise self._error(
                        TpcAccessPatternError,
                        f"{kind} tensor {t} dim {d} elements {int(first[k, d])}..{int(last[k, d])}, outside its access "
                        f"pattern a*i + [start_b, end_b] = {m.a:g}*i + [{m.start_b:g}, {m.end_b:g}] over index-space "
                        f"dim {j} i = {int(lo[mb, j])}..{int(hi[mb, j]) - 1} "
                        f"(allowed {allowed_lo[k]:g}..{allowed_hi[k]:g})",
                        self.access.loc(row),
                        mb,
                    )

    def _elements(self, t: int, store: bool) -> tuple[np.ndarray, np.ndarray, Callable[[int], int]]:
        """Flat elements a tensor's loads (or stores) touch in bounds, their members, and ``k -> access row``."""
        r = self.rows
        assert r is not None
        sel = self._select(t, store)
        if not sel.size:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, int
        lanes = int(r["lanes"][sel[0]])
        index, ok = self.tensors[t].elements(r["coords"][sel], lanes)
        member = np.broadcast_to(r["member"][sel][:, None], index.shape)
        if ok is None:
            return index.reshape(-1), member.reshape(-1), lambda k: int(sel[k // lanes])
        return index[ok], member[ok], lambda k: int(np.broadcast_to(sel[:, None], index.shape)[ok][k])

    def _rows(self, t: int, store: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """Access rows of tensor ``t``'s loads (or stores): their numbers, coordinates, members, and the lanes."""
        r = self.rows
        assert r is not None
        sel = self._select(t, store)
        lanes = int(r["lanes"][sel[0]]) if sel.size else 0
        return sel, r["coords"][sel], r["member"][sel], lanes

    def check_races(self) -> dict[int, np.ndarray | None]:
        """No member touches what another writes; returns each written tensor's owner map (member per element, -1).

        The map is None for a tensor whose every element is written exactly once and never read
        (the usual output): its stores, in program order, are consecutive vectors filling it.
        """
        written: dict[int, np.ndarray | None] = {}
        if self.rows is None:
            return written
        for t in np.flatnonzero(self._per[:, 1]).tolist():
            tensor = self.tensors[t]
            if not self._per[t, 0]:
                rows = self._select(t, True)
                lanes = int(self.access.lanes[rows[0]])
                regular, first, step = progression(self.access.coords, rows, tensor.sizes, tensor.strides, lanes)
                if regular and first == 0 and step == lanes and rows.size * lanes == tensor.data.size:
                    written[t] = None
                    continue
            rows, coords, member, lanes = self._rows(t, True)
            owner = np.full(tensor.data.size, -1, dtype=np.int32)
            bad = _own(owner, coords, member, tensor.sizes, tensor.strides, lanes)
            if bad >= 0:
                i, element = divmod(bad, tensor.data.size)
                other = int(owner[element])
                raise self._error(
                    TpcRaceError,
                    f"writes tensor {t} element {self._coords(t, element)} that member {other} "
                    f"(TPC {self.where['tpc_of'][other]}) also writes: members run in any order, so the result "
                    "depends on the order",
                    self.access.loc(int(rows[i])),
                    int(member[i]),
                )
            l_rows, l_coords, l_member, l_lanes = self._rows(t, False)
            bad = _foreign(owner, l_coords, l_member, tensor.sizes, tensor.strides, l_lanes)
            if bad >= 0:
                i, element = divmod(bad, tensor.data.size)
                other = int(owner[element])
                w_idx, w_mem, w_row = self._elements(t, True)
                store_k = int(np.flatnonzero((w_idx == element) & (w_mem == other))[0])
                store_at = self.access.loc(w_row(store_k))
                raise self._error(
                    TpcRaceError,
                    f"store-then-load race: loads tensor {t} element {self._coords(t, element)} that member "
                    f"{other} (TPC {self.where['tpc_of'][other]}) stores at {store_at}; members run in any order "
                    "and concurrently, so a member must not read what another writes",
                    self.access.loc(int(l_rows[i])),
                    int(l_member[i]),
                )
            written[t] = owner
        return written

    def check_coverage(self, outputs: list[int], written: dict[int, np.ndarray | None]) -> None:
        """Every element of every output written by some member (``written``: the owner maps, None: all written)."""
        for t in outputs:
            owner = written.get(t)
            size = self.tensors[t].data.size
            if (t in written and owner is None) or (owner is not None and (size == 0 or int(owner.min()) >= 0)):
                continue
            missing = np.flatnonzero(owner < 0) if owner is not None else np.arange(size)
            raise self._error(
                TpcUnwrittenOutputError,
                f"{missing.size} of {size} elements of output tensor {t} were written by no member "
                f"(the first at {self._coords(t, int(missing[0]))}, TPC order dim0 first): check the index space "
                "and the kernel's loops",
                self.where["loc"],
            )

    def _coords(self, t: int, flat: int) -> list[int]:
        tensor = self.tensors[t]
        rank = max(1, tensor.data.ndim)
        return [int(flat // int(tensor.strides[d]) % int(tensor.sizes[d])) for d in range(rank)]
