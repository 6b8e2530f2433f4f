"""The tape of one kernel run: entries evaluated in numpy batches, then expanded into micro-ops.

Every intrinsic call appends an *entry*: an opcode (:mod:`nkisim.tpc.tape`) and its operands; a
vector value is a handle on its entry. Values are not computed at the call: a TPC kernel cannot
read vector lanes back into scalars, so nothing in its Python control flow waits for them. The tape
is evaluated when a load reads a tensor with stores still pending (and at the end): the recorded
columns become arrays, entries are grouped by dataflow depth and by opcode, and each group runs as
one numpy call over all its vectors, of every member at once (tensor loads as one compiled gather).
Stores are then applied in program order.
Results are the same as evaluating call by call; only the number of numpy calls shrinks (from one
per vector to one per group). After the run the tape is expanded into the micro-ops that
:mod:`nkisim.tpc.schedule` packs, and its tensor accesses into the log the footprint checks read.
"""

from __future__ import annotations

import functools
import itertools
from array import array
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from nkisim.errors import SourceLoc
from nkisim.tpc.tape import (  # noqa: F401 (M_*: the memory kinds, used from here)
    L_LD,
    L_ST,
    L_V,
    L_VS,
    L_VV,
    M_GLD,
    M_GST,
    M_LLD,
    M_LOOKUP,
    M_LST,
    M_NONE,
    MAX_OPERANDS,
    OPS,
    Op,
    Tables,
    access_rows,
    column_groups,
    decode,
    expand,
    gather,
    member_bodies,
    number_values,
    opcode,
    operand_roles,
    progression,
    row_step,
    scatter,
    tables,
)
from nkisim.tpc.types import BY_CODE, Vec, VType, handles

#: ``fn(args, statics) -> lanes``: the batched numpy semantics of one operation (rows = vectors).
Semantics = Callable[[list[np.ndarray], tuple[Any, ...]], np.ndarray]

#: Operand kinds in a node's pattern, besides a vector operand's type code (>= 0): a scalar of the
#: type with code ``c`` is ``SCALAR - c``; int5 coordinates are ``COORDS``.
SCALAR = -10
COORDS = -2

# micro-op slots, producer latency classes, consumer operand kinds and memory kinds
LOAD, SPU, VPU, STORE = 0, 1, 2, 3
SLOT_NAMES = ("load", "spu", "vpu", "store")
C_LD, C_VPU, C_FMA, C_CMP, C_SHUF, C_MDG, C_LOOKUP, C_NONE = range(8)
K_SRC, K_ACC, K_PRED, K_STV = range(4)


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


def _append(buffer: np.ndarray, used: int, rows: np.ndarray) -> np.ndarray:
    """``rows`` written after the first ``used`` rows of ``buffer`` (grown by doubling): the buffer."""
    end = used + rows.shape[0]
    if end > buffer.shape[0]:
        grown = np.empty((max(end, 2 * buffer.shape[0]), *buffer.shape[1:]), dtype=buffer.dtype)
        grown[:used] = buffer[:used]
        buffer = grown
    buffer[used:end] = rows
    return buffer


def _ints(column: Any) -> np.ndarray:
    """A column of ints (or Vec handles, read as their raw int) as int64."""
    return np.frombuffer(array("q", column), dtype=np.int64)


def code_line(code: Any, lasti: int) -> int:
    """The source line of byte offset ``lasti`` of ``code``."""
    for start, end, line in code.co_lines():
        if start <= lasti < end and line is not None:
            return line
    return code.co_firstlineno


@functools.cache
def tensor_opcode(vt: VType, tensor: int, store: bool) -> int:
    """The opcode of a vector load (or store) of ``tensor`` with type ``vt`` (column layout)."""
    if store:
        uop = (STORE, C_NONE, M_GST, tensor, (0,), (K_STV,))
        return opcode(Op(None, (uop,), access=(tensor, vt.lanes, True), layout=L_ST))
    key = (-1, (COORDS,), (tensor, vt.lanes), vt.code, vt.code, None)
    uop = (LOAD, C_LD, M_GLD, tensor, (), ())
    return opcode(Op(key, (uop,), access=(tensor, vt.lanes, False), layout=L_LD))


class _Handles(dict):  # type: ignore[type-arg]
    """Per type code, the iterator of a trace's handles (made on first use)."""

    def __missing__(self, code: int) -> Iterator[Vec]:
        found = self[code] = handles(code)
        return found


class Trace:
    """The tape of one run (all members): entries, their operands, values, and the tensor access log.

    Attributes:
        seq: every entry's opcode, in program order (an entry's number is its position).
        rows: per ``L_ROWS`` opcode, the operands of its entries not evaluated yet: ``(entry, operand, ...)``.
        xs: the vector handles of the column-recorded entries not evaluated yet, in entry order.
        fs: their float scalars (``L_VS``).
        cb: the int5 coordinates of the tensor accesses not evaluated yet (int32 bytes, 5 per access).
        handles: per type code, the iterator of the handles of that type's values, in entry order
            (``next(handles[code])`` is the handle of an entry just recorded).
        locating: this trace re-runs one member to find the kernel lines of its tensor accesses;
            only then are ``codes`` and ``lastis`` (the calling code object and byte offset of each
            access) recorded, and every intrinsic takes its full (checking, recording) path.
        dirty: tensors with stores not applied yet.
        ld_fast: per vector type code, ``tensor -> load opcode`` of its tensors without pending stores.
        st_fast: per vector type code, ``tensor -> store opcode`` of the tensors the running member
            stored since its last ``aso()`` and the last evaluation (a store to them needs no bookkeeping).
    """

    def __init__(self, tensors: list[TensorState], semantics: list[Semantics], locating: bool = False) -> None:
        self.tensors = tensors
        self.semantics = semantics
        self.locating = locating
        self.seq: list[int] = []
        self.rows: defaultdict[int, list[tuple[Any, ...]]] = defaultdict(list)
        self.xs: list[int] = []
        self.fs: list[float] = []
        self.cb = bytearray()
        self.handles: dict[int, Iterator[Vec]] = _Handles()
        self.codes: list[Any] = []
        self.lastis: list[int] = []
        self.dirty: set[int] = set()
        self.ld_fast: dict[int, dict[int, int]] = {code: {} for code in BY_CODE}
        self.st_fast: dict[int, dict[int, int]] = {code: {} for code in BY_CODE}
        for t in tensors:
            self.ld_fast[t.vtype.code][t.index] = tensor_opcode(t.vtype, t.index, False)
        self.base = 0
        cap = 1024
        self._ops = np.zeros(cap, dtype=np.int64)
        self._src = np.full((cap, 1), -1, dtype=np.int64)  # as many columns as the opcodes so far use
        self._level = np.zeros(cap, dtype=np.int64)
        self._fidx = np.zeros(cap, dtype=np.int64)
        self._crow = np.zeros(cap, dtype=np.int64)
        self._group = np.zeros(cap, dtype=np.int64)  # the group holding each entry's value, and its row there
        self._row = np.zeros(cap, dtype=np.int64)
        self._vent = np.zeros((_CODES, cap), dtype=np.int64)  # [type code, k]: the entry of value k
        self._nval = np.zeros(_CODES, dtype=np.int64)
        self._values: list[np.ndarray] = []  # per group, its values (rows = entries)
        self._views: dict[int, list[int]] = {}  # tensor -> groups whose values may view it
        self._fvals = np.zeros(0, dtype=np.float64)  # the float scalars (the first _nf)
        self._coords = np.zeros((0, 5), dtype=np.int32)  # the accesses' coordinates (the first _nc)
        self._nf = self._nc = 0
        self._acc_n: list[np.ndarray] = []

    # -- recording (the slow paths; the fast ones append to the columns themselves) ---------

    def entry(self, op: int, operands: tuple[Any, ...]) -> int:
        """Append an ``L_ROWS`` entry with opcode ``op`` and its operands; returns its number."""
        n = len(self.seq)
        self.seq.append(op)
        self.rows[op].append((n, *operands))
        return n

    def value_entry(self, op: int, operands: tuple[Any, ...], code: int) -> Vec:
        """Append an ``L_ROWS`` entry that makes a value of type ``code``; returns its handle."""
        self.entry(op, operands)
        return next(self.handles[code])

    def mark_stored(self, tensor: int) -> None:
        """The running member stored to ``tensor``: loads of it evaluate first; its next stores are fast."""
        t = self.tensors[tensor]
        self.dirty.add(tensor)
        self.ld_fast[t.vtype.code].pop(tensor, None)
        self.st_fast[t.vtype.code][tensor] = tensor_opcode(t.vtype, tensor, True)

    def forget_stores(self) -> None:
        """A new member, or ``aso()``: no tensor counts as stored by the running member any more."""
        for found in self.st_fast.values():
            found.clear()

    # -- evaluation ---------------------------------------------------------------------

    def _grow(self, end: int, width: int) -> None:
        """Room for ``end`` entries with ``width`` operand columns."""
        cap, had = self._ops.shape[0], self._src.shape[1]
        if end <= cap and width <= had:
            return
        new = max(end, 2 * cap) if end > cap else cap
        for name in ("_ops", "_level", "_fidx", "_crow", "_group", "_row"):
            old = getattr(self, name)
            grown = np.empty(new, dtype=old.dtype)
            grown[:cap] = old
            setattr(self, name, grown)
        src = np.full((new, max(width, had)), -1, dtype=np.int64)
        src[:cap, :had] = self._src
        self._src = src

    def _columns(self) -> tuple[np.ndarray, int, int]:
        """Move the new float scalars and coordinates into their arrays: (handles, float base, coordinate base)."""
        xs = _ints(self.xs)
        self.xs.clear()
        fbase, cbase = self._nf, self._nc
        if self.fs:
            self._fvals = _append(self._fvals, fbase, np.array(self.fs, dtype=np.float64))
            self._nf += len(self.fs)
            self.fs.clear()
        if self.cb:
            new = np.frombuffer(bytes(self.cb), dtype=np.int32).reshape(-1, 5)
            self.cb.clear()
            self._coords = new if cbase == 0 else _append(self._coords, cbase, new)
            self._nc += new.shape[0]
        return xs, fbase, cbase

    def _row_columns(self, tab: Tables) -> list[tuple[int, np.ndarray, list[Any]]]:
        """The ``L_ROWS`` entries' operands into the operand table: per opcode, (opcode, entries, operand columns)."""
        src = self._src
        columns: list[tuple[int, np.ndarray, list[Any]]] = []
        for op, rows in self.rows.items():
            cols = list(zip(*rows))
            ids = _ints(cols[0])
            roles = operand_roles(OPS[op])
            operands: list[Any] = []
            for p, col in enumerate(cols[1:]):
                if roles[p] == "scalar":
                    operands.append(col)  # converted per group
                    continue
                entries = _ints(col)
                if roles[p] == "handle":
                    entries = self._vent[entries & 15, entries >> 4]
                src[ids, p] = entries
                operands.append(entries)
            columns.append((op, ids, operands))
        self.rows = defaultdict(list)
        return columns

    def flush(self) -> None:
        """Evaluate every entry not evaluated yet, then apply its stores in program order."""
        start, end = self.base, len(self.seq)
        if end == start:
            return
        new = np.fromiter(itertools.islice(self.seq, start, None), np.int64, end - start)
        tab = tables()
        self._grow(end, int(tab.width[new].max()))
        ops = self._ops
        ops[start:end] = new
        self._vent = number_values(ops[:end], start, tab.out, self._vent, self._nval)  # the handles' k
        columns = self._row_columns(tab)
        xs, fbase, cbase = self._columns()
        level = self._level
        src, vent = self._src, self._vent
        decode(
            ops[:end],
            src,
            self._fidx,
            self._crow,
            level,
            tab.layout,
            tab.valmask,
            tab.width,
            xs,
            vent,
            start,
            fbase,
            cbase,
        )
        groups: list[tuple[int, int, np.ndarray, list[Any]]] = []  # (level, opcode, entries, operand columns)
        for op, ids, operands in columns:
            if OPS[op].key is None:
                continue
            lv = level[ids]
            found = np.unique(lv)
            if found.size == 1:
                groups.append((int(found[0]), op, ids, operands))
                continue
            for v in found.tolist():
                sel = np.flatnonzero(lv == v)
                subset = [c[sel] if type(c) is np.ndarray else [c[i] for i in sel] for c in operands]
                groups.append((v, op, ids[sel], subset))
        groups += self._column_groups(start, tab.size)
        groups.sort(key=lambda g: g[0])
        for _, op, ids, operands in groups:
            if OPS[op].layout == L_LD:
                self._load(ids, OPS[op].key[2][0])
            else:
                self._run_group(ids, OPS[op].key, operands)
        self.base = end
        lay = tab.layout[ops[start:end]]
        access = start + np.flatnonzero(lay >= L_LD)
        if access.size:
            self._acc_n.append(access)
            stores = start + np.flatnonzero(lay == L_ST)
            if stores.size:
                self._apply_stores(stores, ops)
        self._clean()

    def _column_groups(self, start: int, width: int) -> list[tuple[int, int, np.ndarray, list[Any]]]:
        """The column-recorded entries from ``start`` on with a value, grouped by dataflow depth and opcode."""
        ids, bounds = column_groups(self._ops[: len(self.seq)], self._level, tables().layout, start, width)
        src = self._src
        groups = []
        for a, b in itertools.pairwise(bounds.tolist()):
            sel = ids[a:b]
            op = int(self._ops[sel[0]])
            lay = OPS[op].layout
            if lay == L_VV:
                operands = [src[sel, 0], src[sel, 1]]
            elif lay == L_VS:
                operands = [src[sel, 0], self._fvals[self._fidx[sel]]]
            elif lay == L_V:
                operands = [src[sel, 0]]
            else:
                operands = []
            groups.append((int(self._level[sel[0]]), op, sel, operands))
        return groups

    def _clean(self) -> None:
        """Stores applied: every tensor loads fast again, and no store counts as pending."""
        for tensor in self.dirty:
            t = self.tensors[tensor]
            self.ld_fast[t.vtype.code][tensor] = tensor_opcode(t.vtype, tensor, False)
        self.dirty.clear()
        self.forget_stores()

    def _add_group(self, ids: np.ndarray, values: np.ndarray) -> None:
        """``values`` (rows in the order of ``ids``) become the values of the entries ``ids``."""
        g = len(self._values)
        self._values.append(values)
        self._group[ids] = g
        self._row[ids] = np.arange(ids.shape[0])
        for tensor in self._views:
            if np.may_share_memory(values, self.tensors[tensor].data):
                self._views[tensor].append(g)

    def _gather(self, entries: np.ndarray, code: int) -> np.ndarray:
        """The values of ``entries`` (of type ``code``) as rows: a view of their group's values when they can be."""
        same, g, first, step = row_step(entries, self._group, self._row)
        if same:
            values, n = self._values[g], entries.shape[0]
            if step == 1 and first == 0 and n == values.shape[0]:
                return values
            if step >= 1:
                return values[first : first + step * (n - 1) + 1 : step]
            return values[self._row[entries]]
        vt = BY_CODE[code]
        group, row = self._group[entries], self._row[entries]
        out = np.empty((entries.shape[0], vt.lanes), dtype=vt.dtype)
        for g in np.unique(group).tolist():
            sel = group == g
            out[sel] = self._values[g][row[sel]]
        return out

    def _operand(self, column: Any, kind: int) -> np.ndarray:
        if kind >= 0:
            return self._gather(np.asarray(column, dtype=np.int64), kind)
        dtype = BY_CODE[SCALAR - kind].dtype
        values = np.array(column, dtype=np.float64 if dtype.kind in "fV" else np.int64)
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            values = np.clip(values, info.min, info.max)
        return values.astype(dtype)[:, None]

    def _run_group(self, ids: np.ndarray, key: tuple[Any, ...], operands: list[Any]) -> None:
        sem, pattern, statics, out_code, _, vb = key
        args = [self._operand(operands[p], kind) for p, kind in enumerate(pattern)]
        data = args[:-2] if vb is not None else args
        result = self.semantics[sem](data, statics)
        if vb is not None:
            result = np.where(args[-2] != vb, result, args[-1])
        out = BY_CODE[out_code]
        if type(result) is np.ndarray and result.dtype == out.dtype and result.shape == (len(ids), out.lanes):
            rows = np.ascontiguousarray(result)
        else:
            rows = np.empty((len(ids), out.lanes), dtype=out.dtype)
            rows[...] = result
        self._add_group(ids, rows)

    def _load(self, ids: np.ndarray, tensor: int) -> None:
        """The loads ``ids`` of ``tensor``: a view of it if they step evenly inside it, else a compiled gather."""
        t = self.tensors[tensor]
        flat, lanes, n = t.flat, t.vtype.lanes, ids.shape[0]
        coords, rows = self._coords, self._crow[ids]
        regular, first, step = progression(coords, rows, t.sizes, t.strides, lanes)
        if regular and step >= 0:
            values = _strided(flat, first, step, n, lanes)
            values.flags.writeable = False
            self._views.setdefault(tensor, [])  # a tensor with views to watch
            self._add_group(ids, values)
            return
        values = np.empty((n, lanes), dtype=flat.dtype)
        uint = _UINT[flat.itemsize]
        pad = np.asarray(t.pad).astype(flat.dtype).reshape(1).view(uint)
        gather(values.view(uint), coords, rows, flat.view(uint), t.sizes, t.strides, lanes, pad)
        self._add_group(ids, values)

    def _apply_stores(self, entries: np.ndarray, ops: np.ndarray) -> None:
        tensors = tables().access[ops[entries], 0]
        first = int(tensors[0])
        if (tensors == first).all():
            per_tensor = [(first, entries)]
        else:
            per_tensor = [(t, entries[tensors == t]) for t in dict.fromkeys(tensors.tolist())]
        for tensor, sel in per_tensor:
            t = self.tensors[tensor]
            views = self._views.pop(tensor, ())
            if not t.own():  # values still viewing the tensor keep their lanes (the caller's array is not written)
                for g in views:
                    self._values[g] = self._values[g].copy()
            flat, lanes, n = t.flat, t.vtype.lanes, sel.shape[0]
            values = self._gather(self._src[sel, 0], t.vtype.code)
            coords, rows = self._coords, self._crow[sel]
            regular, start, step = progression(coords, rows, t.sizes, t.strides, lanes)
            if regular and (step >= lanes or n == 1):  # disjoint vectors: the order does not matter
                _strided(flat, start, step, n, lanes)[...] = values
                continue
            uint = _UINT[flat.itemsize]
            scatter(np.ascontiguousarray(values).view(uint), coords, rows, flat.view(uint), t.sizes, t.strides, lanes)

    # -- after the run ------------------------------------------------------------------

    def access_log(self, member_starts: list[int], locate: Callable[[int, int], SourceLoc]) -> AccessLog:
        """Every tensor access of the run, as arrays (call after the last :meth:`flush`).

        ``locate(member, k)`` is the kernel line of the member's ``k``-th access.
        """
        n = np.concatenate(self._acc_n) if self._acc_n else np.zeros(0, dtype=np.int64)
        starts = np.asarray(member_starts, dtype=np.int64)
        tensor, member, lanes, store = access_rows(self._ops, n, tables().access, starts)
        return AccessLog(tensor, member, self._coords[: self._nc], lanes, store, locate)

    def micro_ops(
        self, members: list[int]
    ) -> tuple[np.ndarray, list[tuple[np.ndarray, ...] | None], np.ndarray, list[int]]:
        """The members' micro-ops, expanded once per distinct body (:func:`~nkisim.tpc.tape.member_bodies`).

        ``members`` are the members' first entries. Returns each member's representative (the
        first member with the same body), the scheduler columns of each representative (None for
        the others), each member's first micro-op number (and, last, the total), and each
        member's HBM accesses.
        """
        end = len(self.seq)
        tab = tables()
        ops, src = self._ops[:end], self._src[:end]
        bounds = np.array([*members, end], dtype=np.int64)
        rep = member_bodies(ops, src, int(tab.width[ops].max(initial=0)), bounds)
        wanted = rep == np.arange(rep.shape[0])
        *columns, n_mem, first_uop, row_of = expand(ops, src, tab.start, tab.count, tab.rows, tab.alias, bounds, wanted)
        per_member: list[tuple[np.ndarray, ...] | None] = []
        for m, keep in enumerate(wanted.tolist()):
            a = int(row_of[m])
            b = a + int(first_uop[m + 1] - first_uop[m])
            per_member.append(tuple(c[a:b] for c in columns) if keep else None)
        return rep, per_member, first_uop, n_mem[rep].tolist()


@dataclass
class AccessLog:
    """The vector accesses of a run, one row each, in program order.

    Attributes:
        tensor, member, coords, lanes, store: per access (coords ``(n, 5)``, dim0 first).
        locate: ``locate(member, k)``, the kernel line of the member's ``k``-th access.
    """

    tensor: np.ndarray
    member: np.ndarray
    coords: np.ndarray
    lanes: np.ndarray
    store: np.ndarray
    locate: Callable[[int, int], SourceLoc]

    def __len__(self) -> int:
        return int(self.tensor.shape[0])

    def loc(self, row: int) -> SourceLoc:
        """The kernel line of access ``row`` (found by running its member again: errors only)."""
        member = int(self.member[row])
        first = int(np.searchsorted(self.member, member, side="left"))
        return self.locate(member, row - first)


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_CODES = max(BY_CODE) + 1


def _strided(flat: np.ndarray, first: int, step: int, n: int, lanes: int) -> np.ndarray:
    """The ``(n, lanes)`` view of ``flat`` whose row ``i`` starts at ``first + i * step``."""
    if step == lanes:
        return flat[first : first + n * lanes].reshape(n, lanes)
    size = flat.itemsize
    return np.lib.stride_tricks.as_strided(flat[first:], shape=(n, lanes), strides=(step * size, size))
