"""NeuronCore-v4 microscaling (MX) instructions: quantize_mx on Vector, nc_matmul_mx on Tensor.

MX data lives in the packed x4 types (``nl.float8_e5m2_x4``, ``nl.float8_e4m3fn_x4``:
four fp8 bytes in a 32-bit element; ``nl.float4_e2m1fn_x4``: four fp4 nibbles in a
16-bit element), value ``j`` of an element in its ``j``-th byte (nibble) from the least
significant end. A scaling group is 8 partitions x 1 packed element (32 values); its
scale is an e8m0 byte (``2 ** (s - 127)``, 255 is NaN) in a ``float8_e8m0fnu`` tile or, as older
kernels have it, a uint8 one (the same bytes).

Scale layout: group ``g`` (data partitions ``8g .. 8g + 7``) has its scales in row
``32 * (g // 4) + g % 4`` of the scale tile, so each SBUF quadrant of data keeps its 4
rows of scales in the same quadrant. A scale tile may start 0, 4, 8 or 12 partitions
into a quadrant, which lets up to four tensors share one scale allocation.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from nkisim.errors import DtypeError, OperandError, ShapeError
from nkisim.hw import Engine, HwConfig
from nkisim.isa.common import as_rows, check_in, f32, free_size_limit
from nkisim.isa.spec import Check, Cost, EngineState, In, Operands, Out, engine_cost, instruction
from nkisim.isa.tensor_engine import _accumulate, matmul_accumulates
from nkisim.isa.vector import per_element_cost
from nkisim.memory import Buffer, Tensor, cast, dtype_name
from nkisim.memory.narrow_floats import widen

QUADRANT = 32
#: Partitions per scaling group, and scale rows per quadrant (32 / 8).
GROUP_PARTITIONS = 8
SCALE_ROWS_PER_QUADRANT = QUADRANT // GROUP_PARTITIONS
#: A scale tile may start this many partitions into a quadrant (its scales use the first 16).
SCALE_OFFSETS = (0, 4, 8, 12)
PACK = 4
E8M0_BIAS = 127

#: Element type of each packed type, and the largest unbiased exponent of the fp8 ones.
_FP8_X4 = {
    "float8_e5m2_x4": (np.dtype(ml_dtypes.float8_e5m2), 15),
    "float8_e4m3fn_x4": (np.dtype(ml_dtypes.float8_e4m3fn), 8),
}
_FP4_X4 = "float4_e2m1fn_x4"
_MX_INPUTS = (*_FP8_X4, _FP4_X4)
_SCALES = ("float8_e8m0fnu", "uint8")
#: The 16 float4_e2m1fn values by bit pattern (sign, 2 exponent bits, 1 mantissa bit).
_FP4_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)
FP4_E2M1FN = np.concatenate([_FP4_VALUES, -_FP4_VALUES])


def start_partition(t: Tensor) -> int:
    """The absolute SBUF partition of a tile view's first partition."""
    return t.byte_offset // t.storage.row_bytes


def scale_rows(data_partitions: int) -> np.ndarray:
    """Row of the scale tile (from its start) that holds each scaling group's scales."""
    g = np.arange(data_partitions // GROUP_PARTITIONS)
    return QUADRANT * (g // SCALE_ROWS_PER_QUADRANT) + g % SCALE_ROWS_PER_QUADRANT


def unpack_x4(t: Tensor) -> np.ndarray:
    """The values of a packed x4 tile as float32 ``(P, F, 4)``."""
    words = as_rows(t.array, t.partitions).astype(np.uint32)
    name = dtype_name(t.dtype)
    if name == _FP4_X4:
        nibbles = np.stack([(words >> (4 * j)) & 0xF for j in range(PACK)], axis=-1)
        return FP4_E2M1FN[nibbles]
    element, _ = _FP8_X4[name]
    octets = np.stack([(words >> (8 * j)) & 0xFF for j in range(PACK)], axis=-1).astype(np.uint8)
    return widen(octets.view(element))


def pack_fp8_x4(values: np.ndarray, element: np.dtype) -> np.ndarray:
    """float32 ``(P, 4F)`` values cast to ``element`` (round to nearest even) and packed as uint32 ``(P, F)``."""
    octets = cast(values, np.dtype(element)).view(np.uint8).astype(np.uint32)
    octets = octets.reshape(values.shape[0], -1, PACK)
    return sum((octets[..., j] << (8 * j) for j in range(PACK)), np.zeros(octets.shape[:2], np.uint32))


def e8m0_values(scales: np.ndarray) -> np.ndarray:
    """``2 ** (s - 127)`` in float32 for e8m0 bytes ``s`` (255 is NaN)."""
    s = scales.astype(np.int32)
    return np.where(s == 255, np.float32(np.nan), np.ldexp(np.float32(1.0), np.minimum(s, 254) - E8M0_BIAS))


def _check_dtype(chk: Check, name: str, t: Tensor, allowed: tuple[str, ...]) -> None:
    if dtype_name(t.dtype) not in allowed:
        chk.fail(DtypeError, name, f"dtype {dtype_name(t.dtype)} must be one of {', '.join(allowed)}")


def _check_scale_tile(chk: Check, name: str, scale: Tensor, data_partitions: int) -> None:
    offset = start_partition(scale) % QUADRANT
    if offset not in SCALE_OFFSETS:
        chk.fail(
            OperandError,
            name,
            f"starts {offset} partitions into an SBUF quadrant; scales start 0, 4, 8 or 12 partitions in",
        )
    needed = int(scale_rows(data_partitions)[-1]) + 1 if data_partitions >= GROUP_PARTITIONS else 1
    if scale.partitions < needed:
        chk.fail(
            ShapeError,
            name,
            f"has {scale.partitions} partitions; {data_partitions} data partitions keep their scales in "
            f"the first {SCALE_ROWS_PER_QUADRANT} partitions of each quadrant, so it needs {needed}",
        )


def _scale_parts(scale: Tensor, data_partitions: int) -> list[Tensor]:
    """The rows of a scale tile an instruction touches: the first rows of each quadrant, one view per quadrant."""
    rows = scale_rows(data_partitions)
    if rows.size == 0 or rows[-1] >= scale.partitions:  # too small a tile: validation reports it
        return [scale]
    quadrants = rows // QUADRANT
    return [scale[int(rows[quadrants == q][0]) : int(rows[quadrants == q][-1]) + 1] for q in np.unique(quadrants)]


def _with_scale_parts(accessed: list[tuple[str, Tensor]], scales: dict[str, int]) -> list[tuple[str, Tensor]]:
    """``accessed`` with each scale operand (name -> its data's partitions) replaced by the rows it touches."""
    out: list[tuple[str, Tensor]] = []
    for name, t in accessed:
        out.extend((name, part) for part in _scale_parts(t, scales[name])) if name in scales else out.append((name, t))
    return out


# -- quantize_mx ----------------------------------------------------------------------


class QuantizeMxOps(Operands):
    dst: Out
    src: In
    dst_scale: Out

    def accessed(self) -> tuple[list[tuple[str, Tensor]], list[tuple[str, Tensor]]]:
        """As every instruction's, but ``dst_scale`` only where scales are written (rows 0-3 of each quadrant)."""
        reads, writes = super().accessed()
        return reads, _with_scale_parts(writes, {"dst_scale": self.src.partitions})


def _quantize_mx_validate(ops: QuantizeMxOps, chk: Check) -> None:
    for name, t in (("src", ops.src), ("dst", ops.dst), ("dst_scale", ops.dst_scale)):
        check_in(chk, name, t, Buffer.sbuf)
    _check_dtype(chk, "src", ops.src, ("float16", "bfloat16"))
    _check_dtype(chk, "dst", ops.dst, tuple(_FP8_X4))
    _check_dtype(chk, "dst_scale", ops.dst_scale, _SCALES)
    p, f = ops.src.partitions, ops.src.free_size
    if p % QUADRANT:
        chk.fail(ShapeError, "src", f"partition dim {p} must be a multiple of {QUADRANT}")
    if f % PACK:
        chk.fail(ShapeError, "src", f"has {f} elements per partition; it must be a multiple of {PACK}")
    free_size_limit(chk, "src", ops.src)
    if ops.dst.partitions != p or ops.dst.free_size != f // PACK:
        chk.fail(
            ShapeError,
            "dst",
            f"shape {list(ops.dst.shape)} must have {p} partitions and {f // PACK} packed elements per partition",
        )
    if ops.dst_scale.free_size != f // PACK:
        chk.fail(
            ShapeError,
            "dst_scale",
            f"has {ops.dst_scale.free_size} elements per partition; src's {f} need {f // PACK} (one per 4)",
        )
    _check_scale_tile(chk, "dst_scale", ops.dst_scale, p)
    if start_partition(ops.dst) // QUADRANT != start_partition(ops.dst_scale) // QUADRANT:
        chk.fail(OperandError, "dst_scale", "must start in the same SBUF quadrant as dst")


def _quantize_mx_cost(ops: QuantizeMxOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N/4)`` Vector cycles, ``N`` the src elements per partition: 4 per cycle (estimate)."""
    return per_element_cost(engine, hw, ops.src.free_size, hw.vector.quantize_mx_cycles_per_element)


@instruction(
    "quantize_mx",
    QuantizeMxOps,
    engines=(Engine.vector,),
    cost=_quantize_mx_cost,
    validate=_quantize_mx_validate,
    requires=("mx_formats",),
    dtypes="src fp16/bf16; dst float8_e5m2_x4/float8_e4m3fn_x4; dst_scale float8_e8m0fnu/uint8",
)
def quantize_mx(ops: QuantizeMxOps, state: EngineState) -> None:
    """Quantize groups of 8 partitions x 4 elements to MXFP8 data plus one e8m0 scale each.

    With ``e`` the largest float32 exponent field of the group's values and ``Emax``
    the element type's largest exponent (8 for e4m3fn, 15 for e5m2), the scale is
    ``s = max(e - (Emax - 1), 0)``: twice the OCP sample scale, as the NKI docs
    describe, so rounding never saturates. Values are divided by ``2 ** (s - 127)``
    and rounded to nearest even.
    """
    element, emax = _FP8_X4[dtype_name(ops.dst.dtype)]
    p, f = ops.src.partitions, ops.src.free_size
    x = as_rows(f32(ops.src), p)
    exponents = ((x.view(np.uint32) >> 23) & 0xFF).reshape(p // GROUP_PARTITIONS, GROUP_PARTITIONS, f // PACK, PACK)
    scales = np.maximum(exponents.max(axis=(1, 3)).astype(np.int32) - (emax - 1), 0)
    factor = np.ldexp(np.float32(1.0), E8M0_BIAS - scales).astype(np.float32)
    expanded = np.repeat(np.repeat(factor, GROUP_PARTITIONS, axis=0), PACK, axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        quantized = x * expanded  # exact: a power-of-two scaling that stays in range
    ops.dst.array[...] = pack_fp8_x4(quantized, element).reshape(ops.dst.shape)
    rows = scale_rows(p)
    ops.dst_scale.array.view(np.uint8)[rows] = scales.astype(np.uint8).reshape((rows.size, *ops.dst_scale.shape[1:]))


# -- nc_matmul_mx ---------------------------------------------------------------------


class NcMatmulMxOps(Operands):
    dst: Out
    stationary: In
    moving: In
    stationary_scale: In
    moving_scale: In
    tile_position: tuple[int, ...] | list[int] | None = None
    tile_size: tuple[int, ...] | list[int] | None = None
    accumulate: bool | None = None

    def accessed(self) -> tuple[list[tuple[str, Tensor]], list[tuple[str, Tensor]]]:
        """As every instruction's, but the scale tiles only where scales are read (rows 0-3 of each quadrant)."""
        reads, writes = super().accessed()
        parts = {"stationary_scale": self.stationary.partitions, "moving_scale": self.moving.partitions}
        return _with_scale_parts(reads, parts), writes


def _row_tile(ops: NcMatmulMxOps, chk: Check) -> int:
    """The PE rows the instruction may use: 128, or the row tile of ``tile_size``."""
    if not ops.tile_position and not ops.tile_size:
        return chk.hw.tensor.rows
    if not ops.tile_position or not ops.tile_size or len(ops.tile_position) != 2 or len(ops.tile_size) != 2:
        chk.fail(OperandError, "tile_position", "and tile_size must both be 2-tuples to enable PE tiling")
    rows, cols = ops.tile_size
    start_row, start_col = ops.tile_position
    if rows not in (32, 64, 128):
        chk.fail(OperandError, "tile_size", f"row size {rows} must be 32, 64 or 128")
    if cols != chk.hw.tensor.columns:
        chk.fail(OperandError, "tile_size", f"column size {cols} must be {chk.hw.tensor.columns}: only rows are tiled")
    if start_col != 0:
        chk.fail(OperandError, "tile_position", f"start column {start_col} must be 0")
    if start_row % rows or start_row + rows > chk.hw.tensor.rows:
        chk.fail(OperandError, "tile_position", f"start row {start_row} must be a multiple of {rows} within 128")
    return rows


def _nc_matmul_mx_validate(ops: NcMatmulMxOps, chk: Check) -> None:
    for name in ("stationary", "moving", "stationary_scale", "moving_scale"):
        check_in(chk, name, getattr(ops, name), Buffer.sbuf)
    check_in(chk, "dst", ops.dst, Buffer.psum)
    _check_dtype(chk, "stationary", ops.stationary, _MX_INPUTS)
    _check_dtype(chk, "moving", ops.moving, _MX_INPUTS)
    _check_dtype(chk, "stationary_scale", ops.stationary_scale, _SCALES)
    _check_dtype(chk, "moving_scale", ops.moving_scale, _SCALES)
    _check_dtype(chk, "dst", ops.dst, ("float32", "bfloat16"))
    k = ops.stationary.partitions
    if ops.moving.partitions != k:
        chk.fail(ShapeError, "moving", f"partition dim {ops.moving.partitions} differs from stationary's {k}")
    if k % QUADRANT:
        chk.fail(ShapeError, "stationary", f"partition dim {k} must be a multiple of {QUADRANT}")
    rows = _row_tile(ops, chk)
    if k > rows:
        chk.fail(ShapeError, "stationary", f"partition dim {k} exceeds the PE tile's {rows} rows")
    m, n = ops.stationary.free_size, ops.moving.free_size
    if m % 2 or m > chk.hw.tensor.columns:
        chk.fail(ShapeError, "stationary", f"free size {m} must be even and at most {chk.hw.tensor.columns}")
    n_max = chk.hw.psum.bank_bytes // ops.dst.itemsize
    if n > n_max:
        chk.fail(ShapeError, "moving", f"free size {n} exceeds {n_max} for a {dtype_name(ops.dst.dtype)} dst")
    if ops.dst.partitions != m or ops.dst.free_size != n:
        chk.fail(ShapeError, "dst", f"shape {list(ops.dst.shape)} must hold the [{m}, {n}] result")
    for name, scale, data in (
        ("stationary_scale", ops.stationary_scale, ops.stationary),
        ("moving_scale", ops.moving_scale, ops.moving),
    ):
        _check_scale_tile(chk, name, scale, k)
        if scale.free_size < data.free_size:
            chk.fail(
                ShapeError,
                name,
                f"has {scale.free_size} elements per partition; it needs one per packed element ({data.free_size})",
            )


def _nc_matmul_mx_cost(ops: NcMatmulMxOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(min(64, M), N)`` PE cycles, ``M``/``N`` the packed stationary/moving free sizes, as nc_matmul (estimate).

    Each PE multiplies and adds the four values of a packed pair per cycle, which is
    the documented 4x throughput of MX matmul over bf16.
    """
    k, m, n = ops.stationary.partitions * PACK, ops.stationary.free_size, ops.moving.free_size
    cycles = max(min(hw.tensor.matmul_min_ii_cycles, m), n)
    return engine_cost(hw, engine, cycles, flops=2.0 * k * m * n)


def _dequantized(data: Tensor, scale: Tensor) -> np.ndarray:
    """float32 ``(4K, F)`` values times their group's scale, contraction index ``4k + j``."""
    values = unpack_x4(data)
    k, f, _ = values.shape
    rows = scale_rows(k)
    scales = scale.array.view(np.uint8)[rows].reshape(rows.size, -1)[:, :f]
    factor = np.repeat(e8m0_values(scales), GROUP_PARTITIONS, axis=0)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        scaled = values * factor[:, :, None]
    return scaled.transpose(0, 2, 1).reshape(k * PACK, f)


@instruction(
    "nc_matmul_mx",
    NcMatmulMxOps,
    engines=(Engine.tensor,),
    cost=_nc_matmul_mx_cost,
    validate=_nc_matmul_mx_validate,
    accumulates=matmul_accumulates,
    requires=("mx_formats",),
    dtypes=(
        "stationary/moving float8_e5m2_x4/float8_e4m3fn_x4/float4_e2m1fn_x4; scales float8_e8m0fnu/uint8; dst fp32/bf16"
    ),
)
def nc_matmul_mx(ops: NcMatmulMxOps, state: EngineState) -> None:
    """``dst = S.T @ M`` over the 4K contraction values of MX stationary and moving tiles.

    Each value is multiplied by its group's scale in float32 and the products are
    accumulated in float32; PSUM accumulation follows ``nc_matmul`` (the first matmul
    write overwrites, later ones add).
    """
    stationary = _dequantized(ops.stationary, ops.stationary_scale)
    moving = _dequantized(ops.moving, ops.moving_scale)
    with np.errstate(over="ignore", invalid="ignore"):
        product = stationary.T @ moving
    _accumulate(ops.dst, product, ops.accumulate)
