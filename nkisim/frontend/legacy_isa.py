"""The value-returning ``nisa.*`` functions of the ``neuronxcc.nki`` API.

A legacy instruction returns its result: ``y = nisa.activation(op=nl.exp, data=x)``.
Each is described once in :data:`LEGACY_ISA` (its legacy argument order, and how its
result tile is shaped); :func:`make` builds the function, which allocates the result
tile and issues the current instruction of the same name with ``dst=`` that tile. So
both APIs run the same instruction spec, checks and costs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nkisim.errors import KernelError, OperandError, user_location
from nkisim.frontend.context import current_context
from nkisim.frontend.legacy_index import IndexExpr, Predicate, affine_fit
from nkisim.frontend.legacy_nl import Masked, retag
from nkisim.frontend.legacy_tile import as_tile
from nkisim.frontend.lowering import HelperCall, promote
from nkisim.isa.enums import dge_mode, matmul_perf_mode, oob_mode, reduce_cmd
from nkisim.isa.movement import CORE_PARTITIONS
from nkisim.isa.ops import OPS
from nkisim.memory import Buffer, to_dtype
from nkisim.memory.dtypes import NKI_DTYPES

FP32 = NKI_DTYPES["float32"]
UINT32 = NKI_DTYPES["uint32"]
FP32_MIN = float(np.finfo(np.float32).min)

#: ``(shape, default dtype, buffer)`` of a result, from the bound arguments.
Result = Callable[[dict[str, Any]], tuple[tuple[int, ...], Any, Buffer]]


def like(name: str) -> Result:
    """A result shaped and typed as argument ``name``, in SBUF."""
    return lambda a: (tuple(a[name].shape), a[name].dtype, Buffer.sbuf)


def _rows(n: int, dtype: Any = None) -> Result:
    def result(a: dict[str, Any]) -> tuple[tuple[int, ...], Any, Buffer]:
        data = a.get("data", a.get("src"))
        return (data.shape[0], n), dtype if dtype is not None else data.dtype, Buffer.sbuf

    return result


def _binary(a: dict[str, Any]) -> tuple[tuple[int, ...], Any, Buffer]:
    x, y = a["data1"], a["data2"]
    shape = tuple(np.broadcast_shapes(tuple(x.shape), tuple(y.shape)))
    return shape, promote(x.dtype, y.dtype), Buffer.sbuf


def _reduced(a: dict[str, Any]) -> tuple[tuple[int, ...], Any, Buffer]:
    data, axis = a["data"], a["axis"]
    axes = {int(x) % data.ndim for x in (axis if isinstance(axis, (tuple, list)) else (axis,))}
    if a.get("keepdims"):
        shape = tuple(1 if i in axes else d for i, d in enumerate(data.shape))
    else:
        shape = tuple(d for i, d in enumerate(data.shape) if i not in axes)
        shape = shape + (1,) * (2 - len(shape))
    return shape, data.dtype, Buffer.sbuf


def _matmul(a: dict[str, Any]) -> tuple[tuple[int, ...], Any, Buffer]:
    stationary, moving = a["stationary"], a["moving"]
    if a.get("perf_mode") not in (None, matmul_perf_mode.none, "none"):
        return (stationary.shape[-1], moving.shape[-1]), FP32, Buffer.psum
    if a.get("is_transpose"):
        return (stationary.free_size, stationary.partitions), stationary.dtype, Buffer.psum
    return (stationary.free_size, *moving.shape[1:]), FP32, Buffer.psum


def _transposed(a: dict[str, Any]) -> tuple[tuple[int, ...], Any, Buffer]:
    data = a["data"]
    engine = getattr(a.get("engine"), "name", "unknown")
    small = data.shape[0] <= 32 and data.free_size <= 32
    on_vector = engine == "vector" or (engine != "tensor" and small and data.buffer is Buffer.psum)
    return (data.free_size, data.shape[0]), data.dtype, Buffer.sbuf if on_vector else Buffer.psum


def _dma_transposed(a: dict[str, Any]) -> tuple[tuple[int, ...], Any, Buffer]:
    src, axes = a["src"], a.get("axes")
    order = tuple(axes) if axes else tuple(reversed(range(src.ndim)))
    return tuple(src.shape[i] for i in order), src.dtype, Buffer.sbuf


def _given(a: dict[str, Any]) -> tuple[tuple[int, ...], Any, Buffer]:
    shape = a.pop("shape")
    return tuple(shape), a.pop("dtype_arg"), Buffer.sbuf


def _expr_shape(a: dict[str, Any]) -> tuple[tuple[int, ...], Any, Buffer]:
    shape = tuple(a["expr"].shape)
    return shape + (1,) * (2 - len(shape)), a.pop("dtype_arg"), Buffer.sbuf


# -- argument conversions ---------------------------------------------------------------


def _affine(expr: IndexExpr, what: str) -> dict[str, Any]:
    values = expr.values.reshape(expr.shape + (1,) * (2 - expr.ndim))
    fit = affine_fit(values)
    if fit is None:
        raise OperandError(f"{what} must be affine in the partition and free indices")
    offset, steps = fit
    pattern = [[int(s), int(n)] for s, n in zip(steps[1:], values.shape[1:])]
    return {"pattern": pattern, "offset": offset, "channel_multiplier": int(steps[0])}


def _iota(a: dict[str, Any]) -> dict[str, Any]:
    expr = a.pop("expr")
    if isinstance(expr, (int, np.integer)):
        expr = IndexExpr(np.full(a["dst"].shape, int(expr)))
    return {**a, **_affine(expr, "iota's expr")}


def _affine_select(a: dict[str, Any]) -> dict[str, Any]:
    pred = a.pop("pred")
    if not isinstance(pred, Predicate) or pred.expr is None:
        raise OperandError("pred must be one comparison of an affine index expression (i_p - i_f >= 0)", operand="pred")
    return {**a, **_affine(pred.expr, "pred"), "cmp_op": OPS[pred.cmp or "equal"]}


BOOL = NKI_DTYPES["bool_"]
UINT8 = NKI_DTYPES["uint8"]


def _byte_predicate(a: dict[str, Any]) -> dict[str, Any]:
    """A ``bool_`` predicate tile read as ``uint8``: the same bytes (one per element, 0 or 1)."""
    predicate = a.get("predicate")
    if getattr(predicate, "dtype", None) == BOOL and hasattr(predicate, "view"):
        a["predicate"] = predicate.view(UINT8)
    return a


def _gathered(a: dict[str, Any]) -> tuple[tuple[int, ...], Any, Buffer]:
    """``local_gather``'s result: per partition, ``num_valid_indices`` x ``num_elem_per_idx`` elements.

    ``num_valid_indices`` defaults to every index of a GpSimd core's 16 partitions.
    """
    src, index, per_idx = a["src_buffer"], a["index"], a["num_elem_per_idx"]
    valid = a["num_valid_indices"]
    if valid is None:
        valid = index.free_size * min(index.partitions, CORE_PARTITIONS)
    return (src.shape[0], int(valid), int(per_idx)), src.dtype, Buffer.sbuf


def _perf_mode(a: dict[str, Any]) -> dict[str, Any]:
    mode = a.get("perf_mode")
    if isinstance(mode, str):
        a["perf_mode"] = matmul_perf_mode.double_row if mode.startswith("double_row") else matmul_perf_mode(mode)
    return a


@dataclass(frozen=True)
class LegacyInstr:
    """One legacy ``nisa`` function: its argument order and defaults, and its result.

    Attributes:
        params: the legacy arguments in order; the first ``positional`` may be given by position.
        defaults: the legacy defaults (arguments missing here are required).
        result: how the result tile is made; None for instructions that write a given ``dst``.
            With both a result and a ``dst`` parameter, a call that passes ``dst=`` writes that
            tile (and returns it), one that does not gets a new result tile.
        convert: legacy arguments to the current instruction's, after ``dst`` is set.
        target: the current instruction's name (default: the same).
        dtype_param: the legacy ``dtype`` is the result's dtype (False: the argument is required
            by the instruction itself, as iota's and memset's).
    """

    name: str
    params: tuple[str, ...]
    positional: int
    defaults: dict[str, Any] = field(default_factory=dict)
    result: Result | None = None
    convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    target: str = ""
    defer: bool = False


_RC = reduce_cmd.idle
LEGACY_ISA: tuple[LegacyInstr, ...] = (
    LegacyInstr("activation", ("op", "data", "bias", "scale", "reduce_op", "reduce_res", "reduce_cmd"), 2,
                {"bias": None, "scale": 1.0, "reduce_op": None, "reduce_res": None, "reduce_cmd": _RC}, like("data")),
    LegacyInstr("activation_reduce", ("op", "data", "reduce_op", "reduce_res", "bias", "scale"), 2,
                {"bias": None, "scale": 1.0}, like("data")),
    LegacyInstr("affine_select", ("pred", "on_true_tile", "on_false_value"), 3, {}, like("on_true_tile"),
                _affine_select),
    LegacyInstr("bn_aggr", ("data",), 1, {}, _rows(2)),
    LegacyInstr("bn_stats", ("data",), 1, {}, _rows(6)),
    LegacyInstr("dma_copy", ("dst", "src", "dst_rmw_op", "oob_mode", "dge_mode"), 0,
                {"dst_rmw_op": None, "oob_mode": oob_mode.error, "dge_mode": dge_mode.unknown}),
    LegacyInstr("dma_transpose", ("src", "axes", "dge_mode"), 1, {"axes": None, "dge_mode": dge_mode.unknown},
                _dma_transposed),
    LegacyInstr("dropout", ("data", "prob"), 2, {}, like("data")),
    LegacyInstr("iota", ("expr", "dtype_arg"), 2, {}, _expr_shape, _iota),
    LegacyInstr("local_gather", ("src_buffer", "index", "num_elem_per_idx", "num_valid_indices"), 4,
                {"num_elem_per_idx": 1, "num_valid_indices": None}, _gathered),
    LegacyInstr("max8", ("src",), 0, {}, _rows(8)),
    LegacyInstr("memset", ("shape", "value", "dtype_arg", "engine"), 3, {"engine": None}, _given),
    LegacyInstr("nc_find_index8", ("data", "vals"), 0, {}, _rows(8, UINT32)),
    LegacyInstr("nc_match_replace8", ("data", "vals", "imm", "dst_idx"), 0, {"dst_idx": None}, like("data")),
    LegacyInstr("nc_matmul", ("stationary", "moving", "is_stationary_onezero", "is_moving_onezero", "is_transpose",
                              "tile_position", "tile_size", "perf_mode"), 2,
                {"is_stationary_onezero": False, "is_moving_onezero": False, "is_transpose": False,
                 "tile_position": (), "tile_size": (), "perf_mode": matmul_perf_mode.none}, _matmul, _perf_mode,
                defer=True),
    LegacyInstr("nc_stream_shuffle", ("src", "dst", "shuffle_mask"), 3, {}),
    LegacyInstr("nc_transpose", ("data", "engine"), 1, {"engine": None}, _transposed),
    LegacyInstr("range_select", ("on_true_tile", "comp_op0", "comp_op1", "bound0", "bound1", "reduce_cmd",
                                 "reduce_res", "reduce_op", "range_start", "on_false_value"), 0,
                {"reduce_cmd": _RC, "reduce_res": None, "reduce_op": OPS["maximum"], "range_start": 0,
                 "on_false_value": FP32_MIN}, like("on_true_tile")),
    LegacyInstr("reciprocal", ("data",), 1, {}, like("data")),
    LegacyInstr("scalar_tensor_tensor", ("data", "op0", "operand0", "op1", "operand1", "reverse0", "reverse1"), 0,
                {"reverse0": False, "reverse1": False}, like("data")),
    LegacyInstr("select_reduce", ("dst", "predicate", "on_true", "on_false", "reduce_res", "reduce_cmd", "reduce_op",
                                  "reverse_pred"), 0,
                {"reduce_res": None, "reduce_cmd": _RC, "reduce_op": OPS["maximum"], "reverse_pred": False},
                None, _byte_predicate),
    LegacyInstr("sequence_bounds", ("segment_ids",), 0, {},
                lambda a: ((1, 2, a["segment_ids"].free_size), a["segment_ids"].dtype, Buffer.sbuf)),
    LegacyInstr("tensor_copy", ("src", "engine"), 1, {"engine": None}, like("src")),
    LegacyInstr("tensor_copy_dynamic_dst", ("dst", "src", "engine"), 0, {"engine": None}),
    LegacyInstr("tensor_copy_dynamic_src", ("src", "engine"), 1, {"engine": None}, like("src")),
    LegacyInstr("tensor_copy_predicated", ("src", "dst", "predicate", "reverse_pred"), 0, {"reverse_pred": False},
                None, _byte_predicate),
    LegacyInstr("tensor_partition_reduce", ("op", "data"), 2, {},
                lambda a: ((1, *a["data"].shape[1:]), a["data"].dtype, Buffer.sbuf)),
    LegacyInstr("tensor_reduce", ("op", "data", "axis", "negate", "keepdims"), 3,
                {"negate": False, "keepdims": False}, _reduced),
    LegacyInstr("tensor_scalar", ("data", "op0", "operand0", "reverse0", "op1", "operand1", "reverse1", "engine"), 7,
                {"reverse0": False, "op1": None, "operand1": None, "reverse1": False, "engine": None}, like("data")),
    LegacyInstr("tensor_scalar_cumulative", ("dst", "src", "op0", "op1", "imm0", "imm1", "reduce_cmd"), 0,
                {"dst": None, "imm1": None, "reduce_cmd": reduce_cmd.reset_reduce}, like("src")),
    LegacyInstr("tensor_scalar_reduce", ("data", "op0", "operand0", "reduce_op", "reduce_res", "reverse0"), 0,
                {"reverse0": False}, like("data")),
    LegacyInstr("tensor_tensor", ("data1", "data2", "op", "engine"), 3, {"engine": None}, _binary),
    LegacyInstr("tensor_tensor_scan", ("data0", "data1", "initial", "op0", "op1", "reverse0", "reverse1"), 7,
                {"reverse0": False, "reverse1": False}, like("data0")),
)  # fmt: skip


def _bind(spec: LegacyInstr, args: tuple[Any, ...], kwargs: dict[str, Any], loc: Any) -> dict[str, Any]:
    name = f"nisa.{spec.name}"
    if len(args) > spec.positional:
        raise OperandError(f"takes at most {spec.positional} positional arguments", loc=loc, instruction=name)
    bound = dict(zip(spec.params, args))
    for key, value in kwargs.items():
        if key == "dtype" and "dtype_arg" in spec.params:
            key = "dtype_arg"
        if key not in spec.params:
            raise OperandError("is not an argument of this instruction", loc=loc, instruction=name, operand=key)
        if key in bound:
            raise OperandError("is given both by position and by keyword", loc=loc, instruction=name, operand=key)
        bound[key] = value
    for key in spec.params:
        if key not in bound:
            if key not in spec.defaults:
                raise OperandError("is required", loc=loc, instruction=name, operand=key)
            bound[key] = spec.defaults[key]
    return {k: v for k, v in bound.items() if not (k == "engine" and v is None)}


def make(spec: LegacyInstr) -> Callable[..., Any]:
    """The legacy ``nisa.<name>`` function described by ``spec``."""
    name = f"nisa.{spec.name}"

    def fn(*args: Any, mask: Any = None, dtype: Any = None, name_: Any = None, **kwargs: Any) -> Any:
        loc = user_location()
        kwargs.pop("name", None)
        if dtype is not None and "dtype_arg" in spec.params:
            kwargs["dtype_arg"] = dtype
            dtype = None
        bound = _bind(spec, args, kwargs, loc)
        m = Masked(name, mask)
        try:
            return _issue(spec, bound, m, dtype, loc)
        except KernelError as exc:
            raise retag(exc, name) from None

    fn.__name__ = fn.__qualname__ = spec.name
    fn.__doc__ = f"``nisa.{spec.name}({', '.join(spec.params)})`` of ``neuronxcc.nki``: the result is returned."
    return fn


def _issue(spec: LegacyInstr, bound: dict[str, Any], m: Masked, dtype: Any, loc: Any) -> Any:
    ctx = current_context()
    dst = None
    made = False  # the result tile is made here (not a ``dst=`` the kernel passed)
    if spec.result is not None:
        dst = bound.get("dst")
        made = dst is None
    if made:
        shape, default, buffer = spec.result(bound)
        out = to_dtype(dtype) if dtype is not None else to_dtype(default)
        call = HelperCall(spec.name, "nisa")
        dst = as_tile(call.tile(tuple(int(d) for d in shape), out, buffer))
        bound["dst"] = dst
    operands = {k: m(v) for k, v in bound.items()}
    if spec.convert is not None:
        operands = spec.convert(operands)
    if m.empty:
        return dst
    if spec.defer or made:  # held back: ``t[...] = nisa.x(...)`` may still retarget it into t
        ctx.defer(spec.target or spec.name, operands, loc)
    else:
        ctx.emit(spec.target or spec.name, operands, loc)
    return dst


#: The legacy ``nisa`` functions by name.
LEGACY_NISA: dict[str, Callable[..., Any]] = {spec.name: make(spec) for spec in LEGACY_ISA}

__all__ = ["LEGACY_ISA", "LEGACY_NISA", "LegacyInstr", "math"]
