"""The trace of one kernel run: value nodes evaluated in numpy batches, and the micro-ops the scheduler packs.

Every intrinsic call appends a *node* (its semantics, operands and result type) and one or more
*micro-ops* (slot, latency class, source micro-ops) for :mod:`nkisim.tpc.schedule`. Values are not
computed at the call: a TPC kernel cannot read vector lanes back into scalars, so nothing in its
Python control flow waits for them. The trace is evaluated when a load reads a tensor with stores
still pending (and at the end): nodes are grouped by dataflow depth and by operation, and each group
runs as one numpy call over all its vectors, of every member at once. Stores are then applied in
program order. Results are the same as evaluating call by call; only the number of numpy calls
shrinks (from one per vector to one per group).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from nkisim.errors import SourceLoc
from nkisim.tpc.types import BY_CODE, VECTOR_BYTES, Vec, VType

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
M_NONE, M_GLD, M_GST, M_LLD, M_LST, M_LOOKUP = range(6)


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
    """

    index: int
    data: np.ndarray
    vtype: VType
    sizes: np.ndarray
    strides: np.ndarray
    pad: float
    role: str

    @classmethod
    def make(cls, index: int, data: np.ndarray, vtype: VType, pad: float, role: str) -> TensorState:
        sizes = np.ones(5, dtype=np.int64)
        dims = data.shape[::-1]
        sizes[: len(dims)] = dims
        strides = np.concatenate(([1], np.cumprod(sizes[:-1]))).astype(np.int64)
        return cls(index, data, vtype, sizes, strides, pad, role)

    @property
    def flat(self) -> np.ndarray:
        return self.data.reshape(-1)

    def elements(self, coords: np.ndarray, lanes: int) -> tuple[np.ndarray, np.ndarray]:
        """Flat indices ``(n, lanes)`` of vector accesses at ``coords`` ``(n, 5)``, and which are in bounds."""
        sizes = self.sizes
        inside = np.all((coords[:, 1:] >= 0) & (coords[:, 1:] < sizes[1:]), axis=1)
        dim0 = coords[:, :1] + np.arange(lanes)
        ok = (dim0 >= 0) & (dim0 < sizes[0]) & inside[:, None]
        base = coords[:, 1:] @ self.strides[1:]
        return base[:, None] + dim0, ok


@numba.njit(cache=True)
def _scatter_in_order(flat: np.ndarray, index: np.ndarray, values: np.ndarray) -> None:  # pragma: no cover
    """``flat[index[i]] = values[i]`` for each i in order: the last store to an element wins."""
    for i in range(index.shape[0]):
        flat[index[i]] = values[i]


#: One vector access, as the footprint checks read it: (tensor, member, coords, lanes, is_store, code, line).
AccessRow = tuple[int, int, tuple[int, ...], int, bool, Any, int]


def access_loc(row: AccessRow) -> SourceLoc:
    """The kernel line of a logged access."""
    code = row[5]
    return SourceLoc(code.co_filename, row[6], code.co_name)


class Trace:
    """The nodes, micro-ops, pending stores and access log of one run (all members)."""

    def __init__(self, tensors: list[TensorState], semantics: list[Semantics]) -> None:
        self.tensors = tensors
        self.semantics = semantics
        self.key: list[tuple[Any, ...]] = []
        self.ops: list[tuple[Any, ...]] = []
        self.level: list[int] = []
        self.node_uop: list[int] = []
        #: micro-ops: (slot, class, 4 source micro-ops (-1: none), 4 consumer kinds, memory kind, tensor)
        self.uops: list[tuple[int, ...]] = []
        self.base = 0
        self._values = np.zeros((1024, VECTOR_BYTES), dtype=np.uint8)
        self.pending: list[tuple[int, tuple[int, ...], int, int]] = []  # (tensor, coords, node, lanes)
        self.dirty: set[int] = set()
        self.access: list[AccessRow] = []

    # -- recording ----------------------------------------------------------------------

    def node(self, key: tuple[Any, ...], ops: tuple[Any, ...], vtype: VType, level: int, uop: int) -> Vec:
        """Append a value node (evaluated later) produced by micro-op ``uop``."""
        node = len(self.key)
        self.key.append(key)
        self.ops.append(ops)
        self.level.append(level)
        self.node_uop.append(uop)
        return Vec(node, vtype)

    def lvl(self, node: int) -> int:
        """The dataflow depth of a node not evaluated yet (-1 once evaluated)."""
        return self.level[node] if node >= self.base else -1

    def uop(self, slot: int, cls: int, srcs: tuple[int, ...], kinds: tuple[int, ...], mem: int = 0, t: int = -1) -> int:
        """Append a micro-op: up to 4 source micro-ops with their consumer kinds; returns its number."""
        pad = 4 - len(srcs)
        self.uops.append((slot, cls, *srcs, *(-1,) * pad, *kinds, *(0,) * pad, mem, t))
        return len(self.uops) - 1

    # -- evaluation ---------------------------------------------------------------------

    def value(self, v: Vec) -> np.ndarray:
        """The lanes of ``v`` (evaluating the trace so far)."""
        if v.id >= self.base:
            self.flush()
        vt = v.vtype
        return self._values[v.id, : vt.lanes * vt.dtype.itemsize].view(vt.dtype).copy()

    def flush(self) -> None:
        """Evaluate every pending node, then apply the pending stores in program order."""
        start, end = self.base, len(self.key)
        if end > start:
            if end > self._values.shape[0]:
                grown = np.zeros((max(end, 2 * self._values.shape[0]), VECTOR_BYTES), dtype=np.uint8)
                grown[: self._values.shape[0]] = self._values
                self._values = grown
            groups: dict[tuple[Any, ...], list[int]] = defaultdict(list)
            key, level = self.key, self.level
            for i in range(start, end):
                groups[(level[i], key[i])].append(i)
            for lv_key in sorted(groups, key=lambda k: k[0]):
                self._run_group(np.array(groups[lv_key], dtype=np.int64), lv_key[1])
            self.base = end
        if self.pending:
            self._apply_stores()

    def _operand(self, nodes: list[tuple[Any, ...]], p: int, kind: int) -> np.ndarray:
        if kind >= 0:
            vt = BY_CODE[kind]
            ids = np.fromiter((o[p] for o in nodes), dtype=np.int64, count=len(nodes))
            return self._values[ids, : vt.lanes * vt.dtype.itemsize].view(vt.dtype)
        if kind == COORDS:
            return np.array([o[p] for o in nodes], dtype=np.int64).reshape(len(nodes), 5)
        dtype = BY_CODE[SCALAR - kind].dtype
        column = np.array([o[p] for o in nodes], dtype=np.float64 if dtype.kind in "fV" else np.int64)
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            column = np.clip(column, info.min, info.max)
        return column.astype(dtype)[:, None]

    def _run_group(self, ids: np.ndarray, key: tuple[Any, ...]) -> None:
        sem, pattern, statics, out_code, _, vb = key
        ops = [self.ops[i] for i in ids]
        args = [self._operand(ops, p, kind) for p, kind in enumerate(pattern)]
        if sem < 0:  # a tensor load
            result = self._load(args[0], statics[0], statics[1])
        else:
            data = args[:-2] if vb is not None else args
            result = self.semantics[sem](data, statics)
            if vb is not None:
                result = np.where(args[-2] != vb, result, args[-1])
        out = BY_CODE[out_code]
        rows = np.empty((len(ids), out.lanes), dtype=out.dtype)
        rows[...] = result
        self._values[ids, : out.lanes * out.dtype.itemsize] = rows.view(np.uint8)

    def _load(self, coords: np.ndarray, tensor: int, lanes: int) -> np.ndarray:
        t = self.tensors[tensor]
        index, ok = t.elements(coords, lanes)
        flat = t.flat
        values = flat[np.where(ok, index, 0)]
        if not ok.all():
            values = np.where(ok, values, np.asarray(t.pad).astype(flat.dtype))
        return values

    def _apply_stores(self) -> None:
        by_tensor: dict[int, list[tuple[tuple[int, ...], int, int]]] = defaultdict(list)
        for tensor, coords, node, lanes in self.pending:
            by_tensor[tensor].append((coords, node, lanes))
        for tensor, stores in by_tensor.items():
            t = self.tensors[tensor]
            lanes = stores[0][2]
            coords = np.array([s[0] for s in stores], dtype=np.int64)
            nodes = np.array([s[1] for s in stores], dtype=np.int64)
            values = self._values[nodes, : lanes * t.vtype.dtype.itemsize].view(t.data.dtype)
            index, ok = t.elements(coords, lanes)
            flat = t.flat
            _scatter_in_order(flat.view(_UINT[flat.itemsize]), index[ok], values[ok].view(_UINT[flat.itemsize]))
        self.pending.clear()
        self.dirty.clear()


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
