"""Element-wise instructions of the Vector Engine (some also run on Scalar or GpSimd).

Costs follow the NKI 0.1 reference's "Estimated instruction cost": ``N`` is the
number of elements per partition and the time is ``max(MIN_II, cycles)``.
"""

from __future__ import annotations

import numpy as np

from nkisim.errors import DtypeError, OperandError, ShapeError
from nkisim.hw import Engine, HwConfig
from nkisim.isa.carriers import COPIES, ELEMENTWISE_TENSOR_SCALAR, ELEMENTWISE_TENSOR_TENSOR, REDUCES_DATA
from nkisim.isa.common import (
    EXACT_UFUNCS,
    F32,
    apply_alu,
    as_rows,
    check_alu,
    check_bitvec_dtypes,
    check_not_both_psum,
    check_same_layout,
    check_same_partitions,
    check_vector_operand,
    copy_bits,
    f32,
    f32_scalar,
    per_partition,
    same_format,
    write,
)
from nkisim.isa.kernels import BINARY_F32_CODES, binary_f32
from nkisim.isa.ops import OPS, Op
from nkisim.isa.spec import (
    Check,
    Cost,
    EngineState,
    In,
    Operands,
    OptScalarOrIn,
    Out,
    ScalarOrIn,
    engine_cost,
    instruction,
    require,
    sets_all_of_dst,
    values_only,
)
from nkisim.memory import Buffer, Tensor, is_integer, same_bytes, to_dtype
from nkisim.memory.dtypes import is_tfloat32

BF16 = to_dtype("bfloat16")
FP16 = to_dtype("float16")


def per_element_cost(
    engine: Engine, hw: HwConfig, n: int, cycles_per_element: float = 1.0, streams: tuple[Tensor, ...] = ()
) -> Cost:
    """``max(MIN_II, N * cycles_per_element / mode * stride)`` engine cycles.

    ``streams`` are the tensors the instruction reads and writes: SBUF streams with an
    innermost stride over 16 bytes run at half bandwidth, and on NeuronCore-v3+ 16-bit
    streams use the Vector (and v4 Scalar) 2x/4x performance modes.
    """
    speedup = performance_mode(engine, hw, streams) if streams else 1.0
    cycles = max(hw.engine(engine).min_ii_cycles, n * cycles_per_element * stride_slowdown(hw, streams) / speedup)
    return engine_cost(hw, engine, cycles)


def stride_slowdown(hw: HwConfig, streams: tuple[Tensor, ...]) -> float:
    """The SBUF access-pattern penalty: half bandwidth when an innermost stride exceeds 16 bytes."""
    wide = any(
        t.buffer is Buffer.sbuf
        and t.array.ndim > 1
        and t.shape[-1] > 1
        and abs(t.array.strides[-1]) > hw.sbuf.wide_stride_bytes
        for t in streams
    )
    return hw.sbuf.wide_stride_slowdown if wide else 1.0


def performance_mode(engine: Engine, hw: HwConfig, streams: tuple[Tensor, ...]) -> float:
    """Elements per lane per cycle: 4 for 16-bit SBUF unit-stride streams, 2 for other 16-bit ones (v3+)."""
    fastest = hw.engine(engine).perf_mode_max
    if fastest == 1 or not all(t.dtype in (BF16, FP16) for t in streams):
        return 1.0
    sbuf_unit = all(t.buffer is Buffer.sbuf and t.array.strides[-1] == t.itemsize for t in streams)
    return float(min(fastest, 4 if sbuf_unit else 2))


def _choose_vector(ops: Operands, hw: HwConfig) -> Engine:
    return Engine.vector


# -- tensor_tensor --------------------------------------------------------------------


class TensorTensorOps(Operands):
    dst: Out
    data1: In
    data2: In
    op: Op
    engine: Engine = Engine.unknown


def _tensor_tensor_validate(ops: TensorTensorOps, chk: Check) -> None:
    check_alu(chk, "op", ops.op)
    check_same_layout(chk, "data1", ops.data1, "data2", ops.data2)
    check_same_layout(chk, "data1", ops.data1, "dst", ops.dst)
    check_not_both_psum(chk, "data1", ops.data1, "data2", ops.data2)
    check_bitvec_dtypes(chk, "op", ops.op, [("data1", ops.data1), ("data2", ops.data2), ("dst", ops.dst)])


def _tensor_tensor_cost(ops: TensorTensorOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, c*N)`` cycles, c=2 on Vector with two SBUF inputs unless all bf16 add/mul/sub, else c=1.

    So ``max(MIN_II, N)`` Vector cycles with one input in SBUF and the other in PSUM.
    GpSimd (``nl.power``, int32/uint32 arithmetic by default, any op with ``engine=gpsimd``)
    runs one element per cycle.
    """
    n = ops.data1.free_size
    streams = (ops.dst, ops.data1, ops.data2)
    if engine is not Engine.vector:
        return per_element_cost(engine, hw, n)
    kinds = {ops.data1.buffer, ops.data2.buffer}
    all_bf16 = ops.data1.dtype == ops.data2.dtype == ops.dst.dtype == BF16
    fast = kinds == {Buffer.sbuf, Buffer.psum} or (
        all_bf16 and ops.op.name in ("add", "multiply", "subtract") and kinds == {Buffer.sbuf}
    )
    per_element = 1.0 if fast else hw.vector.two_sbuf_inputs_cycles_per_element
    # tensor_tensor gets at most the 2x mode (all 16-bit, both inputs in SBUF)
    mode = min(2.0, performance_mode(engine, hw, streams)) if kinds == {Buffer.sbuf} else 1.0
    return per_element_cost(engine, hw, n, per_element * stride_slowdown(hw, streams) / mode)


_INT32_TYPES = (np.dtype(np.int32), np.dtype(np.uint32))

#: Operators with fractional results, whose integer forms NKI does not describe: float32 math on GpSimd too.
_FRACTIONAL_OPS = frozenset({"divide", "power", "reciprocal", "rsqrt"})
#: The operators GpSimd computes on the integers themselves: every other arithmetic one.
_INTEGER_OPS = frozenset(n for n, op in OPS.items() if op.binary is not None and not op.is_bitvec) - _FRACTIONAL_OPS


def _all_int32(ops: TensorTensorOps) -> bool:
    """Every tile int32 or uint32, the case NKI sends to GpSimd's integer ALU unless told otherwise."""
    return ops.dst.dtype in _INT32_TYPES and ops.data1.dtype in _INT32_TYPES and ops.data2.dtype in _INT32_TYPES


def _tensor_tensor_engine(ops: TensorTensorOps, hw: HwConfig | None = None) -> Engine:
    """GpSimd for ``nl.power``, and for arithmetic on int32/uint32 tiles none of which is in PSUM; else Vector."""
    tiles = (ops.dst, ops.data1, ops.data2)
    if ops.op == OPS["power"] or (
        not ops.op.is_bitvec and _all_int32(ops) and all(t.buffer is not Buffer.psum for t in tiles)
    ):
        return Engine.gpsimd
    return Engine.vector


def _integer_native(ops: TensorTensorOps) -> bool:
    """Whether the op runs in GpSimd's 32-bit integer arithmetic rather than float32 math."""
    if not _all_int32(ops) or ops.op.name not in _INTEGER_OPS:
        return False
    return (ops.engine if ops.engine is not Engine.unknown else _tensor_tensor_engine(ops)) is Engine.gpsimd


def _tensor_tensor_layout_free(ops: TensorTensorOps) -> bool:
    """Whether :func:`tensor_tensor` gives the same bits from operands of any layout (``reads_values``).

    Bit operations and 32-bit integer arithmetic do; float arithmetic only on the compiled path
    (:func:`binary_f32`, float32 in and out, one shape), which keeps the first operand's NaN of two. numpy's
    loops keep either NaN of two by layout, its transcendental loops round by layout, and ``maximum`` gives a
    tie of zeros the sign its loop gives.
    """
    op = ops.op
    if op.is_bitvec or _integer_native(ops):
        return True
    if op.binary not in BINARY_F32_CODES or is_tfloat32(ops.dst.dtype):
        return False
    dst, data1, data2 = ops.dst.array, ops.data1.array, ops.data2.array
    return (
        dst.ndim == 2
        and dst.dtype == data1.dtype == data2.dtype == F32
        and dst.shape == data1.shape == data2.shape
        and _each_element_apart(dst)
    )


def _tensor_scalar_layout_free(ops: TensorScalarOps) -> bool:
    """Whether :func:`tensor_scalar` gives the same bits from a ``data`` of any layout (``reads_values``): bit
    operations, or correctly rounded arithmetic with scalars that are not NaN (a NaN result is then ``data``'s
    own NaN whatever the loop; of two NaNs, numpy's loops keep either by layout)."""
    for op, operand in ((ops.op0, ops.operand0), (ops.op1, ops.operand1)):
        if op is None or op.is_bitvec:
            continue
        if op.binary not in BINARY_F32_CODES or operand.__class__ not in (int, float) or operand != operand:
            return False
    return True


@instruction(
    "tensor_tensor",
    TensorTensorOps,
    carries=ELEMENTWISE_TENSOR_TENSOR,
    engines=(Engine.vector, Engine.gpsimd),
    cost=_tensor_tensor_cost,
    validate=_tensor_tensor_validate,
    choose_engine=_tensor_tensor_engine,
    dtypes="integer types for bitvec ops; any for arithmetic (fp32 math, cast to dst; int32/uint32 on GpSimd: integer)",
    overwrites=sets_all_of_dst,
    reads_values=_tensor_tensor_layout_free,
)
def tensor_tensor(ops: TensorTensorOps, state: EngineState) -> None:
    """Element-wise ``dst = op(data1, data2)`` in float32 (bitvec ops: on the integer bits).

    With every tile int32 or uint32, on GpSimd (its default for them outside PSUM), the
    arithmetic is 32-bit integer arithmetic, exact and wrapping; operators with fractional
    results (``divide``, ``power``, ``reciprocal``, ``rsqrt``) stay float32 math.
    """
    p = ops.dst.partitions
    if ops.op.is_bitvec:
        result = ops.op.binary(as_rows(ops.data1.array, p), as_rows(ops.data2.array, p))  # type: ignore[misc]
        ops.dst.array[...] = result.astype(ops.dst.dtype).reshape(ops.dst.shape)
        return
    dst, data1, data2 = ops.dst.array, ops.data1.array, ops.data2.array
    if (
        ops.op.binary in EXACT_UFUNCS
        and dst.dtype == data1.dtype == data2.dtype == F32
        and dst.shape == data1.shape == data2.shape
        and not is_tfloat32(ops.dst.dtype)
    ):
        code = BINARY_F32_CODES.get(ops.op.binary)
        if (
            code is not None
            and dst.ndim == 2
            and _each_element_apart(dst)
            and _apart_or_same(ops.dst, ops.data1)
            and _apart_or_same(ops.dst, ops.data2)
        ):
            binary_f32(code, dst, data1, data2)
            return
        # float32 in and out: the ufunc writes dst directly (numpy orders overlapping operands as if copied)
        with np.errstate(all="ignore"):
            ops.op.binary(data1, data2, out=dst)
        return
    if _integer_native(ops):
        x, y = (as_rows(t.array, p).astype(np.int64) for t in (ops.data1, ops.data2))
        result = ops.op.binary(x, y).astype(np.int64) & 0xFFFFFFFF  # type: ignore[misc]  # wraps to 32 bits
        ops.dst.array[...] = result.astype(np.uint32).view(ops.dst.dtype).reshape(ops.dst.shape)
        return
    write(ops.dst, apply_alu(ops.op, as_rows(f32(ops.data1), p), as_rows(f32(ops.data2), p), False))


def _each_element_apart(array: np.ndarray) -> bool:
    """Whether no two elements of ``array`` share a byte. A view that writes some bytes twice (a zero step of an
    access pattern) keeps numpy's loop, whose order of writes decides which value stays."""
    (rows, cols), (row_step, col_step) = array.shape, array.strides
    if col_step == array.itemsize and (rows == 1 or abs(row_step) >= cols * col_step):  # rows of a tile: at once
        return True
    span = array.itemsize
    for stride, size in sorted((abs(s), n) for s, n in zip(array.strides, array.shape) if n > 1):
        if stride < span:
            return False
        span = stride * (size - 1) + span
    return True


def _apart_or_same(dst: Tensor, src: Tensor) -> bool:
    """Whether ``src`` shares no byte with ``dst`` or is the very same view of it: an element-wise loop then reads
    each element before writing it, as numpy's ufunc does for overlapping operands."""
    if dst.__class__ is not Tensor or src.__class__ is not Tensor:  # a view at run-time offsets
        return False
    a, b = dst._region or dst.region, src._region or src.region  # the property's memo first
    if a.storage is not b.storage or a.r1 <= b.r0 or b.r1 <= a.r0 or a.b1 <= b.b0 or b.b1 <= a.b0:
        return True
    return same_bytes(dst, src)


# -- tensor_scalar --------------------------------------------------------------------


class TensorScalarOps(Operands):
    dst: Out
    data: In
    op0: Op
    operand0: ScalarOrIn
    reverse0: bool = False
    op1: Op | None = None
    operand1: OptScalarOrIn = None
    reverse1: bool = False
    engine: Engine = Engine.unknown


_SCALAR_ENGINE_OPS = {("multiply", "add"), ("multiply", None), ("add", None)}


def _tensor_scalar_validate(ops: TensorScalarOps, chk: Check) -> None:
    check_alu(chk, "op0", ops.op0)
    check_same_layout(chk, "data", ops.data, "dst", ops.dst)
    p = ops.data.partitions
    check_vector_operand(chk, "operand0", ops.operand0, p)
    if (ops.op1 is None) != (ops.operand1 is None):
        chk.fail(OperandError, "op1", "and operand1 must be given together or both be None")
    if ops.op1 is not None:
        check_alu(chk, "op1", ops.op1)
        check_vector_operand(chk, "operand1", ops.operand1, p)
        if ops.op1.is_bitvec != ops.op0.is_bitvec:
            chk.fail(OperandError, "op1", "must be of the same kind as op0 (both bitvec or both arithmetic)")
    if ops.op0.is_bitvec:
        if chk.engine is not Engine.vector:
            chk.fail(OperandError, "op0", f"bitvec operator {ops.op0!r} runs only on the Vector Engine")
        check_bitvec_dtypes(chk, "op0", ops.op0, [("data", ops.data), ("dst", ops.dst)])
        for name, operand in (("operand0", ops.operand0), ("operand1", ops.operand1)):
            _check_integer_operand(chk, name, operand)
    pair = (ops.op0.name, ops.op1.name if ops.op1 else None)
    if chk.engine is Engine.scalar and pair not in _SCALAR_ENGINE_OPS:
        chk.fail(OperandError, "op0", f"{pair} is not supported on the Scalar Engine; use multiply/add")
    if chk.engine is Engine.gpsimd and ops.op0.name != "rsqrt":
        chk.fail(OperandError, "engine", "tensor_scalar runs on the GpSimd Engine only for op0=nl.rsqrt")


def _check_integer_operand(chk: Check, name: str, operand: object) -> None:
    """Bitvec operators take integer operands: an integral scalar or an integer tensor."""
    if isinstance(operand, Tensor):
        check_bitvec_dtypes(chk, name, OPS["bitwise_and"], [(name, operand)])
    elif operand is not None and float(operand) != int(operand):  # type: ignore[arg-type]
        chk.fail(DtypeError, name, f"{operand} is not an integer, as a bitvec operator requires")
    elif operand is not None and not -(2**31) <= (bits := int(operand)) < 2**32:  # type: ignore[arg-type]
        chk.fail(OperandError, name, f"{bits} does not fit the 32 bits a bitvec operator works on")


def _tensor_scalar_cost(ops: TensorScalarOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N)`` cycles of the Vector, Scalar or GpSimd Engine (one operator costs the same as two)."""
    return per_element_cost(engine, hw, ops.data.free_size, streams=(ops.dst, ops.data))


@instruction(
    "tensor_scalar",
    TensorScalarOps,
    carries=ELEMENTWISE_TENSOR_SCALAR,
    engines=(Engine.vector, Engine.scalar, Engine.gpsimd),
    cost=_tensor_scalar_cost,
    validate=_tensor_scalar_validate,
    choose_engine=_choose_vector,
    dtypes="integer types for bitvec ops; any for arithmetic, operand0/operand1 fp32",
    overwrites=sets_all_of_dst,
    reads_values=_tensor_scalar_layout_free,
)
def tensor_scalar(ops: TensorScalarOps, state: EngineState) -> None:
    """``dst = (data op0 operand0) op1 operand1``; operands are scalars or ``(P, 1)`` columns."""
    p = ops.data.partitions
    if ops.op0.is_bitvec:
        x = as_rows(ops.data.array, p)
        result = _bitvec_step(ops.op0, x, ops.operand0, ops.reverse0, p)
        if ops.op1 is not None:
            result = _bitvec_step(ops.op1, result, ops.operand1, ops.reverse1, p)  # type: ignore[arg-type]
        ops.dst.array[...] = result.astype(ops.dst.dtype).reshape(ops.dst.shape)
        return
    if _float32_in_place(ops):
        return
    result = apply_alu(ops.op0, as_rows(f32(ops.data), p), per_partition(ops.operand0, p), ops.reverse0)
    if ops.op1 is not None:
        result = apply_alu(ops.op1, result, per_partition(ops.operand1, p), ops.reverse1)  # type: ignore[arg-type]
    write(ops.dst, result)


def _float32_in_place(ops: TensorScalarOps) -> bool:
    """The float32 case of :func:`tensor_scalar` with numpy ufuncs writing dst directly; False if it does not apply.

    It applies to two-dim float32 data and dst of one shape; operand1 must not share memory with dst (the
    second step would read what the first wrote, where the instruction reads its operands first).
    """
    dst, data = ops.dst.array, ops.data.array
    op0, op1, operand0, operand1 = ops.op0, ops.op1, ops.operand0, ops.operand1
    if not (
        dst.ndim == 2
        and dst.dtype == data.dtype == F32
        and dst.shape == data.shape
        and not is_tfloat32(ops.dst.dtype)
        and op0.binary in EXACT_UFUNCS
        and (op1 is None or op1.binary in EXACT_UFUNCS)
        and not (isinstance(operand1, Tensor) and np.may_share_memory(operand1.array, dst))
    ):
        return False
    p = ops.data.partitions
    with np.errstate(all="ignore"):
        y = per_partition(operand0, p)
        first, second = (y, data) if ops.reverse0 else (data, y)
        op0.binary(first, second, out=dst)  # type: ignore[misc]
        if op1 is not None:
            y = per_partition(operand1, p)  # type: ignore[arg-type]
            first, second = (y, dst) if ops.reverse1 else (dst, y)
            op1.binary(first, second, out=dst)  # type: ignore[misc]
    return True


def _bitvec_step(op: Op, x: np.ndarray, operand: Tensor | float | int, reverse: bool, p: int) -> np.ndarray:
    y = operand.array.reshape(p, 1) if isinstance(operand, Tensor) else np.asarray(int(operand)).astype(x.dtype)
    return apply_alu(op, x, y, reverse)


# -- tensor_copy ----------------------------------------------------------------------


class TensorCopyOps(Operands):
    dst: Out
    src: In
    engine: Engine = Engine.unknown


def _tensor_copy_validate(ops: TensorCopyOps, chk: Check) -> None:
    check_same_layout(chk, "src", ops.src, "dst", ops.dst)
    if chk.engine is Engine.scalar:
        require(
            chk,
            "scalar_tensor_copy",
            "engine",
            "tensor_copy on the Scalar Engine needs NeuronCore-v3 or newer; use nisa.activation(op=nl.copy)",
        )


def _tensor_copy_cost(ops: TensorCopyOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N)`` cycles of the Vector, GpSimd or Scalar Engine."""
    return per_element_cost(engine, hw, ops.src.free_size, streams=(ops.dst, ops.src))


@instruction(
    "tensor_copy",
    TensorCopyOps,
    carries=COPIES,
    engines=(Engine.vector, Engine.gpsimd, Engine.scalar),
    cost=_tensor_copy_cost,
    validate=_tensor_copy_validate,
    choose_engine=_choose_vector,
    dtypes="any; equal dtypes copy bit-exactly, others cast through fp32",
    overwrites=sets_all_of_dst,
    reads_values=values_only,
)
def tensor_copy(ops: TensorCopyOps, state: EngineState) -> None:
    """Copy ``src`` to ``dst``: bit-exact for equal dtypes, through float32 otherwise."""
    if same_format(ops.src, ops.dst):
        copy_bits(ops.dst, ops.src)
    else:
        write(ops.dst, f32(ops.src))


# -- tensor_reduce --------------------------------------------------------------------


class TensorReduceOps(Operands):
    dst: Out
    op: Op
    data: In
    axis: int | tuple[int, ...] | list[int]
    negate: bool = False
    keepdims: bool = False


def _axes(ops: TensorReduceOps) -> tuple[int, ...]:
    return (ops.axis,) if isinstance(ops.axis, int) else tuple(sorted(ops.axis))


def _tensor_reduce_validate(ops: TensorReduceOps, chk: Check) -> None:
    if ops.op.reduce is None:
        chk.fail(OperandError, "op", f"{ops.op!r} is not a legal reduction operator")
    axes = _axes(ops)
    ndim = ops.data.ndim
    if not axes or any(a < 1 or a >= ndim for a in axes):
        chk.fail(ShapeError, "axis", f"{list(axes)} must name free axes of data (1 to {ndim - 1}), never axis 0")
    if list(axes) != list(range(axes[0], axes[0] + len(axes))):
        chk.fail(ShapeError, "axis", f"{list(axes)} must be consecutive axes")
    check_same_partitions(chk, "data", ops.data, "dst", ops.dst)
    kept = ops.data.free_size // int(np.prod([ops.data.shape[a] for a in axes]))
    if ops.dst.free_size != kept:
        chk.fail(ShapeError, "dst", f"has {ops.dst.free_size} elements per partition; the reduction gives {kept}")
    check_bitvec_dtypes(chk, "op", ops.op, [("data", ops.data), ("dst", ops.dst)])
    if ops.negate and ops.op.is_bitvec:
        chk.fail(OperandError, "negate", "applies only to arithmetic operators")


def _tensor_reduce_cost(ops: TensorReduceOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N/2)`` Vector cycles if data and dst are bf16 and op is add or max, else ``max(MIN_II, N)``."""
    fast = ops.data.dtype == ops.dst.dtype == BF16 and ops.op.name in ("add", "maximum")
    return per_element_cost(engine, hw, ops.data.free_size, hw.vector.fast_path_cycles_per_element if fast else 1.0)


@instruction(
    "tensor_reduce",
    TensorReduceOps,
    carries=REDUCES_DATA,
    engines=(Engine.vector,),
    cost=_tensor_reduce_cost,
    validate=_tensor_reduce_validate,
    dtypes="integer types for bitvec ops; any for arithmetic (fp32 math, cast to dst)",
    overwrites=sets_all_of_dst,
)
def tensor_reduce(ops: TensorReduceOps, state: EngineState) -> None:
    """Reduce ``data`` over free ``axis`` with ``op`` in float32; ``negate`` multiplies by -1."""
    axes = _axes(ops)
    assert ops.op.reduce is not None
    if ops.op.is_bitvec:
        result = ops.op.reduce.reduce(ops.data.array, axis=axes)
        ops.dst.array[...] = result.astype(ops.dst.dtype).reshape(ops.dst.shape)
        return
    result = ops.op.reduce.reduce(f32(ops.data), axis=axes).astype(np.float32)
    write(ops.dst, -result if ops.negate else result)


# -- memset ---------------------------------------------------------------------------


class MemsetOps(Operands):
    dst: Out
    value: float | int
    engine: Engine = Engine.unknown


def _memset_cost(ops: MemsetOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N/2)`` Vector cycles for zero into bf16/fp16, else ``max(MIN_II, N)`` Vector or GpSimd cycles."""
    fast = engine is Engine.vector and ops.value == 0 and ops.dst.dtype in (BF16, FP16)
    return per_element_cost(engine, hw, ops.dst.free_size, hw.vector.fast_path_cycles_per_element if fast else 1.0)


@instruction(
    "memset",
    MemsetOps,
    engines=(Engine.vector, Engine.gpsimd),
    cost=_memset_cost,
    choose_engine=_choose_vector,
    dtypes="any; value converted to dst as an engine write (integers: nearest even, saturated)",
    overwrites=sets_all_of_dst,
)
def memset(ops: MemsetOps, state: EngineState) -> None:
    """Fill ``dst`` with the constant ``value``, converted as every engine write is.

    An integer ``value`` is exact in an integer ``dst`` (no float32 rounding of large
    integers); a fractional one rounds to nearest even; both saturate at the type's range.
    """
    value = ops.value
    if is_integer(ops.dst.dtype) and ops.dst.dtype.kind != "b" and float(value).is_integer():
        write(ops.dst, np.full(ops.dst.shape, int(value), dtype=np.float64))
    else:
        write(ops.dst, np.full(ops.dst.shape, f32_scalar(value), dtype=np.float32))
