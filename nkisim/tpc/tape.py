"""Opcodes of the trace tape, and the compiled passes over it (decoding, grouping, member bodies, expansion).

An intrinsic call appends one *entry* to the tape: an opcode (an int) and its operands. The opcode
stands for everything that is the same from call to call of one intrinsic with one operand pattern:
its value semantics (the grouping key of :mod:`nkisim.tpc.trace`), the micro-ops it becomes (slot,
latency class, memory kind, which operands they read and how), and, for tensor loads and stores,
the tensor. Opcodes are interned once per distinct :class:`Op`, so the recording fast paths look
theirs up ahead of the call (as the trace's one-byte code for it) and append that.

The common calls are recorded in flat columns instead of per-entry tuples: their opcode's *layout*
says which columns hold their operands (:data:`L_VV` ... :data:`L_ST`), and :func:`decode` turns the
columns into the operand table in one compiled pass. After the run, :func:`member_bodies` finds the
members that recorded the same body and :func:`expand` turns one member of each into micro-ops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

#: Operands an entry may have (vector, scalar or dependency-only).
MAX_OPERANDS = 8
#: A micro-op source that is the micro-op before it in the same entry (a macro's chain).
PREV = -2
#: Memory kinds of micro-ops: none, tensor load and store, VLM load and store, LOOKUP.
M_NONE, M_GLD, M_GST, M_LLD, M_LST, M_LOOKUP = range(6)

#: Operand kinds in a key's pattern, besides a vector operand's type code (>= 0): a scalar of the
#: type with code ``c`` is ``SCALAR - c``; int5 coordinates are ``COORDS``.
SCALAR = -10
COORDS = -2

#: Operand layouts. ``L_ROWS``: operands in a per-opcode row tuple (:meth:`Trace.entry`). The others
#: are column layouts: two vector handles (``L_VV``), a vector handle and a float scalar (``L_VS``),
#: one vector handle (``L_V``), a tensor load (``L_LD``: coordinates and call site) and a tensor
#: store (``L_ST``: its value's handle, coordinates and call site).
L_ROWS, L_VV, L_VS, L_V, L_LD, L_ST = range(6)


@dataclass(frozen=True)
class Op:
    """What one opcode means.

    Attributes:
        key: the value's grouping key ``(sem, pattern, statics, out code, type code, vb)``; None: no value.
        uops: the micro-ops, each ``(slot, class, memory, tensor, (operand or PREV, ...), (kind, ...))``.
        alias: the value is operand 0's bits and its micro-op is operand 0's (a cast, no instruction).
        access: ``(tensor, lanes, is_store)`` for a tensor load or store.
        layout: where the entries' operands are recorded (``L_ROWS``, ``L_VV``, ...).
        refs: operand positions holding vector handles besides the key's vector operands (the
            stored value of an op without a value of its own); the other positions hold entries.
    """

    key: tuple[Any, ...] | None
    uops: tuple[tuple[Any, ...], ...]
    alias: bool = False
    access: tuple[int, int, bool] | None = None
    layout: int = L_ROWS
    refs: tuple[int, ...] = ()


#: Every opcode's meaning, by opcode.
OPS: list[Op] = []
_INDEX: dict[Op, int] = {}


def opcode(op: Op) -> int:
    """The opcode of ``op`` (interned)."""
    found = _INDEX.get(op)
    if found is None:
        found = _INDEX[op] = len(OPS)
        OPS.append(op)
    return found


def value_positions(key: tuple[Any, ...] | None) -> tuple[int, ...]:
    """Operand positions that carry vector values (the pattern's vector codes)."""
    return () if key is None else tuple(p for p, k in enumerate(key[1]) if k >= 0)


def operand_roles(op: Op) -> list[str]:
    """Each recorded operand position of ``op``: ``scalar``, ``handle`` (a vector) or ``entry`` (a dependency)."""
    pattern = op.key[1] if op.key is not None else ()
    roles = ["handle" if k >= 0 else "scalar" for k in pattern]
    roles += ["entry"] * (MAX_OPERANDS - len(roles))
    for p in op.refs:
        roles[p] = "handle"
    return roles


class Tables:
    """The opcode table as arrays for the compiled passes (rebuilt when opcodes are added).

    Attributes:
        start, count: each opcode's micro-op template rows.
        rows: ``(slot, class, memory, tensor, 4 sources, 4 kinds)`` per template row.
        alias: opcodes that are bit casts.
        valmask: ``[opcode, position]``: the operand is a vector value (its depth counts).
        has_value: the opcode makes a value.
        out: the type code of the value it makes (-1: none).
        width: operand positions its entries may fill (after them, ``src`` holds -1).
        access: ``[opcode] -> (tensor, lanes, is_store)`` or ``(-1, 0, 0)``.
        layout: each opcode's operand layout.
    """

    def __init__(self) -> None:
        n = len(OPS)
        self.size = n
        self.start = np.zeros(n, dtype=np.int64)
        self.count = np.zeros(n, dtype=np.int64)
        rows: list[list[int]] = []
        self.alias = np.zeros(n, dtype=np.bool_)
        self.valmask = np.zeros((n, MAX_OPERANDS), dtype=np.bool_)
        self.has_value = np.zeros(n, dtype=np.bool_)
        self.out = np.array([-1 if op.key is None else op.key[3] for op in OPS], dtype=np.int64)
        self.width = np.zeros(n, dtype=np.int64)
        self.access = np.full((n, 3), -1, dtype=np.int64)
        self.layout = np.array([op.layout for op in OPS], dtype=np.int64)
        for i, op in enumerate(OPS):
            self.start[i] = len(rows)
            self.count[i] = len(op.uops)
            for slot, cls, mem, tensor, srcs, kinds in op.uops:
                s = list(srcs[:4]) + [-1] * (4 - len(srcs[:4]))
                k = list(kinds[:4]) + [0] * (4 - len(kinds[:4]))
                rows.append([slot, cls, mem, tensor, *s, *k])
            used = [*value_positions(op.key), *op.refs, *(p for u in op.uops for p in u[4] if p >= 0)]
            self.width[i] = 1 + max(used, default=-1)
            self.alias[i] = op.alias
            self.has_value[i] = op.key is not None
            for p in value_positions(op.key):
                self.valmask[i, p] = True
            if op.access is not None:
                self.access[i] = (op.access[0], op.access[1], int(op.access[2]))
        self.rows = np.array(rows, dtype=np.int64).reshape(-1, 12)


_TABLES: list[Tables] = []


def tables() -> Tables:
    """The current opcode arrays."""
    if not _TABLES or _TABLES[0].size != len(OPS):
        _TABLES[:] = [Tables()]
    return _TABLES[0]


@numba.njit(cache=True)
def decode(
    ops: np.ndarray,
    src: np.ndarray,
    fidx: np.ndarray,
    crow: np.ndarray,
    level: np.ndarray,
    layout: np.ndarray,
    valmask: np.ndarray,
    width: np.ndarray,
    xs: np.ndarray,
    vent: np.ndarray,
    start: int,
    fbase: int,
    cbase: int,
) -> int:  # pragma: no cover
    """Operands of the column-recorded entries ``start..``, and every new entry's dataflow depth.

    ``xs`` is the vector-handle column recorded since ``start`` (``k << 4 | type code``: the entry
    ``vent[type code, k]``); the float scalars and the coordinates of the new entries are numbered
    from ``fbase`` and ``cbase``.
    Fills ``src`` (operand entries), ``fidx`` (float scalar index), ``crow`` (coordinate row) and
    ``level``: 1 + the deepest vector operand not evaluated yet (>= ``start``). Returns the number
    of accesses decoded.
    """
    xi = 0
    fi = fbase
    ci = cbase
    for n in range(start, ops.shape[0]):
        op = ops[n]
        lay = layout[op]
        if lay == 1 or lay == 2 or lay == 3 or lay == 5:
            h = xs[xi]
            src[n, 0] = vent[h & 15, h >> 4]
            xi += 1
            if lay == 1:
                h = xs[xi]
                src[n, 1] = vent[h & 15, h >> 4]
                xi += 1
            elif lay == 2:
                fidx[n] = fi
                fi += 1
        if lay == 4 or lay == 5:
            crow[n] = ci
            ci += 1
        lv = 0
        for p in range(width[op]):
            s = src[n, p]
            if s >= start and valmask[op, p] and level[s] + 1 > lv:
                lv = level[s] + 1
        level[n] = lv
    return ci - cbase


@numba.njit(cache=True)
def number_values(
    ops: np.ndarray, start: int, out: np.ndarray, vent: np.ndarray, nval: np.ndarray
) -> np.ndarray:  # pragma: no cover
    """Number the values of the entries ``start..``: the ``k``-th of type ``c`` is entry ``vent[c, k]``.

    ``nval`` counts each type's values so far; returns ``vent``, grown if it had to be.
    """
    need = nval.copy()
    for n in range(start, ops.shape[0]):
        c = out[ops[n]]
        if c >= 0:
            need[c] += 1
    if need.max() > vent.shape[1]:
        grown = np.empty((vent.shape[0], max(need.max(), 2 * vent.shape[1])), dtype=vent.dtype)
        for c in range(vent.shape[0]):
            grown[c, : nval[c]] = vent[c, : nval[c]]
        vent = grown
    for n in range(start, ops.shape[0]):
        c = out[ops[n]]
        if c >= 0:
            vent[c, nval[c]] = n
            nval[c] += 1
    return vent


@numba.njit(cache=True)
def column_groups(
    ops: np.ndarray, level: np.ndarray, layout: np.ndarray, start: int, width: int
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """The entries ``start..`` of a column layout with a value (``L_VV`` .. ``L_LD``), by dataflow depth and opcode.

    Returns the entries in that order (program order within a group) and the groups' bounds in it:
    two stable counting sorts, by opcode (``width`` of them) and then by depth.
    """
    n = 0
    top = 0
    for e in range(start, ops.shape[0]):
        if 1 <= layout[ops[e]] <= 4:
            n += 1
            if level[e] > top:
                top = level[e]
    ids = np.empty(n, dtype=np.int64)
    i = 0
    for e in range(start, ops.shape[0]):
        if 1 <= layout[ops[e]] <= 4:
            ids[i] = e
            i += 1
    counts = np.zeros(width + 1, dtype=np.int64)
    for i in range(n):
        counts[ops[ids[i]] + 1] += 1
    for k in range(width):
        counts[k + 1] += counts[k]
    by_op = np.empty(n, dtype=np.int64)
    for i in range(n):
        k = ops[ids[i]]
        by_op[counts[k]] = ids[i]
        counts[k] += 1
    counts = np.zeros(top + 2, dtype=np.int64)
    for i in range(n):
        counts[level[by_op[i]] + 1] += 1
    for k in range(top + 1):
        counts[k + 1] += counts[k]
    order = np.empty(n, dtype=np.int64)
    for i in range(n):
        k = level[by_op[i]]
        order[counts[k]] = by_op[i]
        counts[k] += 1
    bounds = np.empty(n + 1, dtype=np.int64)
    b = 0
    for j in range(n):
        if j == 0 or ops[order[j]] != ops[order[j - 1]] or level[order[j]] != level[order[j - 1]]:
            bounds[b] = j
            b += 1
    bounds[b] = n
    return order, bounds[: b + 1]


@numba.njit(cache=True)
def row_base(
    coords: np.ndarray, i: int, sizes: np.ndarray, strides: np.ndarray
) -> tuple[bool, int]:  # pragma: no cover
    """Whether access ``i``'s dims 1..4 lie inside the tensor, and its flat offset apart from dim0."""
    inside = True
    base = 0
    for d in range(1, 5):
        c = coords[i, d]
        if c < 0 or c >= sizes[d]:
            inside = False
        base += c * strides[d]
    return inside, base


@numba.njit(cache=True)
def access_rows(
    ops: np.ndarray, entries: np.ndarray, access: np.ndarray, members: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """Tensor, member, lanes and is-store of each access entry (``entries`` ascending; ``members``: first entries)."""
    n = entries.shape[0]
    tensor = np.empty(n, dtype=np.int64)
    member = np.empty(n, dtype=np.int64)
    lanes = np.empty(n, dtype=np.int64)
    store = np.empty(n, dtype=np.bool_)
    m = -1
    for i in range(n):
        e = entries[i]
        while m + 1 < members.shape[0] and members[m + 1] <= e:
            m += 1
        op = ops[e]
        tensor[i] = access[op, 0]
        member[i] = m
        lanes[i] = access[op, 1]
        store[i] = access[op, 2] == 1
    return tensor, member, lanes, store


@numba.njit(cache=True)
def _same_body(ops: np.ndarray, src: np.ndarray, width: int, a: int, b: int, length: int) -> bool:  # pragma: no cover
    """Entries ``a..`` and ``b..`` (``length`` each): equal opcodes, and operands equal counted from ``a`` and ``b``."""
    for i in range(length):
        if ops[a + i] != ops[b + i]:
            return False
    shift = a - b
    for i in range(length):
        for p in range(width):
            x, y = src[a + i, p], src[b + i, p]
            if x != y + shift and not (x < 0 and x == y):
                return False
    return True


@numba.njit(cache=True)
def member_bodies(ops: np.ndarray, src: np.ndarray, width: int, members: np.ndarray) -> np.ndarray:  # pragma: no cover
    """For each member, the first member with the same body, or itself: what it schedules like.

    Two bodies are the same when their opcodes and their operands, numbered from each member's
    first entry, are equal entry by entry (a hash of the opcodes picks whom to compare). A member
    that reads a value of another member is its own. Operand columns from ``width`` on are -1.
    ``members`` holds each member's first entry and, last, the number of entries.
    """
    n_members = members.shape[0] - 1
    rep = np.arange(n_members)
    alone = np.zeros(n_members, dtype=np.bool_)
    hashes = np.zeros(n_members, dtype=np.uint64)
    for m in range(n_members):
        a = members[m]
        h = np.uint64(14695981039346656037)
        for n in range(a, members[m + 1]):
            h = (h ^ np.uint64(ops[n])) * np.uint64(1099511628211)
            for p in range(width):
                if 0 <= src[n, p] < a:
                    alone[m] = True
        hashes[m] = h
    for m in range(n_members):
        a, length = members[m], members[m + 1] - members[m]
        for r in range(m):
            b = members[r]
            if rep[r] != r or alone[r] or alone[m] or hashes[r] != hashes[m] or members[r + 1] - b != length:
                continue
            if _same_body(ops, src, width, a, b, length):
                rep[m] = r
                break
    return rep


@numba.njit(cache=True)
def expand(
    ops: np.ndarray,
    src: np.ndarray,
    starts: np.ndarray,
    counts: np.ndarray,
    rows: np.ndarray,
    alias: np.ndarray,
    members: np.ndarray,
    wanted: np.ndarray,
) -> tuple[np.ndarray, ...]:  # pragma: no cover
    """The micro-ops of the ``wanted`` members, as the scheduler's columns, member after member.

    ``members`` holds each member's first entry and, last, the number of entries. Returns
    ``(slot, class, sources (n, 4), kinds (n, 4), memory, tensor, source count, HBM accesses per
    member, first micro-op of each member (and, last, the total), each member's first row in the
    columns)``. Micro-ops are numbered as if every member were expanded; sources are numbered from
    the member's first micro-op (-1: none, or a value made by another member, ready at the start);
    the source count counts those too. Alias entries (bit casts) make no micro-op: their value is
    their operand's.
    """
    n_members = members.shape[0] - 1
    first_uop = np.zeros(n_members + 1, dtype=np.int64)
    u = 0
    m = -1
    for n in range(ops.shape[0]):
        while m + 1 < n_members and n >= members[m + 1]:
            m += 1
            first_uop[m] = u
        if not alias[ops[n]]:
            u += counts[ops[n]]
    first_uop[n_members] = u
    row_of = np.zeros(n_members, dtype=np.int64)
    total = 0
    for m in range(n_members):
        row_of[m] = total
        if wanted[m]:
            total += first_uop[m + 1] - first_uop[m]
    slot = np.empty(total, dtype=np.int64)
    cls = np.empty(total, dtype=np.int64)
    srcs = np.empty((total, 4), dtype=np.int64)
    kinds = np.empty((total, 4), dtype=np.int64)
    mem = np.empty(total, dtype=np.int64)
    tensor = np.empty(total, dtype=np.int64)
    nsrc = np.empty(total, dtype=np.int64)
    n_mem = np.zeros(n_members, dtype=np.int64)
    entry_uop = np.full(ops.shape[0], -1, dtype=np.int64)
    u = 0
    m = -1
    first = 0
    w = 0
    keep = False
    for n in range(ops.shape[0]):
        while m + 1 < n_members and n >= members[m + 1]:
            m += 1
            first = u
            keep = wanted[m]
            w = row_of[m]
        op = ops[n]
        if alias[op]:
            s = src[n, 0]
            entry_uop[n] = entry_uop[s] if s >= 0 else -1
            continue
        if not keep:
            u += counts[op]
            entry_uop[n] = u - 1 if counts[op] else -1
            continue
        for r in range(starts[op], starts[op] + counts[op]):
            slot[w] = rows[r, 0]
            cls[w] = rows[r, 1]
            j = 0
            k = 0
            for q in range(4):
                p = rows[r, 4 + q]
                if p == -1:
                    continue
                if p != PREV and src[n, p] < 0:
                    continue  # a scalar operand: not a source
                s = u - 1 if p == PREV else entry_uop[src[n, p]]
                if s >= 0:
                    k += 1
                if s - first >= 0:
                    srcs[w, j] = s - first
                    kinds[w, j] = rows[r, 8 + q]
                else:
                    srcs[w, j] = -1
                    kinds[w, j] = 0
                j += 1
            for q in range(j, 4):
                srcs[w, q] = -1
                kinds[w, q] = 0
            nsrc[w] = k
            mem[w] = rows[r, 2]
            tensor[w] = rows[r, 3]
            if mem[w] == M_GLD or mem[w] == M_GST:
                n_mem[m] += 1
            u += 1
            w += 1
        entry_uop[n] = u - 1 if counts[op] else -1
    return slot, cls, srcs, kinds, mem, tensor, nsrc, n_mem, first_uop, row_of
