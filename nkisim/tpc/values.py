"""The tensors of a run, and the values of its evaluated entries, kept per group.

:meth:`nkisim.tpc.trace.Trace.flush` evaluates entries in *groups* (one opcode at one dataflow
depth, of every member at once); :class:`Values` keeps each group's results as one ``(rows, lanes)``
array and knows, for every entry, its group and row. An operand that is a whole group, or an evenly
stepping run of one group's rows, is a view of it, so a pipeline of groups copies nothing.

Tensor loads that step evenly inside a tensor (the usual grid walk) are views of the tensor; before
a store writes a tensor, the values still viewing it are copied. Stores that fill disjoint vectors
evenly are one slice assignment, and when all of a tensor's stores in a flush write the values of
one elementwise group, in order, that group is computed straight into the tensor. Anything else
takes a compiled gather or scatter. Results are the same either way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from nkisim.tpc.semantics import INTO
from nkisim.tpc.tape import SCALAR, row_base
from nkisim.tpc.types import BY_CODE, VType

#: ``fn(args, statics) -> lanes``: the batched numpy semantics of one operation (rows = vectors).
Semantics = Callable[[list[np.ndarray], tuple[Any, ...]], np.ndarray]

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
#: Groups of at most this many rows go to their type's pool when they are made (others when needed).
_SMALL = 256


@dataclass
class TensorState:
    """One kernel tensor: its data as a flat array, its TPC shape (dim0 first) and pad value.

    Attributes:
        index: its number among the kernel's tensors (inputs, outputs, auxiliary).
        data: the numpy array (C order; its last axis is TPC dim0).
        vtype: the vector type that loads it.
        sizes: the TPC sizes, dim0 first, padded to 5 dims with 1.
        strides: element strides per TPC dim.
        pad: the value out-of-bounds loads return.
        role: ``input``, ``output`` or ``aux``.
        owned: ``data`` is the run's own array; otherwise it is the caller's, and the first store
            to the tensor copies it (an input no kernel writes is never copied).
    """

    index: int
    data: np.ndarray
    vtype: VType
    sizes: np.ndarray
    strides: np.ndarray
    pad: float
    role: str
    owned: bool = True

    @classmethod
    def make(cls, index: int, data: np.ndarray, vtype: VType, pad: float, role: str, owned: bool = True) -> TensorState:
        sizes = np.ones(5, dtype=np.int64)
        dims = data.shape[::-1]
        sizes[: len(dims)] = dims
        strides = np.concatenate(([1], np.cumprod(sizes[:-1]))).astype(np.int64)
        return cls(index, data, vtype, sizes, strides, pad, role, owned)

    @property
    def flat(self) -> np.ndarray:
        return self.data.reshape(-1)

    def own(self) -> bool:
        """Make ``data`` the run's own copy before it is written; whether it was the caller's until now."""
        if self.owned:
            return False
        self.data, self.owned = self.data.copy(), True
        return True

    def elements(self, coords: np.ndarray, lanes: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Flat indices ``(n, lanes)`` of vector accesses at ``coords`` ``(n, 5)``, and which are in bounds.

        The mask is None when every lane of every access is in bounds (the common case).
        """
        coords = coords.astype(np.int64)
        sizes = self.sizes
        d0 = coords[:, 0]
        inside = np.all((coords[:, 1:] >= 0) & (coords[:, 1:] < sizes[1:]), axis=1)
        base = coords[:, 1:] @ self.strides[1:]
        index = (base + d0)[:, None] + np.arange(lanes)
        if inside.all() and d0.min(initial=0) >= 0 and d0.max(initial=0) + lanes <= sizes[0]:
            return index, None
        dim0 = d0[:, None] + np.arange(lanes)
        return index, (dim0 >= 0) & (dim0 < sizes[0]) & inside[:, None]


@numba.njit(cache=True)
def progression(
    coords: np.ndarray, rows: np.ndarray, sizes: np.ndarray, strides: np.ndarray, lanes: int
) -> tuple[bool, int, int]:  # pragma: no cover
    """Whether the accesses at ``coords[rows]`` lie wholly inside the tensor at flat offsets ``first + i * step``.

    Returns (that, first, step).
    """
    first = 0
    step = 0
    for i in range(rows.shape[0]):
        inside, base = row_base(coords, rows[i], sizes, strides)
        d0 = coords[rows[i], 0]
        if not inside or d0 < 0 or d0 + lanes > sizes[0]:
            return False, 0, 0
        b = base + d0
        if i == 0:
            first = b
        elif i == 1:
            step = b - first
        elif b != first + i * step:
            return False, 0, 0
    return True, first, step


@numba.njit(cache=True)
def row_step(entries: np.ndarray, group: np.ndarray, row: np.ndarray) -> tuple[int, int, int, int]:  # pragma: no cover
    """Where the values of ``entries`` are: (their group, or -1 if several; first row; step; repeat).

    In one group, either the rows step evenly (``first + i * step``, repeat 1), or each of
    consecutive rows comes ``repeat`` times over (``first + i // repeat``, step 1), or neither
    (repeat 0).
    """
    n = entries.shape[0]
    g, first = group[entries[0]], row[entries[0]]
    step = row[entries[1]] - first if n > 1 else 1
    even = True
    for i in range(1, n):
        e = entries[i]
        if group[e] != g:
            return -1, 0, 0, 0
        if row[e] != first + i * step:
            even = False
    if even:
        return g, first, step, 1
    repeat = 1
    while repeat < n and row[entries[repeat]] == first:
        repeat += 1
    if repeat < 2 or n % repeat:
        return g, first, 0, 0
    for i in range(n):
        if row[entries[i]] != first + i // repeat:
            return g, first, 0, 0
    return g, first, 1, repeat


@numba.njit(cache=True)
def unpooled(entries: np.ndarray, group: np.ndarray, base: np.ndarray) -> np.ndarray:  # pragma: no cover
    """The groups holding values of ``entries`` that are not in their type's pool yet (each once)."""
    found = np.empty(entries.shape[0], dtype=np.int64)
    n = 0
    for i in range(entries.shape[0]):
        g = group[entries[i]]
        if base[g] < 0:
            seen = False
            for j in range(n):
                if found[j] == g:
                    seen = True
                    break
            if not seen:
                found[n] = g
                n += 1
    return found[:n]


@numba.njit(cache=True)
def pool_rows(
    pool: np.ndarray, base: np.ndarray, entries: np.ndarray, group: np.ndarray, row: np.ndarray
) -> tuple[bool, np.ndarray]:  # pragma: no cover
    """The values of ``entries`` from their type's pool (row ``base[group] + row`` each), if all are there."""
    out = np.empty((entries.shape[0], pool.shape[1]), dtype=pool.dtype)
    for i in range(entries.shape[0]):
        e = entries[i]
        b = base[group[e]]
        if b < 0:
            return False, out[:0]
        r = b + row[e]
        for j in range(pool.shape[1]):
            out[i, j] = pool[r, j]
    return True, out


@numba.njit(cache=True)
def gather(
    out: np.ndarray,
    coords: np.ndarray,
    rows: np.ndarray,
    flat: np.ndarray,
    sizes: np.ndarray,
    strides: np.ndarray,
    lanes: int,
    pad: np.ndarray,
) -> None:  # pragma: no cover
    """Vector loads: ``out[i, :lanes]`` from ``flat`` at ``coords[rows[i]]``; out-of-bounds lanes get ``pad[0]``."""
    for i in range(out.shape[0]):
        inside, base = row_base(coords, rows[i], sizes, strides)
        d0 = coords[rows[i], 0]
        if inside and d0 >= 0 and d0 + lanes <= sizes[0]:
            for j in range(lanes):
                out[i, j] = flat[base + d0 + j]
        else:
            for j in range(lanes):
                e = d0 + j
                out[i, j] = flat[base + e] if inside and e >= 0 and e < sizes[0] else pad[0]


@numba.njit(cache=True)
def scatter(
    values: np.ndarray,
    coords: np.ndarray,
    rows: np.ndarray,
    flat: np.ndarray,
    sizes: np.ndarray,
    strides: np.ndarray,
    lanes: int,
) -> None:  # pragma: no cover
    """Vector stores in order: ``values[i, :lanes]`` to ``flat`` at ``coords[rows[i]]``, out-of-bounds lanes culled."""
    for i in range(values.shape[0]):
        inside, base = row_base(coords, rows[i], sizes, strides)
        if not inside:
            continue
        d0 = coords[rows[i], 0]
        if d0 >= 0 and d0 + lanes <= sizes[0]:
            for j in range(lanes):
                flat[base + d0 + j] = values[i, j]
            continue
        for j in range(lanes):
            e = d0 + j
            if e >= 0 and e < sizes[0]:
                flat[base + e] = values[i, j]


class Values:
    """The values of a trace's evaluated entries, per group, and the loads and stores of its tensors.

    Attributes:
        tensors: the run's tensors.
        semantics: the batched semantics, by id.
        arrays: each group's values (row ``i`` is the value of the group's ``i``-th entry).
        group, row: per entry, its group and row (for the entries evaluated so far).
        views: tensor -> groups whose values may view it (copied before the tensor is written).
    """

    def __init__(self, tensors: list[TensorState], semantics: list[Semantics]) -> None:
        self.tensors = tensors
        self.semantics = semantics
        self.arrays: list[np.ndarray] = []
        self.group = np.zeros(0, dtype=np.int64)
        self.row = np.zeros(0, dtype=np.int64)
        self.views: dict[int, list[int]] = {}
        self.codes: list[int] = []  # each group's type code
        self.pools: dict[int, tuple[np.ndarray, int]] = {}  # type code -> (rows, rows used)
        self.base = np.zeros(0, dtype=np.int64)  # per group, its first row in its type's pool (-1: not there)

    def grow(self, cap: int) -> None:
        """Room for ``cap`` entries."""
        old = self.group.shape[0]
        if cap > old:
            for name in ("group", "row"):
                grown = np.empty(cap, dtype=np.int64)
                grown[:old] = getattr(self, name)
                setattr(self, name, grown)

    def add(self, ids: np.ndarray, values: np.ndarray, code: int) -> None:
        """``values`` (rows in the order of ``ids``, of type ``code``) become the values of the entries ``ids``."""
        g = len(self.arrays)
        self.arrays.append(values)
        self.codes.append(code)
        if g == self.base.shape[0]:
            self.base = np.concatenate((self.base, np.full(max(g, 64), -1, dtype=np.int64)))
        self.group[ids] = g
        self.row[ids] = np.arange(ids.shape[0])
        if ids.shape[0] <= _SMALL:  # pooled at once: small groups are usually gathered together
            self._pool(g)
        for tensor in self.views:
            if np.may_share_memory(values, self.tensors[tensor].data):
                self.views[tensor].append(g)

    def rows(self, entries: np.ndarray, code: int, repeated: bool = False) -> tuple[np.ndarray, int]:
        """The values of ``entries`` (of type ``code``) as rows, a view of their group's values when they can be.

        With ``repeated``, rows that each come ``k`` times over in a row are given once, with ``k``;
        otherwise (and by default) the count is 1. A few rows from pooled groups are copied out of the
        pool in one pass.
        """
        if entries.shape[0] <= _SMALL and code in self.pools:
            found, out = pool_rows(self.pools[code][0], self.base, entries, self.group, self.row)
            if found:
                return out.view(BY_CODE[code].dtype), 1
        g, first, step, repeat = row_step(entries, self.group, self.row)
        if g >= 0:
            values, n = self.arrays[g], entries.shape[0]
            if repeat > 1 and repeated:
                return values[first : first + n // repeat], repeat
            if repeat == 1 and step == 1 and first == 0 and n == values.shape[0]:
                return values, 1
            if repeat == 1 and step >= 1:
                return values[first : first + step * (n - 1) + 1 : step], 1
            return values[self.row[entries]], 1
        dtype = BY_CODE[code].dtype
        pooled = self.pools.get(code)
        if pooled is not None:
            found, out = pool_rows(pooled[0], self.base, entries, self.group, self.row)
            if found:
                return out.view(dtype), 1
        for g in unpooled(entries, self.group, self.base).tolist():
            self._pool(g)
        return pool_rows(self.pools[code][0], self.base, entries, self.group, self.row)[1].view(dtype), 1

    def _pool(self, g: int) -> None:
        """Copy group ``g``'s values to its type's pool (where operands drawn from several groups are gathered).

        A pool holds the values' bits (bfloat16 is not a numba type).
        """
        values, code = self.arrays[g], self.codes[g]
        bits = values.view(_UINT[values.itemsize])
        pool, used = self.pools.get(code, (None, 0))
        n = values.shape[0]
        if pool is None or used + n > pool.shape[0]:
            grown = np.empty((max(2 * used + n, 1024), values.shape[1]), dtype=bits.dtype)
            if pool is not None:
                grown[:used] = pool[:used]
            pool = grown
        pool[used : used + n] = bits
        self.pools[code] = (pool, used + n)
        self.base[g] = used

    def operand(self, column: Any, kind: int) -> np.ndarray:
        """One operand of a group: ``column`` holds entries (``kind`` a type code) or scalars (``SCALAR - code``)."""
        if kind >= 0:
            return self.rows(np.asarray(column, dtype=np.int64), kind)[0]
        dtype = BY_CODE[SCALAR - kind].dtype
        values = np.array(column, dtype=np.float64 if dtype.kind in "fV" else np.int64)
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            values = np.clip(values, info.min, info.max)
        return values.astype(dtype)[:, None]

    def run(self, ids: np.ndarray, key: tuple[Any, ...], operands: list[Any], into: Any = None) -> None:
        """Evaluate the group ``ids`` of the value key ``key``; ``into``: ``(tensor, view)`` to compute it in."""
        sem, pattern, statics, out_code, _, vb = key
        out = BY_CODE[out_code]
        big = len(ids) > _SMALL  # (a few rows compute faster the plain way)
        if into is not None or (big and vb is None and sem in INTO and _same_type(pattern, out.dtype)):
            rows = np.empty((len(ids), out.lanes), dtype=out.dtype) if into is None else into[1]
            args, target = self._elementwise(operands, pattern, rows)
            INTO[sem](args, statics, target)
            if into is not None:
                self.views.setdefault(into[0], [])
            self.add(ids, rows, out_code)
            return
        args = [self.operand(operands[p], kind) for p, kind in enumerate(pattern)]
        data = args[:-2] if vb is not None else args
        result = self.semantics[sem](data, statics)
        if vb is not None:
            result = np.where(args[-2] != vb, result, args[-1])
        if type(result) is np.ndarray and result.dtype == out.dtype and result.shape == (len(ids), out.lanes):
            rows = np.ascontiguousarray(result)
        else:
            rows = np.empty((len(ids), out.lanes), dtype=out.dtype)
            rows[...] = result
        self.add(ids, rows, out_code)

    def _elementwise(
        self, operands: list[Any], pattern: tuple[int, ...], rows: np.ndarray
    ) -> tuple[list[np.ndarray], np.ndarray]:
        """An elementwise group's operands, and where its result goes (``rows``).

        An operand whose rows each repeat ``k`` times over (a row's scalar against the row's vectors)
        is not copied out: everything is seen as ``(rows / k, k, lanes)`` and it as ``(rows / k, 1, lanes)``.
        """
        found: list[tuple[np.ndarray, int]] = []
        k = 1
        for p, kind in enumerate(pattern):
            if kind < 0:
                found.append((self.operand(operands[p], kind), 1))
                continue
            entries = np.asarray(operands[p], dtype=np.int64)
            values, repeat = self.rows(entries, kind, repeated=True)
            if repeat > 1 and k not in (1, repeat):
                values, repeat = self.rows(entries, kind)
            k = max(k, repeat)
            found.append((values, repeat))
        if k == 1:
            return [values for values, _ in found], rows
        return [values[:, None] if repeat > 1 else _split(values, k) for values, repeat in found], _split(rows, k)

    def load(self, ids: np.ndarray, tensor: int, coords: np.ndarray, at: np.ndarray) -> None:
        """Loads ``ids`` of ``tensor`` at ``coords[at]``: a view of it if they step evenly inside it, else gathered."""
        t = self.tensors[tensor]
        flat, lanes, n = t.flat, t.vtype.lanes, ids.shape[0]
        regular, first, step = progression(coords, at, t.sizes, t.strides, lanes)
        if regular and step >= 0:
            values = _strided(flat, first, step, n, lanes)
            values.flags.writeable = False
            self.views.setdefault(tensor, [])  # a tensor with views to watch
            self.add(ids, values, t.vtype.code)
            return
        values = np.empty((n, lanes), dtype=flat.dtype)
        uint = _UINT[flat.itemsize]
        pad = np.asarray(t.pad).astype(flat.dtype).reshape(1).view(uint)
        gather(values.view(uint), coords, at, flat.view(uint), t.sizes, t.strides, lanes, pad)
        self.add(ids, values, t.vtype.code)

    def target(
        self, tensor: int, values: np.ndarray, coords: np.ndarray, at: np.ndarray, key: tuple[Any, ...]
    ) -> np.ndarray | None:
        """Where the group of value key ``key`` can be computed straight into ``tensor``, or None.

        It can when its entries are the values of all of the tensor's stores in the flush (``values``,
        at ``coords[at]``), in order, the stores fill disjoint vectors evenly inside the tensor, nothing
        views the tensor, and the key is an elementwise operation on operands of the tensor's type.
        """
        t = self.tensors[tensor]
        sem, pattern, _, out_code, _, vb = key
        dtype = t.flat.dtype
        if vb is not None or sem not in INTO or tensor in self.views or BY_CODE[out_code].dtype != dtype:
            return None
        if not _same_type(pattern, dtype):
            return None
        lanes, n = t.vtype.lanes, values.shape[0]
        regular, first, step = progression(coords, at, t.sizes, t.strides, lanes)
        if not regular or (step < lanes and n > 1):
            return None
        t.own()
        return _strided(t.flat, first, step, n, lanes)

    def store(self, tensor: int, values: np.ndarray, coords: np.ndarray, at: np.ndarray) -> None:
        """Stores to ``tensor`` in program order: the values of entries ``values`` at ``coords[at]``."""
        t = self.tensors[tensor]
        views = self.views.pop(tensor, ())
        if not t.own():  # values still viewing the tensor keep their lanes (the caller's array is not written)
            for g in views:
                self.arrays[g] = self.arrays[g].copy()
        flat, lanes, n = t.flat, t.vtype.lanes, values.shape[0]
        rows = self.rows(values, t.vtype.code)[0]
        regular, first, step = progression(coords, at, t.sizes, t.strides, lanes)
        if regular and (step >= lanes or n == 1):  # disjoint vectors: the order does not matter
            _strided(flat, first, step, n, lanes)[...] = rows
            return
        uint = _UINT[flat.itemsize]
        scatter(np.ascontiguousarray(rows).view(uint), coords, at, flat.view(uint), t.sizes, t.strides, lanes)


def _split(a: np.ndarray, k: int) -> np.ndarray:
    """The view of ``a`` with its rows in groups of ``k``: shape ``(rows / k, k, ...)``."""
    shape = (a.shape[0] // k, k, *a.shape[1:])
    strides = (k * a.strides[0], *a.strides)
    return np.lib.stride_tricks.as_strided(a, shape=shape, strides=strides, writeable=a.flags.writeable)


def _same_type(pattern: tuple[int, ...], dtype: np.dtype) -> bool:
    """Every operand of ``pattern`` is of ``dtype``, float32 or an integer type (what :data:`INTO` needs)."""
    if dtype.kind not in "iu" and dtype != np.float32:  # 16-bit floats compute in float32
        return False
    return all(BY_CODE[k if k >= 0 else SCALAR - k].dtype == dtype for k in pattern)


def _strided(flat: np.ndarray, first: int, step: int, n: int, lanes: int) -> np.ndarray:
    """The ``(n, lanes)`` view of ``flat`` whose row ``i`` starts at ``first + i * step``."""
    if step == lanes:
        return flat[first : first + n * lanes].reshape(n, lanes)
    size = flat.itemsize
    return np.lib.stride_tricks.as_strided(flat[first:], shape=(n, lanes), strides=(step * size, size))
