"""Instructions that carry never-written values to their ``dst`` instead of using them.

Reading on-chip memory nothing wrote is harmless on the hardware as long as the values
it yields are never used: a copy, a transpose or a DMA between on-chip tiles moves
whatever bytes are there, an elementwise instruction computes garbage from garbage in
the same places, and a kernel may process a whole tile and use only the part it filled
(a fixed-size ``sendrecv`` of a partly filled tile, a transpose of a tile whose other
columns are padding, an elementwise pass over a tile half of which is later
overwritten). Like MemorySanitizer, the sanitizer lets these *carriers* move
never-written elements and reports them where the values are used, at the line that
first read them (see :mod:`nkisim.sim.checks`). Each instruction that carries declares
how on its spec (``carries=``, a :data:`CarrierRule`).

A carrier is described by the operands it carries and a map from their per-element
*taint* (0: written; otherwise the number of the place that first read the element) to
the taint of each ``dst`` element.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nkisim.hw import HwConfig

#: nonzero_with_count works on the first partition of each GpSimd core.
_GPSIMD_STRIDE = 16
#: nc_stream_shuffle: masks repeat per quadrant of partitions; this entry leaves a partition unchanged.
_QUADRANT, _SHUFFLE_KEEP = 32, 255

#: ``(taints of the carried operands, by name, ops) -> dst taint`` (dst's shape), or None when dst is
#: not traced (sendrecv's goes to the peer). Every carried operand has a taint (zeros when all written);
#: "dst" among them is dst's taint before the instruction, for carriers that leave part of it unchanged.
TaintMap = Callable[[dict[str, np.ndarray], Any], "np.ndarray | None"]


@dataclass(frozen=True, slots=True)
class Carrier:
    """How one instruction carries never-written elements of the operands ``srcs`` to ``dst``."""

    srcs: tuple[str, ...]
    taint: TaintMap


def _same_order(taints: dict[str, np.ndarray], ops: Any) -> np.ndarray:
    (src,) = taints.values()
    return src.reshape(ops.dst.shape)


def _elementwise(taints: dict[str, np.ndarray], ops: Any) -> np.ndarray:
    """Each dst element depends on the same element of full-size operands and on its partition's scalar."""
    dst = ops.dst
    p, free = dst.partitions, dst.size // dst.partitions
    out = np.zeros((p, free), dtype=np.int32)
    for taint in taints.values():
        if taint.size == dst.size:
            np.maximum(out, taint.reshape(p, free), out=out)
        elif taint.size == p:
            np.maximum(out, taint.reshape(p, 1), out=out)
        else:  # some other broadcast: any never-written element taints everything
            np.maximum(out, taint.max(), out=out)
    return out.reshape(dst.shape)


def _transposed(name: str) -> TaintMap:
    def move(taints: dict[str, np.ndarray], ops: Any) -> np.ndarray:
        p = getattr(ops, name).partitions
        return taints[name].reshape(p, -1).T.reshape(ops.dst.shape)

    return move


def _matmul_rows(taints: dict[str, np.ndarray], ops: Any) -> np.ndarray:
    """A transpose computed as a matmul: a never-written stationary element taints its whole output row."""
    rows = taints["stationary"].reshape(ops.stationary.partitions, -1).max(axis=0)
    p = ops.dst.partitions
    return np.broadcast_to(rows[:, None], (p, ops.dst.size // p)).reshape(ops.dst.shape)


def _matmul(taints: dict[str, np.ndarray], ops: Any) -> np.ndarray:
    """``dst[i, j]`` depends on stationary column i and moving column j (and dst itself when accumulating)."""
    rows = taints["stationary"].reshape(-1, ops.stationary.free_size).max(axis=0)
    cols = taints["moving"].reshape(-1, ops.moving.free_size).max(axis=0)
    out = np.maximum(rows[:, None], cols[None, :]).reshape(ops.dst.shape)
    if ops.accumulate is not False:
        out = np.maximum(out, taints["dst"])
    return out


def _gpsimd_rows(taints: dict[str, np.ndarray], ops: Any) -> np.ndarray:
    """nonzero_with_count: each computed partition of dst depends on the whole partition of src."""
    p = ops.src.partitions
    rows = taints["src"].reshape(p, -1).max(axis=1)
    out = np.zeros((ops.dst.partitions, ops.dst.size // ops.dst.partitions), dtype=np.int32)
    out[0:p:_GPSIMD_STRIDE] = rows[0:p:_GPSIMD_STRIDE, None]
    return out.reshape(ops.dst.shape)


def _reduced(taints: dict[str, np.ndarray], ops: Any) -> np.ndarray:
    """tensor_reduce: each dst element depends on the elements of ``data`` it reduces."""
    axes = (ops.axis,) if isinstance(ops.axis, int) else tuple(ops.axis)
    return taints["data"].max(axis=axes).reshape(ops.dst.shape)


def _shuffled(taints: dict[str, np.ndarray], ops: Any) -> np.ndarray:
    """nc_stream_shuffle: within each quadrant dst partition i gets src partition mask[i]; 255 keeps dst's."""
    p = ops.dst.partitions
    out = taints["dst"].reshape(p, -1).copy()
    src = taints["src"].reshape(ops.src.partitions, -1)
    rows = np.arange(p)
    mask = np.asarray(ops.shuffle_mask, dtype=np.int64)[rows % _QUADRANT]
    moved = mask != _SHUFFLE_KEEP
    out[moved] = src[(rows - rows % _QUADRANT + mask)[moved]]
    return out.reshape(ops.dst.shape)


def _untraced(taints: dict[str, np.ndarray], ops: Any) -> None:
    return None


#: ``rule(ops, hw) -> Carrier | None``: declared on an instruction spec (``carries=``); None: this call
#: uses its inputs (the sanitizer reports never-written elements at once).
CarrierRule = Callable[[Any, HwConfig], "Carrier | None"]


def carries(*srcs: str, taint: TaintMap = _same_order) -> CarrierRule:
    """The rule of an instruction that always carries ``srcs`` to ``dst`` through ``taint``."""
    found = Carrier(srcs, taint)
    return lambda ops, hw: found


def transposing(name: str) -> CarrierRule:
    """The rule of a transpose of operand ``name``."""
    return carries(name, taint=_transposed(name))


def dma_copy_carrier(ops: Any, hw: HwConfig) -> Carrier | None:
    """A copy between static on-chip views carries; one to or from HBM, or read-modify-write, does not."""
    on_chip = all(t.buffer.is_on_chip and not t.is_dynamic for t in (ops.src, ops.dst))
    return Carrier(("src",), _same_order) if on_chip and ops.dst_rmw_op is None else None


def activation_carrier(ops: Any, hw: HwConfig) -> Carrier | None:
    """Elementwise unless it also reduces (a reduction uses every input)."""
    if ops.reduce_res is None and ops.reduce_cmd.name == "idle":
        return Carrier(("data", "bias", "scale"), _elementwise)
    return None


def matmul_carrier(ops: Any, hw: HwConfig) -> Carrier | None:
    """A transposing matmul moves stationary; a plain one mixes a column of each (and dst when accumulating)."""
    if ops.is_transpose:
        exact = hw.capabilities.transpose_passes_dtype
        return Carrier(("stationary",), _transposed("stationary") if exact else _matmul_rows)
    if ops.perf_mode.name == "none" and not ops.tile_position:
        return Carrier(("stationary", "moving", "dst"), _matmul)
    return None


ELEMENTWISE_TENSOR_SCALAR = carries("data", "operand0", "operand1", taint=_elementwise)
ELEMENTWISE_TENSOR_TENSOR = carries("data1", "data2", taint=_elementwise)
ELEMENTWISE_DATA = carries("data", taint=_elementwise)
REDUCES_DATA = carries("data", taint=_reduced)
#: "dst": the taint of the partitions it leaves unchanged.
SHUFFLES = carries("src", "dst", taint=_shuffled)
GPSIMD_ROWS = carries("src", taint=_gpsimd_rows)
#: sendrecv: dst is the other core's, not traced here.
SENDS = carries("src", taint=_untraced)
COPIES = carries("src")
