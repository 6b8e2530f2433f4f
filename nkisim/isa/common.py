"""Checks and numeric helpers shared by the instruction definitions."""

from __future__ import annotations

import numpy as np

from nkisim.errors import BoundsError, DtypeError, MemoryKindError, OperandError, ShapeError
from nkisim.hw import Engine
from nkisim.isa.ops import Op
from nkisim.isa.spec import Check, Operands
from nkisim.memory import Buffer, Tensor, cast, dtype_name, is_integer
from nkisim.memory.dtypes import container, is_tfloat32
from nkisim.memory.narrow_floats import widen

F32 = np.float32


# -- reading and writing --------------------------------------------------------------


def f32(t: Tensor) -> np.ndarray:
    """The tensor's values as float32 (engines cast every input to float32)."""
    return widen(t.array)


def per_partition(value: Tensor | float | int, partitions: int) -> np.ndarray | np.float32:
    """A scalar, or a ``(P, 1)`` tensor as a float32 column that broadcasts along the free dims."""
    if isinstance(value, Tensor):
        return f32(value).reshape(partitions, 1)
    return f32_scalar(value)


#: The largest finite float32: a scalar beyond it rounds to an infinity (or to it, within half a unit).
_F32_MAX = float(np.finfo(np.float32).max)


def f32_scalar(value: float | int) -> np.float32:
    """A scalar immediate as float32, rounded to nearest even: beyond float32's range an infinity, as the cast
    gives, without numpy's overflow warning."""
    if -_F32_MAX <= value <= _F32_MAX or value != value:
        return F32(value)
    with np.errstate(over="ignore"):
        return F32(value)


def as_rows(values: np.ndarray, partitions: int) -> np.ndarray:
    """View values as ``(partitions, elements per partition)``."""
    return values.reshape(partitions, -1)


def write(dst: Tensor, values: np.ndarray) -> None:
    """Store engine results into ``dst``, casting to its dtype as the engine does on write."""
    dst.array[...] = cast(np.asarray(values), dst.dtype).reshape(dst.shape)


def same_format(a: Tensor, b: Tensor) -> bool:
    """True when a bit copy is exact: equal dtypes (a packed x4 type and its integer words count as
    equal), tfloat32 told apart from float32."""
    if a.dtype is b.dtype:
        return True
    return container(a.dtype) == container(b.dtype) and is_tfloat32(a.dtype) == is_tfloat32(b.dtype)


def copy_bits(dst: Tensor, src: Tensor) -> None:
    """A bit-exact copy between tensors of one format (:func:`same_format`) and one element count."""
    words = container(dst.dtype)
    dst.array.view(words)[...] = src.array.view(words).reshape(dst.shape)


#: The ALU ufuncs whose float32 results are correctly rounded, hence the same bits whatever the memory layout
#: of their operands; numpy's transcendental ufuncs (``power``) take SIMD or scalar code by layout and may differ
#: in the last bit, so only these may write a strided destination directly (``out=``).
EXACT_UFUNCS = frozenset({np.add, np.subtract, np.multiply, np.divide, np.maximum, np.minimum})


def apply_alu(op: Op, x: np.ndarray, y: np.ndarray | np.float32, reverse: bool) -> np.ndarray:
    """``op(x, y)``, or ``op(y, x)`` reversed, shaped like ``x`` broadcast with ``y``.

    A unary operator (``abs``, ``rsqrt``, ...) reversed acts on the broadcast operand,
    so its result is broadcast back over the tile.
    """
    assert op.binary is not None
    with np.errstate(all="ignore"):  # IEEE results (inf, NaN) as the engines give them, without numpy's warnings
        result = op.binary(y, x) if reverse else op.binary(x, y)
    shape = np.shape(x)
    if result.__class__ is np.ndarray and result.shape == shape and np.shape(y) in (shape, ()):
        return result  # already the broadcast shape
    return np.broadcast_to(result, np.broadcast_shapes(shape, np.shape(y)))


# -- checks ---------------------------------------------------------------------------


def check_common(ops: Operands, chk: Check) -> None:
    """Rules that hold for every instruction: partition limits and which memories an engine reaches."""
    partitions = chk.hw.sbuf.partitions
    engine = chk.engine
    # DMA queues and the sequencer (register_load/register_store) reach HBM themselves.
    reaches_hbm = engine is Engine.dma or engine is Engine.sync
    for fname, t in _tensors(ops):
        if t.defect is not None:
            chk.fail(BoundsError, fname, f"cannot be used: {t.defect.rule} (the view made at {t.defect.loc})")
        on_chip = t.buffer.is_on_chip
        if on_chip and t.partitions > partitions:
            chk.fail(ShapeError, fname, f"partition dim {t.partitions} exceeds {partitions}")
        if not on_chip and not reaches_hbm:
            chk.fail(MemoryKindError, fname, f"must be in SBUF or PSUM, not {t.buffer.value} ({t.name})")
        if engine is Engine.gpsimd and t.buffer is Buffer.psum:
            chk.fail(MemoryKindError, fname, f"is in PSUM, which the GpSimd Engine cannot access ({t.name})")


def _tensors(ops: Operands) -> list[tuple[str, Tensor]]:
    reads, writes = ops.accessed()
    return reads + writes


def check_same_partitions(chk: Check, a_name: str, a: Tensor, b_name: str, b: Tensor) -> None:
    if a.partitions != b.partitions:
        chk.fail(ShapeError, b_name, f"partition dim {b.partitions} differs from {a_name} partition dim {a.partitions}")


def check_same_layout(chk: Check, a_name: str, a: Tensor, b_name: str, b: Tensor) -> None:
    """Same partition dim and same number of elements per partition."""
    check_same_partitions(chk, a_name, a, b_name, b)
    if a.free_size != b.free_size:
        chk.fail(
            ShapeError,
            b_name,
            f"has {b.free_size} elements per partition but {a_name} has {a.free_size}",
        )


def check_in(chk: Check, name: str, t: Tensor, *buffers: Buffer) -> None:
    if t.buffer not in buffers:
        allowed = " or ".join(b.value.upper() for b in buffers)
        chk.fail(MemoryKindError, name, f"must be in {allowed}, not {t.buffer.value.upper()} ({t.name})")


def check_not_both_psum(chk: Check, a_name: str, a: Tensor, b_name: str, b: Tensor) -> None:
    if a.buffer is Buffer.psum and b.buffer is Buffer.psum:
        chk.fail(MemoryKindError, f"{a_name} and {b_name}", "must not both be in PSUM")


def check_alu(chk: Check, name: str, op: Op) -> None:
    if not op.is_alu:
        chk.fail(OperandError, name, f"{op!r} is not an ALU operator")


def check_bitvec_dtypes(chk: Check, op_name: str, op: Op, tensors: list[tuple[str, Tensor]]) -> None:
    """Bitvec operators need integer operands; they act on bit patterns with no cast."""
    if not op.is_bitvec:
        return
    for fname, t in tensors:
        if not is_integer(t.dtype):
            chk.fail(
                DtypeError,
                fname,
                f"dtype {dtype_name(t.dtype)} is not an integer type, as bitvec {op!r} ({op_name}) requires",
            )


def check_vector_operand(chk: Check, name: str, value: object, partitions: int) -> None:
    """A scalar operand, or a tensor of shape ``(partitions, 1)``."""
    if isinstance(value, Tensor) and (value.partitions != partitions or value.free_size != 1):
        chk.fail(ShapeError, name, f"shape {list(value.shape)} must be ({partitions}, 1) or a scalar")


def free_size_limit(chk: Check, name: str, t: Tensor) -> None:
    """Elements per partition must fit the physical partition."""
    if t.free_size * t.itemsize > chk.hw.sbuf.bytes_per_partition:
        chk.fail(ShapeError, name, f"{t.free_size} elements per partition exceed the SBUF partition size")


def affine_values(partitions: int, pattern: list | tuple, offset: int, channel_multiplier: int) -> np.ndarray:
    """``offset + c * channel_multiplier + sum(step * index)`` as int64 ``(partitions, elements)``."""
    inner = np.zeros(1, dtype=np.int64)
    for step, num in pattern:
        inner = (inner[:, None] + np.arange(num, dtype=np.int64)[None, :] * step).reshape(-1)
    channel = np.arange(partitions, dtype=np.int64).reshape(partitions, 1) * channel_multiplier
    return offset + channel + inner[None, :]
