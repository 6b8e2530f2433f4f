"""On-chip data movement: predicated copies, gathers and partition shuffles.

``tensor_copy_predicated`` and ``nc_stream_shuffle`` run on the Vector Engine;
``local_gather`` and ``nc_n_gather`` on the GpSimd Engine. All of them move bits
unchanged (source and destination share a dtype). The DMA data movers
(``dma_copy``, ``dma_transpose``, ``dma_compute``) are in :mod:`nkisim.isa.dma`.
"""

from __future__ import annotations

import math

import numpy as np

from nkisim.errors import BoundsError, DtypeError, OperandError, ShapeError
from nkisim.hw import Engine, HwConfig
from nkisim.isa.carriers import SHUFFLES
from nkisim.isa.common import (
    as_rows,
    check_in,
    check_not_both_psum,
    check_same_layout,
    check_same_partitions,
    same_format,
)
from nkisim.isa.spec import Check, Cost, EngineState, In, InOut, Operands, Out, ScalarOrIn, engine_cost, instruction
from nkisim.isa.vector import per_element_cost
from nkisim.memory import Buffer, Tensor, cast, dtype_name, is_integer

#: Partitions wired to each of the 8 GpSimd cores [nki.isa.local_gather].
CORE_PARTITIONS = 16
#: Partitions in a quadrant, the unit of ``nc_stream_shuffle`` [nki.isa.nc_stream_shuffle].
QUADRANT = 32
#: ``shuffle_mask`` value that leaves a destination partition unchanged.
SHUFFLE_KEEP = 255
LOCAL_GATHER_ELEMS_PER_IDX = (1, 2, 4, 8, 16, 32)
LOCAL_GATHER_MAX_INDICES = 4096
PREDICATE_DTYPES = (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32))


def start_partition(t: Tensor) -> int:
    """The first partition an on-chip view accesses."""
    return t.byte_offset // t.storage.row_bytes


def bits(a: np.ndarray) -> np.ndarray:
    """The bit patterns of ``a`` as unsigned integers (so selections never touch float values)."""
    return np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}"))


def check_same_dtype(chk: Check, a_name: str, a: Tensor, b_name: str, b: Tensor) -> None:
    if not same_format(a, b):
        chk.fail(DtypeError, b_name, f"dtype {dtype_name(b.dtype)} differs from {a_name} dtype {dtype_name(a.dtype)}")


#: Why a gather's outcome besides its values depends on them (``InstructionSpec.value_dependent``).
_RAISES_ON_INDICES = "reads indices from tensor data and raises on out-of-range ones"


def _index_error(instruction: str, operand: str, rule: str) -> BoundsError:
    """An error about index values, found while executing (the kernel line is found from the stack)."""
    return BoundsError(rule, instruction=f"nisa.{instruction}", operand=operand)


# -- tensor_copy_predicated -----------------------------------------------------------


class TensorCopyPredicatedOps(Operands):
    dst: InOut
    src: ScalarOrIn
    predicate: In
    reverse_pred: bool = False


def _tensor_copy_predicated_validate(ops: TensorCopyPredicatedOps, chk: Check) -> None:
    if ops.predicate.dtype not in PREDICATE_DTYPES:
        chk.fail(DtypeError, "predicate", f"dtype {dtype_name(ops.predicate.dtype)} must be uint8, uint16 or uint32")
    check_same_layout(chk, "dst", ops.dst, "predicate", ops.predicate)
    if isinstance(ops.src, Tensor):
        check_same_layout(chk, "dst", ops.dst, "src", ops.src)
        check_same_dtype(chk, "dst", ops.dst, "src", ops.src)
        check_not_both_psum(chk, "src", ops.src, "predicate", ops.predicate)
    elif is_integer(ops.dst.dtype) and float(ops.src) != int(ops.src):
        chk.fail(DtypeError, "src", f"{ops.src} is not an integer, as dst dtype {dtype_name(ops.dst.dtype)} requires")


def _tensor_copy_predicated_cost(ops: TensorCopyPredicatedOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, 2N)`` Vector cycles with src and predicate both in SBUF, else ``max(MIN_II, N)``.

    A scalar ``src`` leaves the predicate as the only tensor input: ``max(MIN_II, N)``.
    """
    both_sbuf = isinstance(ops.src, Tensor) and ops.src.buffer is ops.predicate.buffer is Buffer.sbuf
    per_element = hw.vector.two_sbuf_inputs_cycles_per_element if both_sbuf else 1.0
    return per_element_cost(engine, hw, ops.dst.free_size, per_element)


@instruction(
    "tensor_copy_predicated",
    TensorCopyPredicatedOps,
    engines=(Engine.vector,),
    cost=_tensor_copy_predicated_cost,
    validate=_tensor_copy_predicated_validate,
    dtypes="src any, dst = src dtype (scalar src: cast); predicate uint8/16/32",
)
def tensor_copy_predicated(ops: TensorCopyPredicatedOps, state: EngineState) -> None:
    """``dst = src`` where ``predicate != 0`` (``== 0`` with ``reverse_pred``); elsewhere dst is unchanged.

    A tensor ``src`` is copied bit for bit; a scalar is converted to dst's dtype as an
    engine writes a float32 value.
    """
    dst = ops.dst
    take = ops.predicate.array.reshape(-1) != 0
    if ops.reverse_pred:
        take = ~take
    old = bits(dst.array).reshape(-1)
    if isinstance(ops.src, Tensor):
        new = bits(ops.src.array).reshape(-1)
    else:
        new = bits(cast(np.full(old.shape, ops.src, dtype=np.float32), dst.dtype))
    dst.array[...] = np.where(take, new, old).view(dst.dtype).reshape(dst.shape)


# -- local_gather ---------------------------------------------------------------------


class LocalGatherOps(Operands):
    dst: Out
    src_buffer: In
    index: In
    num_elem_per_idx: int = 1
    num_valid_indices: int | None = None


def num_valid(ops: LocalGatherOps) -> int:
    """Indices used by each GpSimd core: ``num_valid_indices``, or all of its 16 partitions' indices."""
    if ops.num_valid_indices is not None:
        return ops.num_valid_indices
    return CORE_PARTITIONS * ops.index.free_size


def _local_gather_validate(ops: LocalGatherOps, chk: Check) -> None:
    for name in ("dst", "src_buffer", "index"):
        check_in(chk, name, getattr(ops, name), Buffer.sbuf)
    if ops.index.dtype != np.uint16:
        chk.fail(DtypeError, "index", f"dtype {dtype_name(ops.index.dtype)} must be uint16")
    check_same_dtype(chk, "src_buffer", ops.src_buffer, "dst", ops.dst)
    check_same_partitions(chk, "src_buffer", ops.src_buffer, "index", ops.index)
    if ops.src_buffer.partitions % CORE_PARTITIONS:
        chk.fail(
            ShapeError,
            "src_buffer",
            f"partition dim {ops.src_buffer.partitions} is not a multiple of {CORE_PARTITIONS}",
        )
    check_same_partitions(chk, "src_buffer", ops.src_buffer, "dst", ops.dst)
    nepi = ops.num_elem_per_idx
    if nepi not in LOCAL_GATHER_ELEMS_PER_IDX:
        chk.fail(OperandError, "num_elem_per_idx", f"{nepi} must be one of {list(LOCAL_GATHER_ELEMS_PER_IDX)}")
    per_core = CORE_PARTITIONS * ops.index.free_size
    valid = num_valid(ops)
    if not 1 <= valid <= per_core:
        chk.fail(
            OperandError,
            "num_valid_indices",
            f"{valid} must be from 1 to the {per_core} indices in each core's 16 partitions of index",
        )
    if valid > LOCAL_GATHER_MAX_INDICES:
        chk.fail(OperandError, "num_valid_indices", f"{valid} indices per core exceed {LOCAL_GATHER_MAX_INDICES}")
    if ops.dst.free_size != valid * nepi:
        chk.fail(
            ShapeError,
            "dst",
            f"has {ops.dst.free_size} elements per partition; {valid} indices x {nepi} elements give {valid * nepi}",
        )


def _local_gather_cost(ops: LocalGatherOps, hw: HwConfig, engine: Engine) -> Cost:
    """``GPSIMD_START + v * n * C`` GpSimd cycles, ``C = (28 + 4n) / (4n) / min(4 / dtype bytes, n)``.

    ``v = num_valid_indices`` and ``n = num_elem_per_idx``. NKI 0.1's estimate is
    ``150 + v * n / C`` with ``C = ((28 + t * n) / (t * n)) / min(4 / dtype_size, n)``
    and ``t = 4``. ``C`` is cycles per element (the overhead of 28 cycles per batch
    of ``t`` indices, then 32 bits per partition per cycle), so nkisim multiplies.
    """
    cfg = hw.gpsimd
    n = ops.num_elem_per_idx
    batch = cfg.local_gather_batch_indices * n
    per_lane = min(cfg.lane_bytes / ops.src_buffer.itemsize, n)
    per_element = (cfg.local_gather_batch_overhead_cycles + batch) / batch / per_lane
    return engine_cost(hw, engine, cfg.startup_cycles + num_valid(ops) * n * per_element)


@instruction(
    "local_gather",
    LocalGatherOps,
    engines=(Engine.gpsimd,),
    cost=_local_gather_cost,
    validate=_local_gather_validate,
    dtypes="any; dst = src_buffer dtype (no cast); index uint16",
    value_dependent=lambda ops: _RAISES_ON_INDICES,
)
def local_gather(ops: LocalGatherOps, state: EngineState) -> None:
    """Each GpSimd core gathers within its 16 partitions with the same element offsets for all of them.

    Core ``c`` flattens ``index[16c:16c+16]`` partition-first (column-major) and keeps
    the first ``num_valid_indices``. Every partition ``p`` of the core then takes, for
    each index ``i`` in turn, its own elements ``src_buffer[p].flat[i:i + num_elem_per_idx]``.
    """
    p = ops.src_buffer.partitions
    cores = p // CORE_PARTITIONS
    nepi = ops.num_elem_per_idx
    src = as_rows(ops.src_buffer.array, p)
    idx = as_rows(ops.index.array, p).astype(np.int64)
    per_core = idx.reshape(cores, CORE_PARTITIONS, -1).transpose(0, 2, 1).reshape(cores, -1)[:, : num_valid(ops)]
    offsets = (per_core[:, :, None] + np.arange(nepi)).reshape(cores, -1)
    if offsets.size and offsets.max() >= src.shape[1]:
        bad = int(per_core[(per_core + nepi > src.shape[1])][0])
        raise _index_error(
            "local_gather",
            "index",
            f"value {bad} + num_elem_per_idx {nepi} reaches past the {src.shape[1]} elements per partition "
            "of src_buffer (undefined on hardware)",
        )
    gathered = np.take_along_axis(src, np.repeat(offsets, CORE_PARTITIONS, axis=0), axis=1)
    ops.dst.array[...] = gathered.reshape(ops.dst.shape)


# -- nc_n_gather ----------------------------------------------------------------------


class NcNGatherOps(Operands):
    dst: Out
    data: In
    indices: In


def _nc_n_gather_validate(ops: NcNGatherOps, chk: Check) -> None:
    for name in ("dst", "data", "indices"):
        check_in(chk, name, getattr(ops, name), Buffer.sbuf)
    if ops.indices.dtype != np.uint32:
        chk.fail(DtypeError, "indices", f"dtype {dtype_name(ops.indices.dtype)} must be uint32")
    check_same_dtype(chk, "data", ops.data, "dst", ops.dst)
    check_same_partitions(chk, "data", ops.data, "indices", ops.indices)
    check_same_layout(chk, "indices", ops.indices, "dst", ops.dst)


def _nc_n_gather_cost(ops: NcNGatherOps, hw: HwConfig, engine: Engine) -> Cost:
    """``ceil(N / 512) * GPSIMD_START + N`` GpSimd cycles, ``N`` the gathered elements per partition (estimate).

    Not published: the docs say only that the instruction is ``ceil(N / 512)``
    groups of ISA instructions; each group is charged the GpSimd start-up, and
    each element one cycle (a core moves 32 bits per partition per cycle).
    """
    n_out = ops.dst.free_size
    groups = math.ceil(n_out / hw.gpsimd.n_gather_group_elements)
    return engine_cost(hw, engine, groups * hw.gpsimd.startup_cycles + n_out)


@instruction(
    "nc_n_gather",
    NcNGatherOps,
    engines=(Engine.gpsimd,),
    cost=_nc_n_gather_cost,
    validate=_nc_n_gather_validate,
    dtypes="data any, dst = data dtype; indices uint32",
    value_dependent=lambda ops: _RAISES_ON_INDICES,
)
def nc_n_gather(ops: NcNGatherOps, state: EngineState) -> None:
    """``dst[p].flat[j] = data[p].flat[indices[p].flat[j]]`` in every partition ``p``, bit for bit."""
    p = ops.data.partitions
    data = as_rows(ops.data.array, p)
    idx = as_rows(ops.indices.array, p).astype(np.int64)
    if idx.size and idx.max() >= data.shape[1]:
        raise _index_error(
            "nc_n_gather",
            "indices",
            f"value {int(idx.max())} is outside [0, {data.shape[1]}), the elements per partition of data",
        )
    ops.dst.array[...] = np.take_along_axis(data, idx, axis=1).reshape(ops.dst.shape)


# -- nc_stream_shuffle ----------------------------------------------------------------


class NcStreamShuffleOps(Operands):
    dst: InOut
    src: In
    shuffle_mask: list[int]


def _allowed_starts(active: int) -> tuple[int, ...]:
    return {QUADRANT: (0, 32, 64, 96), 2 * QUADRANT: (0, 64)}.get(active, (0,))


def _nc_stream_shuffle_validate(ops: NcStreamShuffleOps, chk: Check) -> None:
    check_same_dtype(chk, "src", ops.src, "dst", ops.dst)
    if ops.src.free_size != ops.dst.free_size:
        chk.fail(
            ShapeError,
            "dst",
            f"has {ops.dst.free_size} elements per partition but src has {ops.src.free_size}",
        )
    mask = ops.shuffle_mask
    if len(mask) != QUADRANT:
        chk.fail(OperandError, "shuffle_mask", f"has {len(mask)} elements; it must have {QUADRANT}")
    for i, m in enumerate(mask):
        if not (0 <= m < QUADRANT or m == SHUFFLE_KEEP):
            chk.fail(OperandError, f"shuffle_mask[{i}]", f"{m} must be a partition 0 to 31, or 255 (keep)")
    active = math.ceil(max(ops.src.partitions, ops.dst.partitions) / QUADRANT) * QUADRANT
    for name, t in (("src", ops.src), ("dst", ops.dst)):
        start = start_partition(t)
        if start not in _allowed_starts(active):
            allowed = "/".join(str(s) for s in _allowed_starts(active))
            chk.fail(
                ShapeError,
                name,
                f"starts at partition {start}; with {active} active partitions it must start at {allowed}",
            )
    for d in range(ops.dst.partitions):
        m = mask[d % QUADRANT]
        if m != SHUFFLE_KEEP and d - d % QUADRANT + m >= ops.src.partitions:
            chk.fail(
                ShapeError,
                f"shuffle_mask[{d % QUADRANT}]",
                f"{m} sends src partition {d - d % QUADRANT + m} to dst partition {d}, "
                f"but src has {ops.src.partitions} partitions",
            )


def _nc_stream_shuffle_cost(ops: NcStreamShuffleOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N)`` Vector cycles."""
    return per_element_cost(engine, hw, ops.src.free_size)


@instruction(
    "nc_stream_shuffle",
    NcStreamShuffleOps,
    carries=SHUFFLES,
    engines=(Engine.vector,),
    cost=_nc_stream_shuffle_cost,
    validate=_nc_stream_shuffle_validate,
    dtypes="any; dst = src dtype",
)
def nc_stream_shuffle(ops: NcStreamShuffleOps, state: EngineState) -> None:
    """Within each 32-partition quadrant, ``dst[i] = src[shuffle_mask[i]]``; 255 leaves ``dst[i]`` unchanged.

    Partitions count from each view's first partition; the same mask serves every quadrant.
    """
    n_dst = ops.dst.partitions
    d = np.arange(n_dst)
    m = np.asarray(ops.shuffle_mask, dtype=np.int64)[d % QUADRANT]
    moved = m != SHUFFLE_KEEP
    src = bits(as_rows(ops.src.array, ops.src.partitions))
    out = bits(as_rows(ops.dst.array, n_dst)).copy()
    out[moved] = src[(d - d % QUADRANT + m)[moved]]
    ops.dst.array[...] = out.view(ops.dst.dtype).reshape(ops.dst.shape)
