"""The tape of one kernel run: entries evaluated in numpy batches, then expanded into micro-ops.

Every intrinsic call appends an *entry*: an opcode (:mod:`nkisim.tpc.tape`, recorded as the
trace's byte for it) and its operands; a vector value is a handle naming the ``k``-th value of its
type, which evaluation maps to its entry. Values are not computed at the call: a TPC kernel cannot
read vector lanes back into scalars, so nothing in its Python control flow waits for them. The tape
is evaluated when a load reads a tensor with stores still pending (and at the end): the recorded
columns become arrays, entries are grouped by dataflow depth and by opcode, and each group runs as
one numpy call over all its vectors, of every member at once (:mod:`nkisim.tpc.values` keeps the
results and does the tensor loads and stores). Stores are then applied in program order.
Results are the same as evaluating call by call; only the number of numpy calls shrinks (from one
per vector to one per group). After the run the tape is expanded into the micro-ops that
:mod:`nkisim.tpc.schedule` packs (once per distinct member body), and its tensor accesses into the
log the footprint checks read.
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
from nkisim.tpc.tape import (  # noqa: F401 (M_*, SCALAR, COORDS: imported from here)
    COORDS,
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
    OPS,
    SCALAR,
    Op,
    Tables,
    access_rows,
    column_groups,
    decode,
    expand,
    member_bodies,
    number_values,
    opcode,
    operand_roles,
    tables,
)
from nkisim.tpc.types import BY_CODE, Vec, VType, handles
from nkisim.tpc.values import Semantics, TensorState, Values

# micro-op slots, producer latency classes, consumer operand kinds and memory kinds
LOAD, SPU, VPU, STORE = 0, 1, 2, 3
SLOT_NAMES = ("load", "spu", "vpu", "store")
C_LD, C_VPU, C_FMA, C_CMP, C_SHUF, C_MDG, C_LOOKUP, C_NONE = range(8)
K_SRC, K_ACC, K_PRED, K_STV = range(4)


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


#: The byte of ``Trace.seq`` that stands for the next opcode of ``Trace.wide``.
WIDE = 255


class Trace:
    """The tape of one run (all members): entries, their operands, values, and the tensor access log.

    Attributes:
        seq: every entry's opcode as one byte, in program order (an entry's number is its position):
            opcodes are numbered per trace in order of first use (:meth:`code`); the byte ``WIDE``
            stands for the next opcode in ``wide`` (a trace using more than 255 opcodes).
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
        self.seq = bytearray()
        self.wide: list[int] = []
        self._codes: dict[int, int] = {}  # opcode -> its byte in this trace
        self._opcodes = np.full(256, -1, dtype=np.int64)  # byte -> opcode
        self._wide_used = 0
        self.rows: defaultdict[int, list[tuple[Any, ...]]] = defaultdict(list)
        self.xs: list[int] = []
        self.fs: list[float] = []
        self.cb = bytearray()
        self.handles: dict[int, Iterator[Vec]] = {code: handles(code) for code in BY_CODE}
        self.codes: list[Any] = []
        self.lastis: list[int] = []
        self.dirty: set[int] = set()
        self.ld_fast: dict[int, dict[int, int]] = {code: {} for code in BY_CODE}
        self.st_fast: dict[int, dict[int, int]] = {code: {} for code in BY_CODE}
        for t in tensors:
            self._fast(self.ld_fast, t, False)
        self.base = 0
        cap = 1024
        self._ops = np.zeros(cap, dtype=np.int64)
        self._src = np.full((cap, 1), -1, dtype=np.int64)  # as many columns as the opcodes so far use
        self._level = np.zeros(cap, dtype=np.int64)
        self._fidx = np.zeros(cap, dtype=np.int64)
        self._crow = np.zeros(cap, dtype=np.int64)
        self._vent = np.zeros((_CODES, cap), dtype=np.int64)  # [type code, k]: the entry of value k
        self._nval = np.zeros(_CODES, dtype=np.int64)
        self.values = Values(tensors, semantics)
        self.values.grow(cap)
        self._fvals = np.zeros(0, dtype=np.float64)  # the float scalars (the first _nf)
        self._coords = np.zeros((0, 5), dtype=np.int32)  # the accesses' coordinates (the first _nc)
        self._nf = self._nc = 0
        self._acc_n: list[np.ndarray] = []

    # -- recording (the slow paths; the fast ones append to the columns themselves) ---------

    def code(self, op: int) -> int:
        """The byte that records opcode ``op`` in this trace (``WIDE`` once 255 opcodes have one)."""
        found = self._codes.get(op)
        if found is None:
            found = self._codes[op] = min(len(self._codes), WIDE)
            if found < WIDE:
                self._opcodes[found] = op
        return found

    def push(self, op: int) -> int:
        """Append an entry with opcode ``op`` to ``seq``; returns its number."""
        n = len(self.seq)
        code = self.code(op)
        self.seq.append(code)
        if code == WIDE:
            self.wide.append(op)
        return n

    def entry(self, op: int, operands: tuple[Any, ...]) -> int:
        """Append an ``L_ROWS`` entry with opcode ``op`` and its operands; returns its number."""
        n = len(self.seq)
        code = self._codes.get(op)
        if code is None or code == WIDE:
            self.push(op)
        else:
            self.seq.append(code)
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
        self._fast(self.st_fast, t, True)

    def _fast(self, table: dict[int, dict[int, int]], t: TensorState, store: bool) -> None:
        """Let the recording closures load (or store) ``t``: its opcode's byte into ``table``."""
        code = self.code(tensor_opcode(t.vtype, t.index, store))
        if code < WIDE:
            table[t.vtype.code][t.index] = code

    def forget_stores(self) -> None:
        """A new member, or ``aso()``: no tensor counts as stored by the running member any more."""
        for found in self.st_fast.values():
            found.clear()

    # -- evaluation ---------------------------------------------------------------------

    def _grow(self, start: int, ops: np.ndarray, width: int) -> None:
        """Store the opcodes ``ops`` of the entries from ``start`` on, with room for ``width`` operands each."""
        end = start + ops.shape[0]
        cap, had = self._ops.shape[0], self._src.shape[1]
        if end > cap or width > had:
            new = max(end, 2 * cap) if end > cap else cap
            self.values.grow(new)
            for name in ("_level", "_fidx", "_crow"):
                old = getattr(self, name)
                grown = np.empty(new, dtype=old.dtype)
                grown[:cap] = old
                setattr(self, name, grown)
            src = np.full((new, max(width, had)), -1, dtype=np.int64)
            src[:cap, :had] = self._src
            self._src = src
            if start == 0 and end == new:  # the first evaluation: the new opcodes are the whole column
                self._ops = ops
                return
            grown = np.empty(new, dtype=np.int64)
            grown[:start] = self._ops[:start]
            self._ops = grown
        self._ops[start:end] = ops

    def _columns(self, last: bool) -> tuple[np.ndarray, int, int]:
        """Move the new float scalars and coordinates into their arrays: (handles, float base, coordinate base).

        ``last``: the recording is over, so the coordinate bytes become the array without a copy.
        """
        xs = _ints(self.xs)
        self.xs.clear()
        fbase, cbase = self._nf, self._nc
        if self.fs:
            new = np.fromiter(self.fs, np.float64, len(self.fs))
            self._fvals = new if fbase == 0 else _append(self._fvals, fbase, new)
            self._nf += len(self.fs)
            self.fs.clear()
        if self.cb:
            if last:  # nothing appends to these bytes any more: the array takes them as they are
                new = np.frombuffer(self.cb, dtype=np.int32).reshape(-1, 5)
                self.cb = bytearray()
            else:
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

    def flush(self, last: bool = False) -> None:
        """Evaluate every entry not evaluated yet, then apply its stores in program order.

        ``last``: nothing is recorded on this trace afterwards (its columns may be kept as they are).
        """
        start, end = self.base, len(self.seq)
        if end == start:
            return
        new = self._opcodes[np.frombuffer(self.seq, dtype=np.uint8, count=end - start, offset=start)]
        wide = np.flatnonzero(new < 0)
        if wide.size:
            new[wide] = self.wide[self._wide_used : self._wide_used + wide.size]
            self._wide_used += wide.size
        tab = tables()
        self._grow(start, new, int(tab.width[new].max()))
        ops = self._ops
        self._vent = number_values(ops[:end], start, tab.out, self._vent, self._nval)  # the handles' k
        columns = self._row_columns(tab)
        xs, fbase, cbase = self._columns(last)
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
        lay = tab.layout[ops[start:end]]
        stores = self._stores(start + np.flatnonzero(lay == L_ST))
        into = self._targets(stores, groups)
        values = self.values
        for i, (_, op, ids, operands) in enumerate(groups):
            if OPS[op].layout == L_LD:
                values.load(ids, OPS[op].key[2][0], self._coords, self._crow[ids])
            else:
                values.run(ids, OPS[op].key, operands, into.get(i))
        self.base = end
        access = start + np.flatnonzero(lay >= L_LD)
        if access.size:
            self._acc_n.append(access)
        done = {into[i][0] for i in into}
        for tensor, sel in stores:
            if tensor not in done:
                values.store(tensor, self._src[sel, 0], self._coords, self._crow[sel])
        self._clean()

    def _stores(self, entries: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """The store entries ``entries`` per tensor: (tensor, its stores in program order)."""
        if not entries.size:
            return []
        tensors = tables().access[self._ops[entries], 0]
        first = int(tensors[0])
        if (tensors == first).all():
            return [(first, entries)]
        return [(t, entries[tensors == t]) for t in dict.fromkeys(tensors.tolist())]

    def _targets(
        self, stores: list[tuple[int, np.ndarray]], groups: list[tuple[int, int, np.ndarray, list[Any]]]
    ) -> dict[int, tuple[int, np.ndarray]]:
        """Groups computed straight into a tensor (:meth:`Values.target`): group index -> (tensor, view)."""
        into: dict[int, tuple[int, np.ndarray]] = {}
        if not stores:
            return into
        loaded = {OPS[op].key[2][0] for _, op, _, _ in groups if OPS[op].layout == L_LD}
        for tensor, sel in stores:
            if tensor in loaded:
                continue
            values = self._src[sel, 0]
            for i, (_, op, ids, _) in enumerate(groups):
                if ids.shape == values.shape and ids[0] == values[0] and np.array_equal(ids, values):
                    view = (
                        None
                        if i in into
                        else self.values.target(tensor, values, self._coords, self._crow[sel], OPS[op].key)
                    )
                    if view is not None:
                        into[i] = (tensor, view)
                    break
        return into

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
            self._fast(self.ld_fast, self.tensors[tensor], False)
        self.dirty.clear()
        self.forget_stores()

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


_CODES = max(BY_CODE) + 1
