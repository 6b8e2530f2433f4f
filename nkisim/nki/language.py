"""``nki.language`` for nkisim: data types, buffers, tensor creation, loops and operator constants.

Kernels use it exactly as NKI's: ``import nkisim.nki.language as nl``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nkisim.errors import DtypeError, OperandError, ShapeError, user_location
from nkisim.frontend.context import current_context, is_running
from nkisim.hw import load_target
from nkisim.isa.ops import OPS
from nkisim.memory import Buffer, DynSlice, Tensor, to_dtype
from nkisim.memory.dtypes import NKI_DTYPES

# -- data types -----------------------------------------------------------------------
bool_ = NKI_DTYPES["bool_"]
int8 = NKI_DTYPES["int8"]
int16 = NKI_DTYPES["int16"]
int32 = NKI_DTYPES["int32"]
uint8 = NKI_DTYPES["uint8"]
uint16 = NKI_DTYPES["uint16"]
uint32 = NKI_DTYPES["uint32"]
float16 = NKI_DTYPES["float16"]
bfloat16 = NKI_DTYPES["bfloat16"]
tfloat32 = NKI_DTYPES["tfloat32"]
float32 = NKI_DTYPES["float32"]
float8_e4m3 = NKI_DTYPES["float8_e4m3"]
float8_e5m2 = NKI_DTYPES["float8_e5m2"]
float8_e4m3fn = NKI_DTYPES["float8_e4m3fn"]

# -- buffers --------------------------------------------------------------------------
sbuf = Buffer.sbuf
psum = Buffer.psum
hbm = Buffer.hbm
private_hbm = Buffer.private_hbm
shared_hbm = Buffer.shared_hbm


def _buffer(value: Any) -> Buffer:
    if value is None:
        return Buffer.sbuf
    try:
        return Buffer(value)
    except ValueError:
        raise OperandError(
            f"unknown buffer {value!r}; use nl.sbuf, nl.psum, nl.hbm, nl.private_hbm or nl.shared_hbm"
        ) from None


def is_sbuf(buffer: Any) -> bool:
    return _buffer(buffer) is Buffer.sbuf


def is_psum(buffer: Any) -> bool:
    return _buffer(buffer) is Buffer.psum


def is_hbm(buffer: Any) -> bool:
    return _buffer(buffer).is_hbm


def is_on_chip(buffer: Any) -> bool:
    return _buffer(buffer).is_on_chip


# -- tensor creation ------------------------------------------------------------------


def ndarray(shape: Any, dtype: Any, buffer: Any = None, name: str = "") -> Tensor:
    """A new tensor in ``buffer`` (SBUF by default). Its memory is uninitialised (poisoned with NaN)."""
    loc = user_location()
    ctx = current_context()
    buf = _buffer(buffer)
    dims = _shape(shape, buf, ctx.hw.sbuf.partitions, loc)
    try:
        dt = to_dtype(dtype)
    except TypeError as exc:
        raise DtypeError(f"nl.ndarray: {exc}", loc=loc) from None
    return ctx.memory.new_tensor(dims, dt, buf, name, loc)


def zeros(shape: Any, dtype: Any, buffer: Any = None, name: str = "") -> Tensor:
    """A new tensor filled with zeros (on chip, by a ``memset`` instruction)."""
    tensor = ndarray(shape, dtype, buffer, name)
    if tensor.buffer.is_on_chip:
        current_context().emit("memset", {"dst": tensor, "value": 0}, user_location())
    else:
        tensor.array[...] = 0
    return tensor


def shared_constant(constant: Any, dtype: Any = None) -> Tensor:
    """An HBM tensor holding compile-time constant data."""
    values = np.asarray(constant)
    try:
        dt = to_dtype(dtype if dtype is not None else values.dtype)
    except TypeError as exc:
        raise DtypeError(f"nl.shared_constant: {exc}") from None
    return current_context().memory.hbm_tensor_from(values.astype(dt), dt, "shared_constant")


def shared_identity_matrix(n: int, dtype: Any = "uint8") -> Tensor:
    """An ``n x n`` identity matrix in HBM."""
    return shared_constant(np.eye(n), dtype)


def _shape(shape: Any, buffer: Buffer, partitions: int, loc: Any) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if not dims or any(not isinstance(d, (int, np.integer)) or d <= 0 for d in dims):
        raise ShapeError(f"nl.ndarray: shape {shape!r} must be positive integers", loc=loc)
    dims = tuple(int(d) for d in dims)
    if buffer.is_on_chip:
        if len(dims) < 2:
            raise ShapeError(
                f"nl.ndarray: {buffer.value} tensors need a partition dim and a free dim, got shape {list(dims)}",
                loc=loc,
            )
        if dims[0] > partitions:
            raise ShapeError(f"nl.ndarray: partition dim {dims[0]} exceeds {partitions}", loc=loc)
    return dims


# -- loops and indexing ---------------------------------------------------------------


def affine_range(start: int, stop: int | None = None, step: int = 1) -> range:
    """Loop iterator for iterations without loop-carried dependencies (runs as Python ``range``)."""
    return range(start, stop, step) if stop is not None else range(start)


def sequential_range(start: int, stop: int | None = None, step: int = 1) -> range:
    """Loop iterator for iterations with loop-carried dependencies (runs as Python ``range``)."""
    return affine_range(start, stop, step)


def static_range(start: int, stop: int | None = None, step: int = 1) -> range:
    """Fully unrolled loop iterator (runs as Python ``range``)."""
    return affine_range(start, stop, step)


def ds(start: int, size: int) -> DynSlice:
    """The slice ``start:start + size``."""
    return DynSlice(int(start), int(size))


class _TileSize:
    """Tile size limits of the running target (``nl.tile_size.pmax`` and friends)."""

    def _hw(self) -> Any:
        return current_context().hw if is_running() else load_target()

    @property
    def pmax(self) -> int:
        return self._hw().sbuf.partitions

    @property
    def psum_fmax(self) -> int:
        return self._hw().psum.bank_bytes // 4

    @property
    def gemm_stationary_fmax(self) -> int:
        return self._hw().tensor.columns

    @property
    def gemm_moving_fmax(self) -> int:
        return 512

    @property
    def bn_stats_fmax(self) -> int:
        return 512

    @property
    def psum_min_align(self) -> int:
        return self._hw().psum.alignment_bytes

    @property
    def sbuf_min_align(self) -> int:
        return self._hw().sbuf.alignment_bytes

    @property
    def total_available_sbuf_size(self) -> int:
        return self._hw().sbuf.bytes_per_partition


tile_size = _TileSize()


# -- SPMD -----------------------------------------------------------------------------


def program_id(axis: int = 0) -> int:
    """Index of this program in the launch grid (0 with one program)."""
    return current_context().program_id


def num_programs(axes: Any = None) -> int:
    """Number of programs in the launch grid."""
    return current_context().num_programs


def program_ndim() -> int:
    return 1 if current_context().num_programs > 1 else 0


def device_print(print_prefix: str, tensor: Tensor) -> None:
    """Print a tensor's current values, prefixed, when the kernel reaches this line."""
    current_context()
    if not isinstance(tensor, Tensor):
        raise OperandError(f"nl.device_print: tensor must be an NKI tensor, got {type(tensor).__name__}")
    print(f"{print_prefix} {tensor.name}{list(tensor.shape)}:\n{np.asarray(tensor.array)}")


# -- operator constants (nl.add, nl.exp, ...) -----------------------------------------
globals().update(OPS)
