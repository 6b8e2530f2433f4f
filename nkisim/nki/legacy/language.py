"""``neuronxcc.nki.language`` for nkisim: tiles as values, index expressions, masks, SPMD grids.

Data types and buffers are the current API's (``nl.sbuf``, ``nl.psum``, ``nl.hbm``,
``nl.shared_hbm``, ``nl.private_hbm``); the functions take the legacy arguments and
return their results (``nkisim.frontend.legacy_nl``). ``nl.par_dim`` marks the partition
dim of a buffer with leading block dims (``nl.ndarray((4, nl.par_dim(128), 512))``).
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from nkisim.errors import OperandError, ShapeError, user_location
from nkisim.frontend.context import current_context
from nkisim.frontend.legacy_index import arange, mgrid  # noqa: F401 - re-exported
from nkisim.frontend.legacy_launch import grid_size, nc, program_index, spmd_dim  # noqa: F401
from nkisim.frontend.legacy_nl import (  # noqa: F401 - re-exported
    LEGACY_OPS,
    all,
    atomic_rmw,
    broadcast_to,
    device_print,
    dropout,
    expand_dims,
    gather_flattened,
    load,
    load_transpose2d,
    logical_not,
    matmul,
    max,
    mean,
    min,
    negative,
    prod,
    rand,
    random_seed,
    rms_norm,
    softmax,
    static_cast,
    store,
    sum,
    transpose,
    unsupported,
    var,
    where,
)
from nkisim.frontend.legacy_tile import LegacyTile, as_tile
from nkisim.memory import Buffer
from nkisim.nki import language as _current
from nkisim.nki.language import (  # noqa: F401 - re-exported
    affine_range,
    bfloat16,
    bool_,
    ds,
    float8_e4m3,
    float8_e5m2,
    float16,
    float32,
    hbm,
    int8,
    int16,
    int32,
    private_hbm,
    psum,
    sbuf,
    sequential_range,
    shared_hbm,
    static_range,
    tfloat32,
    tile_size,
    uint8,
    uint16,
    uint32,
)

globals().update(LEGACY_OPS)


class fp32:
    """``nl.fp32.min``: the most negative float32."""

    min = float(np.finfo(np.float32).min)
    max = float(np.finfo(np.float32).max)


class bfp16:
    """``nl.bfp16.min``: the most negative bfloat16."""

    min = float(ml_dtypes.finfo(ml_dtypes.bfloat16).min)
    max = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)


def finfo(dtype: Any) -> Any:
    """Machine limits of a float dtype (numpy's ``finfo``)."""
    return np.finfo(dtype)


class par_dim(int):
    """``nl.par_dim(128)``: this dim of a buffer's shape is the partition dim."""


# -- tensor creation -----------------------------------------------------------------------


class BlockBuffer:
    """An on-chip buffer with block dims before its partition dim: one tile per block.

    ``buf[i]`` is block ``i``'s tile; ``buf[i, i_p, i_f]`` indexes it; ``buf[i, ...] = v`` assigns to it.
    """

    def __init__(self, blocks: np.ndarray, shape: tuple[int, ...]) -> None:
        self.blocks = blocks
        self.shape = shape

    @property
    def dtype(self) -> np.dtype:
        return self.blocks.flat[0].dtype

    @property
    def buffer(self) -> Any:
        return self.blocks.flat[0].buffer

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def _split(self, key: Any) -> tuple[Any, tuple[Any, ...]]:
        items = key if isinstance(key, tuple) else (key,)
        depth = self.blocks.ndim
        head = items[:depth]
        for i in head:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                raise OperandError(f"block dims of {self!r} are indexed by integers, got {i!r}")
        return self.blocks[tuple(int(i) for i in head)], items[depth:]

    def __getitem__(self, key: Any) -> Any:
        block, rest = self._split(key)
        if isinstance(block, np.ndarray):
            return BlockBuffer(block, block.shape + self.shape[self.blocks.ndim :])
        return block[rest] if rest else block

    def __setitem__(self, key: Any, value: Any) -> None:
        block, rest = self._split(key)
        if isinstance(block, np.ndarray):
            raise OperandError(f"assign to one block of {self!r} at a time")
        block[rest if rest else ...] = value

    def __repr__(self) -> str:
        return f"BlockBuffer({list(self.shape)})"


def _dims(shape: Any) -> tuple[int, ...]:
    return (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)


def ndarray(shape: Any, dtype: Any, *, buffer: Any = None, name: str = "", **kwargs: Any) -> Any:
    """A new tensor (SBUF by default); with ``nl.par_dim`` after block dims, one tile per block."""
    dims = _dims(shape)
    marks = [i for i, d in enumerate(dims) if isinstance(d, par_dim)]
    if marks and buffer is not None and Buffer(buffer).is_hbm:  # HBM has no partitions: one tensor of the whole shape
        marks = []
    if len(marks) > 1:
        raise ShapeError(f"nl.ndarray: shape {list(dims)} marks more than one par_dim", loc=user_location())
    if marks and marks[0] > 0:
        lead, tile = dims[: marks[0]], tuple(int(d) for d in dims[marks[0] :])
        blocks = np.empty(lead, dtype=object)
        for idx in np.ndindex(*lead):
            blocks[idx] = as_tile(_current.ndarray(tile, dtype, buffer, name))
        return BlockBuffer(blocks, tuple(int(d) for d in dims))
    return as_tile(_current.ndarray(tuple(int(d) for d in dims), dtype, buffer, name))


def _filled(shape: Any, value: Any, dtype: Any, buffer: Any, name: str) -> Any:
    made = ndarray(shape, dtype, buffer=buffer, name=name)
    tiles = made.blocks.flat if isinstance(made, BlockBuffer) else [made]
    ctx = current_context()
    loc = user_location()
    for t in tiles:
        if t.buffer is Buffer.psum and value == 0:  # a matmul may start the accumulation instead
            ctx.fill_later(t, 0, loc)
        elif t.buffer.is_on_chip:
            ctx.emit("memset", {"dst": t, "value": value}, loc)
        else:
            ctx.machine.store(t.array, np.asarray(value).astype(t.dtype))
    return made


def zeros(shape: Any, dtype: Any, *, buffer: Any = None, name: str = "", **kwargs: Any) -> Any:
    """A new tensor of zeros (on chip, by memset).

    In PSUM the ``memset`` is issued just before the first instruction that uses the tile,
    and not at all when that is a matmul accumulating into the whole tile
    (``acc += nisa.nc_matmul(...)``): a matmul into a PSUM tile nothing has written starts
    a new accumulation group, which equals zeros plus the product.
    """
    return _filled(shape, 0, dtype, buffer, name)


def ones(shape: Any, dtype: Any, *, buffer: Any = None, name: str = "", **kwargs: Any) -> Any:
    return _filled(shape, 1, dtype, buffer, name)


def full(shape: Any, fill_value: Any, dtype: Any, *, buffer: Any = None, name: str = "", **kwargs: Any) -> Any:
    return _filled(shape, fill_value, dtype, buffer, name)


def empty_like(a: Any, dtype: Any = None, *, buffer: Any = None, name: str = "", **kwargs: Any) -> Any:
    return ndarray(a.shape, a.dtype if dtype is None else dtype, buffer=buffer or a.buffer, name=name)


def zeros_like(a: Any, dtype: Any = None, *, buffer: Any = None, name: str = "", **kwargs: Any) -> Any:
    return zeros(a.shape, a.dtype if dtype is None else dtype, buffer=buffer, name=name)


def shared_constant(constant: Any, dtype: Any = None, **kwargs: Any) -> LegacyTile:
    return as_tile(_current.shared_constant(constant, dtype))


def shared_identity_matrix(n: int, dtype: Any = np.uint8, **kwargs: Any) -> LegacyTile:
    return as_tile(_current.shared_identity_matrix(n, dtype))


# -- SPMD -------------------------------------------------------------------------------------


def program_id(axis: int) -> int:
    """This program's index along ``axis`` of the launch grid."""
    return program_index(axis)


def num_programs(axes: Any = None) -> int:
    """Programs along ``axes`` of the launch grid (all when None)."""
    return grid_size(axes)


def program_ndim() -> int:
    """Dimensions of the launch grid (0 for a plain call)."""
    return len(current_context().grid)


# -- not supported ----------------------------------------------------------------------------

all_reduce = unsupported("all_reduce", "collectives across programs of a grid are not modelled")
loop_reduce = unsupported("loop_reduce", "loop reduction is a compiler transformation nkisim does not perform")
gemm_grid = unsupported("gemm_grid", "not documented beyond its name")
gemm_stationary_grid = unsupported("gemm_stationary_grid", "not documented beyond its name")

__all__ = [
    name
    for name in dir()
    if not name.startswith("_") and name not in ("annotations", "math", "np", "ml_dtypes", "Any", "Buffer")
]
del math
