"""Reductions, scans and fused arithmetic: Vector Engine instructions and the GpSimd partition reduce.

Several of these share the Vector Engine's accumulator registers,
``EngineState.vector_reduce_regs`` (one float32 per partition, persisting across
instructions): ``exponential``, ``tensor_scalar_reduce`` and
``tensor_scalar_cumulative`` here, ``select_reduce`` and ``range_select`` in
:mod:`nkisim.isa.select`. Scans run as numba kernels (:mod:`nkisim.isa.kernels`).
"""

from __future__ import annotations

import numpy as np

from nkisim.errors import DtypeError, OperandError, ShapeError
from nkisim.hw import Engine, HwConfig
from nkisim.isa import enums
from nkisim.isa.carriers import ELEMENTWISE_DATA
from nkisim.isa.common import (
    apply_alu,
    as_rows,
    check_alu,
    check_bitvec_dtypes,
    check_not_both_psum,
    check_same_layout,
    check_vector_operand,
    f32,
    per_partition,
    write,
)
from nkisim.isa.kernels import alu_code, cumulative_kernel, tensor_tensor_scan_kernel
from nkisim.isa.ops import Op
from nkisim.isa.spec import (
    Check,
    Cost,
    EngineState,
    In,
    Operands,
    OptOut,
    OptScalarOrIn,
    Out,
    ScalarOrIn,
    engine_cost,
    instruction,
)
from nkisim.isa.vector import per_element_cost
from nkisim.memory import Tensor, dtype_name

F32 = np.float32
_FP32 = "float32"


# -- helpers shared with nkisim.isa.select --------------------------------------------


def vector_regs(state: EngineState, partitions: int) -> np.ndarray:
    """The Vector Engine accumulators of the first ``partitions`` partitions (a view)."""
    return state.vector_reduce_regs[:partitions]


def read_out(reduce_res: Tensor | None, regs: np.ndarray) -> None:
    """Copy accumulator registers into ``reduce_res`` (cast on write), if it is given."""
    if reduce_res is not None:
        write(reduce_res, regs.reshape(-1, 1))


def with_readout(cost: Cost, hw: HwConfig, engine: Engine, reduce_res: Tensor | None) -> Cost:
    """Add the ``MIN_II`` cycles of the instruction that reads the accumulators into ``reduce_res``."""
    if reduce_res is None:
        return cost
    extra = hw.engine(engine).min_ii_cycles
    return engine_cost(hw, engine, cost.cycles + extra)


def check_arithmetic(chk: Check, name: str, op: Op) -> None:
    """An ALU operator that is not a bitvec operator."""
    check_alu(chk, name, op)
    if op.is_bitvec:
        chk.fail(OperandError, name, f"bitvec operator {op!r} is not supported; use an arithmetic operator")


def check_one_of(chk: Check, name: str, op: Op | None, allowed: tuple[str, ...]) -> None:
    if op is None or op.name not in allowed:
        names = ", ".join(f"nl.{a}" for a in allowed)
        chk.fail(OperandError, name, f"{op!r} is not supported; use one of {names}")


def check_column(chk: Check, name: str, t: Tensor, partitions: int) -> None:
    """A ``(partitions, 1)`` tile: one element per partition."""
    if t.partitions != partitions or t.free_size != 1:
        chk.fail(ShapeError, name, f"shape {list(t.shape)} must be ({partitions}, 1): one element per partition")


def check_dtype_in(chk: Check, name: str, t: Tensor, allowed: tuple[str, ...]) -> None:
    if dtype_name(t.dtype) not in allowed:
        chk.fail(DtypeError, name, f"dtype {dtype_name(t.dtype)} is not supported; use one of {', '.join(allowed)}")


def check_fp32_operand(chk: Check, name: str, value: object) -> None:
    """A scalar, or a tile whose dtype is float32."""
    if isinstance(value, Tensor) and dtype_name(value.dtype) != _FP32:
        chk.fail(DtypeError, name, f"dtype {dtype_name(value.dtype)} must be float32")


def check_reduce_cmd(chk: Check, cmd: enums.reduce_cmd, allowed: tuple[enums.reduce_cmd, ...]) -> None:
    if cmd not in allowed:
        names = ", ".join(c.name for c in allowed)
        chk.fail(OperandError, "reduce_cmd", f"{cmd.name} is not supported; use one of {names}")


_IDENTITY = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}
_ARITH_REDUCE = ("add", "subtract", "multiply", "maximum", "minimum")


# -- tensor_partition_reduce ----------------------------------------------------------


class TensorPartitionReduceOps(Operands):
    dst: Out
    op: Op
    data: In


_PARTITION_REDUCE_OPS = ("add", "average", "maximum", "bitwise_or", "bitwise_and")


def _tensor_partition_reduce_validate(ops: TensorPartitionReduceOps, chk: Check) -> None:
    check_one_of(chk, "op", ops.op, _PARTITION_REDUCE_OPS)
    if ops.dst.partitions != 1:
        chk.fail(ShapeError, "dst", f"shape {list(ops.dst.shape)} must have partition dim 1 (the reduced axis)")
    if ops.dst.free_size != ops.data.free_size:
        chk.fail(
            ShapeError,
            "dst",
            f"has {ops.dst.free_size} elements per partition but data has {ops.data.free_size}",
        )
    check_bitvec_dtypes(chk, "op", ops.op, [("data", ops.data), ("dst", ops.dst)])


def _tensor_partition_reduce_cost(ops: TensorPartitionReduceOps, hw: HwConfig, engine: Engine) -> Cost:
    """``GPSIMD_START + 2N`` GpSimd cycles (estimate)."""
    cycles = hw.gpsimd.startup_cycles + hw.gpsimd.partition_reduce_cycles_per_element * ops.data.free_size
    return engine_cost(hw, engine, cycles)


@instruction(
    "tensor_partition_reduce",
    TensorPartitionReduceOps,
    engines=(Engine.gpsimd,),
    cost=_tensor_partition_reduce_cost,
    validate=_tensor_partition_reduce_validate,
    dtypes="integer types for bitvec ops; any for arithmetic (fp32 math, cast to dst)",
)
def tensor_partition_reduce(ops: TensorPartitionReduceOps, state: EngineState) -> None:
    """``dst[0, ...] = op`` over the partitions of ``data``, in float32 (bitwise ops: on the integer bits).

    ``nl.average`` is the float32 sum over the partitions divided by their number.
    """
    p = ops.data.partitions
    if ops.op.averages:
        total = np.add.reduce(as_rows(f32(ops.data), p), axis=0, dtype=F32)
        write(ops.dst, total / F32(p))
        return
    assert ops.op.reduce is not None
    if ops.op.is_bitvec:
        result = ops.op.reduce.reduce(as_rows(ops.data.array, p), axis=0)
        ops.dst.array[...] = result.astype(ops.dst.dtype).reshape(ops.dst.shape)
        return
    write(ops.dst, ops.op.reduce.reduce(as_rows(f32(ops.data), p), axis=0, dtype=F32))


# -- tensor_scalar_reduce -------------------------------------------------------------


class TensorScalarReduceOps(Operands):
    dst: Out
    data: In
    op0: Op
    operand0: ScalarOrIn
    reduce_op: Op
    reduce_res: Out
    reverse0: bool = False


def _tensor_scalar_reduce_validate(ops: TensorScalarReduceOps, chk: Check) -> None:
    p = ops.data.partitions
    check_arithmetic(chk, "op0", ops.op0)
    check_one_of(chk, "reduce_op", ops.reduce_op, _ARITH_REDUCE)
    check_same_layout(chk, "data", ops.data, "dst", ops.dst)
    check_vector_operand(chk, "operand0", ops.operand0, p)
    check_column(chk, "reduce_res", ops.reduce_res, p)
    if ops.reverse0:
        chk.fail(OperandError, "reverse0", "is not supported yet by tensor_scalar_reduce")


def _tensor_scalar_reduce_cost(ops: TensorScalarReduceOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N) + MIN_II`` Vector cycles (the second term reads the accumulators into reduce_res)."""
    return with_readout(per_element_cost(engine, hw, ops.data.free_size), hw, engine, ops.reduce_res)


@instruction(
    "tensor_scalar_reduce",
    TensorScalarReduceOps,
    engines=(Engine.vector,),
    cost=_tensor_scalar_reduce_cost,
    validate=_tensor_scalar_reduce_validate,
    dtypes="any (fp32 math, cast to dst); operand0 fp32; reduce_res floats",
)
def tensor_scalar_reduce(ops: TensorScalarReduceOps, state: EngineState) -> None:
    """``dst = data op0 operand0``; ``reduce_res = reduce_op`` of it over every free axis.

    The reduction runs over the float32 results (before the cast to ``dst``), in
    element order (``subtract``: ``x0 - x1 - x2 ...``). It resets the Vector
    accumulators and leaves the result in them.
    """
    p = ops.data.partitions
    with np.errstate(all="ignore"):
        result = np.asarray(apply_alu(ops.op0, as_rows(f32(ops.data), p), per_partition(ops.operand0, p), False), F32)
        write(ops.dst, result)
        assert ops.reduce_op.reduce is not None
        regs = vector_regs(state, p)
        regs[...] = ops.reduce_op.reduce.reduce(result, axis=1, dtype=F32)
    read_out(ops.reduce_res, regs)


# -- tensor_scalar_cumulative ---------------------------------------------------------


class TensorScalarCumulativeOps(Operands):
    dst: Out
    src: In
    op0: Op
    op1: Op
    imm0: ScalarOrIn
    imm1: OptScalarOrIn = None
    reduce_cmd: enums.reduce_cmd = enums.reduce_cmd.reset_reduce


_CUMULATIVE_DTYPES = (
    "bfloat16",
    "float16",
    "float32",
    "float8_e4m3",
    "float8_e5m2",
    "float8_e4m3fn",
    "uint8",
    "uint16",
    "int8",
    "int16",
)
_CUMULATIVE_CMDS = (enums.reduce_cmd.reset_reduce, enums.reduce_cmd.reduce, enums.reduce_cmd.load_reduce)


def _tensor_scalar_cumulative_validate(ops: TensorScalarCumulativeOps, chk: Check) -> None:
    p = ops.src.partitions
    check_arithmetic(chk, "op0", ops.op0)
    check_one_of(chk, "op1", ops.op1, _ARITH_REDUCE)
    check_same_layout(chk, "src", ops.src, "dst", ops.dst)
    check_dtype_in(chk, "src", ops.src, _CUMULATIVE_DTYPES)
    check_dtype_in(chk, "dst", ops.dst, _CUMULATIVE_DTYPES)
    check_vector_operand(chk, "imm0", ops.imm0, p)
    check_fp32_operand(chk, "imm0", ops.imm0)
    check_reduce_cmd(chk, ops.reduce_cmd, _CUMULATIVE_CMDS)
    if ops.reduce_cmd is enums.reduce_cmd.load_reduce and ops.imm1 is None:
        chk.fail(OperandError, "imm1", "is required with reduce_cmd=load_reduce (the accumulator's initial value)")
    if ops.imm1 is not None:
        check_vector_operand(chk, "imm1", ops.imm1, p)
        check_fp32_operand(chk, "imm1", ops.imm1)


def _tensor_scalar_cumulative_cost(ops: TensorScalarCumulativeOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N)`` Vector cycles, as tensor_scalar (estimate)."""
    return per_element_cost(engine, hw, ops.src.free_size)


@instruction(
    "tensor_scalar_cumulative",
    TensorScalarCumulativeOps,
    engines=(Engine.vector,),
    cost=_tensor_scalar_cumulative_cost,
    validate=_tensor_scalar_cumulative_validate,
    dtypes="bf16/fp16/fp32/fp8/(u)int8/(u)int16, no 32-bit integers; imm0, imm1 fp32",
)
def tensor_scalar_cumulative(ops: TensorScalarCumulativeOps, state: EngineState) -> None:
    """Running ``reg = op1(op0(src[i], imm0), reg); dst[i] = reg`` per partition, over the flattened free dims.

    ``reduce_cmd`` sets the starting accumulator: ``reset_reduce`` the identity of
    ``op1`` (0 for add/subtract, 1 for multiply, -inf for max, +inf for min),
    ``load_reduce`` ``imm1``, ``reduce`` the value left by the previous instruction.
    The final value stays in the Vector accumulators.
    """
    p = ops.src.partitions
    regs = vector_regs(state, p)
    if ops.reduce_cmd is enums.reduce_cmd.reset_reduce:
        regs[...] = _IDENTITY[ops.op1.name]
    elif ops.reduce_cmd is enums.reduce_cmd.load_reduce:
        assert ops.imm1 is not None
        regs[...] = np.broadcast_to(per_partition(ops.imm1, p), (p, 1)).reshape(p)
    with np.errstate(all="ignore"):
        values = np.asarray(apply_alu(ops.op0, as_rows(f32(ops.src), p), per_partition(ops.imm0, p), False), F32)
    acc = np.ascontiguousarray(regs, dtype=F32)
    out = cumulative_kernel(np.ascontiguousarray(values), acc, alu_code(ops.op1))
    regs[...] = acc
    write(ops.dst, out)


# -- tensor_tensor_scan ---------------------------------------------------------------


class TensorTensorScanOps(Operands):
    dst: Out
    data0: In
    data1: In
    initial: ScalarOrIn
    op0: Op
    op1: Op
    reverse0: bool = False
    reverse1: bool = False


def _tensor_tensor_scan_validate(ops: TensorTensorScanOps, chk: Check) -> None:
    check_arithmetic(chk, "op0", ops.op0)
    check_arithmetic(chk, "op1", ops.op1)
    check_same_layout(chk, "data0", ops.data0, "data1", ops.data1)
    check_same_layout(chk, "data0", ops.data0, "dst", ops.dst)
    check_not_both_psum(chk, "data0", ops.data0, "data1", ops.data1)
    if isinstance(ops.initial, Tensor):
        check_column(chk, "initial", ops.initial, ops.data0.partitions)


def _tensor_tensor_scan_cost(ops: TensorTensorScanOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, 2N)`` Vector cycles."""
    return per_element_cost(engine, hw, ops.data0.free_size, hw.vector.two_sbuf_inputs_cycles_per_element)


@instruction(
    "tensor_tensor_scan",
    TensorTensorScanOps,
    engines=(Engine.vector,),
    cost=_tensor_tensor_scan_cost,
    validate=_tensor_tensor_scan_validate,
    dtypes="any (fp32 math, cast to dst); initial fp32",
)
def tensor_tensor_scan(ops: TensorTensorScanOps, state: EngineState) -> None:
    """``r[i] = op1(op0(data0[i], r[i-1]), data1[i])`` per partition over the flattened free dims, ``r[-1] = initial``.

    ``reverse0`` makes ``data0`` the right operand of ``op0``; ``reverse1`` makes
    ``data1`` the left operand of ``op1``. float32 math, cast on write.
    """
    p = ops.data0.partitions
    initial = np.broadcast_to(per_partition(ops.initial, p), (p, 1)).reshape(p).astype(F32)
    out = tensor_tensor_scan_kernel(
        np.ascontiguousarray(as_rows(f32(ops.data0), p)),
        np.ascontiguousarray(as_rows(f32(ops.data1), p)),
        initial,
        alu_code(ops.op0),
        alu_code(ops.op1),
        ops.reverse0,
        ops.reverse1,
    )
    write(ops.dst, out)


# -- scalar_tensor_tensor -------------------------------------------------------------


class ScalarTensorTensorOps(Operands):
    dst: Out
    data: In
    op0: Op
    operand0: ScalarOrIn
    op1: Op
    operand1: In
    reverse0: bool = False
    reverse1: bool = False


def _scalar_tensor_tensor_validate(ops: ScalarTensorTensorOps, chk: Check) -> None:
    check_arithmetic(chk, "op0", ops.op0)
    check_arithmetic(chk, "op1", ops.op1)
    check_same_layout(chk, "data", ops.data, "operand1", ops.operand1)
    check_same_layout(chk, "data", ops.data, "dst", ops.dst)
    check_vector_operand(chk, "operand0", ops.operand0, ops.data.partitions)
    check_not_both_psum(chk, "data", ops.data, "operand1", ops.operand1)


def _scalar_tensor_tensor_cost(ops: ScalarTensorTensorOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, c*N)`` Vector cycles: c=1 if bf16 data/operand1, op0 subtract, op1 multiply, N even; else c=2."""
    n = ops.data.free_size
    fast = (
        dtype_name(ops.data.dtype) == dtype_name(ops.operand1.dtype) == "bfloat16"
        and ops.op0.name == "subtract"
        and ops.op1.name == "multiply"
        and n % 2 == 0
    )
    return per_element_cost(engine, hw, n, 1.0 if fast else hw.vector.two_sbuf_inputs_cycles_per_element)


@instruction(
    "scalar_tensor_tensor",
    ScalarTensorTensorOps,
    engines=(Engine.vector,),
    cost=_scalar_tensor_tensor_cost,
    validate=_scalar_tensor_tensor_validate,
    dtypes="any, all inputs (fp32 math, cast to dst)",
)
def scalar_tensor_tensor(ops: ScalarTensorTensorOps, state: EngineState) -> None:
    """``dst = (data op0 operand0) op1 operand1`` in float32; ``operand0`` broadcasts, ``operand1`` is a tile."""
    p = ops.data.partitions
    with np.errstate(all="ignore"):
        t = np.asarray(apply_alu(ops.op0, as_rows(f32(ops.data), p), per_partition(ops.operand0, p), ops.reverse0), F32)
        write(ops.dst, apply_alu(ops.op1, t, as_rows(f32(ops.operand1), p), ops.reverse1))


# -- exponential ----------------------------------------------------------------------


class ExponentialOps(Operands):
    dst: Out
    src: In
    max_value: ScalarOrIn = 0.0
    reduce_res: OptOut = None
    reduce_cmd: enums.reduce_cmd = enums.reduce_cmd.idle
    reduce_init: ScalarOrIn = 0.0


_EXP_DST = ("float8_e4m3", "float8_e5m2", "float16", "bfloat16", "float32", "tfloat32")
_EXP_DST += ("int8", "int16", "int32", "uint8", "uint16")
_EXP_SRC = ("float8_e4m3", "float8_e5m2", "float16", "bfloat16", "float32")
_EXP_SRC += ("int8", "int16", "int32", "uint8", "uint16", "uint32")
_EXP_RES = ("float8_e4m3", "float8_e5m2", "float16", "bfloat16", "float32", "tfloat32")
_EXP_CMDS = (
    enums.reduce_cmd.idle,
    enums.reduce_cmd.reset_reduce,
    enums.reduce_cmd.reduce,
    enums.reduce_cmd.load_reduce,
)


def _exponential_validate(ops: ExponentialOps, chk: Check) -> None:
    p = ops.src.partitions
    check_same_layout(chk, "src", ops.src, "dst", ops.dst)
    for name, t in (("src", ops.src), ("dst", ops.dst)):
        if t.ndim > 4:
            chk.fail(ShapeError, name, f"has {t.ndim} dims; at most 4 are supported")
    check_dtype_in(chk, "src", ops.src, _EXP_SRC)
    check_dtype_in(chk, "dst", ops.dst, _EXP_DST)
    check_vector_operand(chk, "max_value", ops.max_value, p)
    check_fp32_operand(chk, "max_value", ops.max_value)
    check_reduce_cmd(chk, ops.reduce_cmd, _EXP_CMDS)
    check_vector_operand(chk, "reduce_init", ops.reduce_init, p)
    check_fp32_operand(chk, "reduce_init", ops.reduce_init)
    loads = ops.reduce_cmd is enums.reduce_cmd.load_reduce
    if not loads and (isinstance(ops.reduce_init, Tensor) or float(ops.reduce_init) != 0.0):
        chk.fail(OperandError, "reduce_init", "must be unset or 0.0 unless reduce_cmd is load_reduce")
    if ops.reduce_res is not None:
        check_column(chk, "reduce_res", ops.reduce_res, p)
        check_dtype_in(chk, "reduce_res", ops.reduce_res, _EXP_RES)


def _exponential_cost(ops: ExponentialOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N/4)`` Vector cycles, ``+ MIN_II`` with reduce_res: 4x the Scalar exp throughput (estimate)."""
    cost = per_element_cost(engine, hw, ops.src.free_size, hw.vector.exponential_cycles_per_element)
    return with_readout(cost, hw, engine, ops.reduce_res)


@instruction(
    "exponential",
    ExponentialOps,
    engines=(Engine.vector,),
    cost=_exponential_cost,
    validate=_exponential_validate,
    requires=("vector_exponential",),
    dtypes="src floats (no tf32) or integers; dst floats or integers (no uint32); max_value fp32",
)
def exponential(ops: ExponentialOps, state: EngineState) -> None:
    """``dst = exp(src - max_value)`` in float32, with an optional running sum in the Vector accumulators.

    ``reset_reduce`` zeroes the accumulators, ``load_reduce`` loads ``reduce_init``,
    ``reduce`` keeps them; each of the three then adds the free-axis sum of the
    float32 results (before the cast to ``dst``). ``idle`` leaves them unchanged.
    ``reduce_res`` receives the accumulators.
    """
    p = ops.src.partitions
    with np.errstate(all="ignore"):
        out = np.exp(as_rows(f32(ops.src), p) - per_partition(ops.max_value, p)).astype(F32, copy=False)
    write(ops.dst, out)
    regs = vector_regs(state, p)
    if ops.reduce_cmd is enums.reduce_cmd.reset_reduce:
        regs[...] = 0.0
    elif ops.reduce_cmd is enums.reduce_cmd.load_reduce:
        regs[...] = np.broadcast_to(per_partition(ops.reduce_init, p), (p, 1)).reshape(p)
    if ops.reduce_cmd is not enums.reduce_cmd.idle:
        regs += out.sum(axis=1, dtype=F32)
    read_out(ops.reduce_res, regs)


# -- reciprocal -----------------------------------------------------------------------


class ReciprocalOps(Operands):
    dst: Out
    data: In


def _reciprocal_validate(ops: ReciprocalOps, chk: Check) -> None:
    check_same_layout(chk, "data", ops.data, "dst", ops.dst)


def _reciprocal_cost(ops: ReciprocalOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, 8N)`` Vector cycles."""
    return per_element_cost(engine, hw, ops.data.free_size, hw.vector.reciprocal_cycles_per_element)


@instruction(
    "reciprocal",
    ReciprocalOps,
    carries=ELEMENTWISE_DATA,
    engines=(Engine.vector,),
    cost=_reciprocal_cost,
    validate=_reciprocal_validate,
    dtypes="any (fp32 math, cast to dst)",
)
def reciprocal(ops: ReciprocalOps, state: EngineState) -> None:
    """``dst = 1 / data`` in float32, cast on write."""
    with np.errstate(all="ignore"):
        write(ops.dst, F32(1.0) / f32(ops.data))
