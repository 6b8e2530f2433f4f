"""Tensor Engine instructions: matmul into PSUM, and transposes."""

from __future__ import annotations

import numba
import numpy as np

from nkisim.errors import DtypeError, OperandError, ShapeError
from nkisim.hw import Engine, HwConfig
from nkisim.isa import enums
from nkisim.isa.carriers import matmul_carrier, transposing
from nkisim.isa.common import check_in, f32
from nkisim.isa.enums import matmul_perf_mode
from nkisim.isa.spec import (
    Check,
    Cost,
    EngineState,
    In,
    Operands,
    Out,
    engine_cost,
    instruction,
    require,
    sets_all_of_dst,
)
from nkisim.isa.vector import per_element_cost
from nkisim.memory import Buffer, Tensor, cast, dtype_name, is_float8, to_dtype
from nkisim.memory.dtypes import is_tfloat32

_FP32 = to_dtype("float32")


def _has_dtype(names: tuple[str, ...], t: Tensor) -> bool:
    """True when ``t``'s dtype is one of the NKI dtype ``names`` (tfloat32 is float32's bits)."""
    return dtype_name(t.dtype) in names or (t.dtype == _FP32 and "float32" in names)


def _is_fp32_class(t: Tensor) -> bool:
    return t.dtype == _FP32  # tfloat32 compares equal to float32


# -- nc_matmul ------------------------------------------------------------------------


class NcMatmulOps(Operands):
    dst: Out
    stationary: In
    moving: In
    is_stationary_onezero: bool = False
    is_moving_onezero: bool = False
    is_transpose: bool = False
    accumulate: bool | None = None
    tile_position: tuple[int, ...] | list[int] = ()
    tile_size: tuple[int, ...] | list[int] = ()
    perf_mode: enums.matmul_perf_mode = enums.matmul_perf_mode.none


def _contraction_layout(ops: NcMatmulOps) -> tuple[int, int, int]:
    """(K, M, N): contraction size, stationary free size, moving free size."""
    rows = 2 if ops.perf_mode is matmul_perf_mode.double_row else 1
    k = ops.stationary.partitions * rows
    return k, ops.stationary.free_size // rows, ops.moving.free_size // rows


def _nc_matmul_validate(ops: NcMatmulOps, chk: Check) -> None:
    hw = chk.hw
    check_in(chk, "stationary", ops.stationary, Buffer.sbuf)
    check_in(chk, "moving", ops.moving, Buffer.sbuf)
    check_in(chk, "dst", ops.dst, Buffer.psum)
    caps = hw.capabilities
    for name, t in (("stationary", ops.stationary), ("moving", ops.moving)):
        if not _has_dtype(caps.matmul_input_dtypes, t):
            chk.fail(DtypeError, name, f"dtype {dtype_name(t.dtype)} is not a Tensor Engine input type")
    if _is_fp32_class(ops.stationary) != _is_fp32_class(ops.moving):
        chk.fail(DtypeError, "moving", "float32/tfloat32 inputs must be paired with float32/tfloat32")
    if ops.stationary.partitions != ops.moving.partitions:
        chk.fail(
            ShapeError,
            "moving",
            f"contraction dim {ops.moving.partitions} differs from stationary's {ops.stationary.partitions}",
        )
    if ops.perf_mode is matmul_perf_mode.double_row:
        _check_double_row(ops, chk)
    rows, cols = _tile_shape(ops, chk)
    k, m, n = _contraction_layout(ops)
    if ops.stationary.partitions > rows:
        chk.fail(
            ShapeError, "stationary", f"partition dim {ops.stationary.partitions} exceeds the PE tile's {rows} rows"
        )
    if m > cols:
        chk.fail(ShapeError, "stationary", f"free size {m} exceeds the PE tile's {cols} columns")
    n_max = _moving_fmax(ops, hw)
    if n > n_max:
        chk.fail(ShapeError, "moving", f"free size {n} exceeds {n_max} for a {dtype_name(ops.dst.dtype)} dst")
    if ops.is_transpose and caps.transpose_passes_dtype:
        if ops.dst.dtype != ops.stationary.dtype:
            chk.fail(DtypeError, "dst", "must have the dtype of stationary in transpose mode")
        if n != k:
            chk.fail(ShapeError, "moving", f"free size {n} must equal the contraction size {k} in transpose mode")
    elif not _has_dtype(caps.matmul_output_dtypes, ops.dst):
        allowed = " or ".join(caps.matmul_output_dtypes)
        chk.fail(DtypeError, "dst", f"dtype {dtype_name(ops.dst.dtype)} must be {allowed}")
    if ops.dst.partitions != m or ops.dst.free_size != n:
        chk.fail(ShapeError, "dst", f"shape {list(ops.dst.shape)} must hold the [{m}, {n}] result")
    banks = caps.matmul_dst_psum_banks
    if ops.dst.free_size * ops.dst.itemsize > hw.psum.bank_bytes * banks:
        chk.fail(
            ShapeError, "dst", "does not fit in one PSUM bank" if banks == 1 else f"does not fit in {banks} PSUM banks"
        )


def _moving_fmax(ops: NcMatmulOps, hw: HwConfig) -> int:
    """``tensor.moving_fmax`` fp32 values, as dst bytes: 512 on trn1/trn2; 4096 fp32 or 8192 bf16 on trn3."""
    return hw.tensor.moving_fmax * 4 // ops.dst.itemsize


def _check_double_row(ops: NcMatmulOps, chk: Check) -> None:
    require(chk, "matmul_double_row", "perf_mode", "double_row needs NeuronCore-v3 or newer")
    for name, t in (("stationary", ops.stationary), ("moving", ops.moving)):
        if not is_float8(t.dtype):
            chk.fail(DtypeError, name, f"dtype {dtype_name(t.dtype)} must be float8 in double_row mode")
        if t.ndim < 3 or t.shape[1] != 2:
            chk.fail(ShapeError, name, f"shape {list(t.shape)} must be [P, 2, F] in double_row mode")
    if ops.tile_size and ops.tile_size[1] != chk.hw.tensor.columns:
        chk.fail(OperandError, "perf_mode", "double_row cannot be combined with column tiling")


def _tile_shape(ops: NcMatmulOps, chk: Check) -> tuple[int, int]:
    hw = chk.hw.tensor
    if not ops.tile_position and not ops.tile_size:
        return hw.rows, hw.columns
    if len(ops.tile_position) != 2 or len(ops.tile_size) != 2:
        chk.fail(OperandError, "tile_position", "and tile_size must both be 2-tuples to enable PE tiling")
    legal = set(chk.hw.capabilities.pe_tile_sizes)
    for name, size in zip(("row", "column"), ops.tile_size):
        if size not in legal:
            chk.fail(OperandError, "tile_size", f"{name} size {size} must be one of {sorted(legal)}")
    for name, pos, size in zip(("row", "column"), ops.tile_position, ops.tile_size):
        if pos < 0 or pos % size or pos + size > 128:
            chk.fail(OperandError, "tile_position", f"start {name} {pos} must be a multiple of {size} within 128")
    return ops.tile_size[0], ops.tile_size[1]


def _nc_matmul_cost(ops: NcMatmulOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(min(64, M), N)`` PE cycles, x4 for fp32/tf32 (x2 if is_*_onezero; x1 if is_transpose on v3+).

    ``M`` and ``N`` are the stationary and moving free sizes (each halved in
    ``double_row`` mode, which doubles the contraction instead).

    The stationary tile is loaded first (fast LoadStationary: ``M / 4`` cycles, in the
    background of the previous matmul; none when the previous matmul used the same tile).

    PE tiling: the docs let matmuls on disjoint row/column tiles of the 128x128 array
    run in parallel, but publish no cost for it. nkisim charges a tiled matmul the same
    formula over its own M and N and runs Tensor Engine instructions one after another,
    so kernels that overlap small matmuls on disjoint tiles are over-estimated (by up
    to the number of tiles in flight).
    """
    k, m, n = _contraction_layout(ops)
    factor = 1
    if _is_fp32_class(ops.stationary) and not (ops.is_transpose and hw.capabilities.transpose_passes_dtype):
        onezero = ops.is_stationary_onezero or ops.is_moving_onezero
        factor = hw.tensor.fp32_cycle_factor // (2 if onezero else 1)
    cycles = max(min(hw.tensor.matmul_min_ii_cycles, m), n) * factor
    load_stationary_ns = m * hw.tensor.load_stationary_cycles_per_column * factor / hw.tensor.clock_ghz
    region = ops.stationary.region if not ops.stationary.is_dynamic else None
    return engine_cost(
        hw,
        engine,
        cycles,
        flops=2.0 * k * m * n,
        setup_ns=load_stationary_ns,
        setup_key=region,
    )


def matmul_accumulates(ops: NcMatmulOps) -> bool | None:
    """``accumulate=True`` adds onto PSUM, ``None`` adds where this tile's matmuls wrote before."""
    return ops.accumulate


@instruction(
    "nc_matmul",
    NcMatmulOps,
    carries=matmul_carrier,
    engines=(Engine.tensor,),
    cost=_nc_matmul_cost,
    validate=_nc_matmul_validate,
    accumulates=matmul_accumulates,
    # accumulate=None adds only where this tile's own matmuls wrote: nowhere in a tile never written
    overwrites=lambda ops: ops.accumulate is not True,
    # narrow inputs are widened into new float32 arrays (or, transposed, copied bit for bit) whatever their layout;
    # BLAS given float32 views in place may round otherwise for other strides
    reads_values=lambda ops: not _is_fp32_class(ops.stationary) and not _is_fp32_class(ops.moving),
    dtypes="inputs fp8/bf16/fp16/tf32/fp32 (fp32/tf32 only with each other), dst fp32 (v4: or bf16)",
)
def nc_matmul(ops: NcMatmulOps, state: EngineState) -> None:
    """``dst = stationary.T @ moving`` in float32, accumulated in PSUM.

    ``accumulate=None`` (the default): the first matmul write to a PSUM location
    after it is allocated overwrites it; later writes add to it, as NKI 0.2's
    accumulation groups do. ``accumulate=False`` always overwrites and
    ``accumulate=True`` always adds to the current contents (NKI 0.3+). On
    NeuronCore-v3 and newer, ``is_transpose`` copies ``stationary.T`` bit-exactly.
    """
    k, m, n = _contraction_layout(ops)
    if ops.is_transpose and state.capabilities.transpose_passes_dtype:
        ops.dst.array[...] = ops.stationary.array.reshape(k, m).T.reshape(ops.dst.shape)
        return
    stationary = f32(ops.stationary).reshape(k, m)
    moving = f32(ops.moving).reshape(k, n)
    product = stationary.T @ moving
    _accumulate(ops.dst, product, ops.accumulate)


def _accumulate(dst: Tensor, product: np.ndarray, accumulate: bool | None = None) -> None:
    """Write ``product`` to PSUM ``dst``, overwriting or adding as ``accumulate`` says.

    ``None`` infers it per byte, as the compiler does per tile: add where this tile's
    own matmuls wrote before, overwrite bytes never written by a matmul through this
    tile (fresh ones, or ones another tile at the same address wrote).
    A float32 ``dst`` of two dims is one compiled pass (:func:`accumulate_f32`); the
    others take :func:`accumulate_reference`, which gives the same bits.
    """
    storage = dst.storage
    owners_storage = storage.acc_flags
    assert owners_storage is not None
    owners = np.ndarray(dst.shape, np.int32, owners_storage, dst.byte_offset * 2, _owner_strides(dst))
    product = product.reshape(dst.shape)
    mark = storage.acc_mark(dst.uid)
    written = (dst.byte_offset, dst.array.shape, dst.array.strides, mark)
    if dst.array.ndim == 2 and dst.dtype == _FP32 and not is_tfloat32(dst.dtype) and product.dtype == _FP32:
        if storage.acc_known == written and accumulate is not False:
            # this view's marks are all its own (its previous matmul wrote them): add, without reading the marks
            add_f32(dst.array, product)
            return
        mode = _INFER if accumulate is None else _ADD if accumulate else _OVERWRITE
        accumulate_f32(dst.array, owners, product, mark, mode)
    else:
        accumulate_reference(dst.array, owners, product, mark, accumulate)
    storage.acc_known = written


_INFER, _ADD, _OVERWRITE = 0, 1, 2


@numba.njit(cache=True, nogil=True)
def accumulate_f32(dst: np.ndarray, owners: np.ndarray, product: np.ndarray, mark: int, mode: int) -> None:
    """:func:`accumulate_reference` for float32 ``dst`` and ``product`` in one pass (``mode``: 0 infer, 1 add,
    2 overwrite)."""
    rows, cols = dst.shape
    for r in range(rows):
        for c in range(cols):
            if mode == _ADD or (mode == _INFER and owners[r, c] == mark):
                dst[r, c] = dst[r, c] + product[r, c]
            else:
                dst[r, c] = product[r, c]
            owners[r, c] = mark


@numba.njit(cache=True, nogil=True)
def add_f32(dst: np.ndarray, product: np.ndarray) -> None:
    """``dst += product`` as :func:`accumulate_f32` adds: the same bits (of two NaNs the accumulator's payload
    stays, where numpy's loops may keep either), and no floating-point warnings."""
    rows, cols = dst.shape
    for r in range(rows):
        for c in range(cols):
            dst[r, c] = dst[r, c] + product[r, c]


def accumulate_reference(
    dst: np.ndarray, owners: np.ndarray, product: np.ndarray, mark: int, accumulate: bool | None
) -> None:
    """The PSUM write in numpy: add onto ``dst`` (float32 math, cast to its dtype) where ``accumulate`` is True,
    or, for None, where ``owners`` holds ``mark``; overwrite elsewhere. ``owners`` becomes ``mark``."""
    if accumulate is not None:  # NKI 0.3+: explicit overwrite or accumulate, whatever wrote dst before
        total = dst.astype(np.float32, copy=False) + product if accumulate else product
    else:
        mine = owners == mark
        if not mine.any():
            total = product
        elif mine.all():
            total = dst.astype(np.float32, copy=False) + product
        else:
            total = np.where(mine, dst.astype(np.float32, copy=False) + product, product)
    dst[...] = cast(total, dst.dtype)
    owners[...] = mark


def _owner_strides(dst: Tensor) -> tuple[int, ...]:
    """``dst``'s byte strides over the owner array (a four-byte mark per two PSUM bytes)."""
    return tuple(stride * 2 for stride in dst.array.strides)


# -- nc_transpose ---------------------------------------------------------------------


class NcTransposeOps(Operands):
    dst: Out
    data: In
    engine: Engine = Engine.unknown


def _nc_transpose_engine(ops: NcTransposeOps, hw: HwConfig) -> Engine:
    if ops.data.buffer is Buffer.sbuf and ops.dst.buffer is Buffer.psum:
        return Engine.tensor
    return Engine.vector


def _nc_transpose_validate(ops: NcTransposeOps, chk: Check) -> None:
    limit = chk.hw.tensor.rows if chk.engine is Engine.tensor else 32
    p, f = ops.data.partitions, ops.data.free_size
    if p > limit or f > limit:
        chk.fail(ShapeError, "data", f"shape [{p}, {f}] exceeds [{limit}, {limit}] on the {chk.engine.title} Engine")
    if chk.engine is Engine.tensor:
        check_in(chk, "data", ops.data, Buffer.sbuf)
        check_in(chk, "dst", ops.dst, Buffer.psum)
    if ops.dst.dtype != ops.data.dtype:
        chk.fail(DtypeError, "dst", f"dtype {dtype_name(ops.dst.dtype)} must equal data's {dtype_name(ops.data.dtype)}")
    if ops.dst.partitions != f or ops.dst.free_size != p:
        chk.fail(ShapeError, "dst", f"shape {list(ops.dst.shape)} must be [{f}, {p}]")


def _nc_transpose_cost(ops: NcTransposeOps, hw: HwConfig, engine: Engine) -> Cost:
    """Tensor: ``max(P, min(64, F))`` PE cycles; Vector: ``max(MIN_II, F)`` cycles; data is ``P`` partitions x ``F``."""
    p, f = ops.data.partitions, ops.data.free_size
    if engine is Engine.tensor:
        return engine_cost(hw, engine, max(p, min(hw.tensor.matmul_min_ii_cycles, f)))
    return per_element_cost(engine, hw, f)


@instruction(
    "nc_transpose",
    NcTransposeOps,
    carries=transposing("data"),
    engines=(Engine.tensor, Engine.vector),
    cost=_nc_transpose_cost,
    validate=_nc_transpose_validate,
    choose_engine=_nc_transpose_engine,
    dtypes="any; dst = data dtype",
    overwrites=sets_all_of_dst,
)
def nc_transpose(ops: NcTransposeOps, state: EngineState) -> None:
    """Swap the partition dim with the (flattened) free dims, bit-exactly."""
    p = ops.data.partitions
    flat = ops.data.array.reshape(p, -1)
    ops.dst.array[...] = flat.T.reshape(ops.dst.shape)
