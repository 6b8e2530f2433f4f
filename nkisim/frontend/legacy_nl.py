"""The value-returning ``nl.*`` functions of the ``neuronxcc.nki`` API, on nkisim's instructions.

Each function takes the legacy arguments (``mask=``, ``dtype=``, index-expression views),
resolves the mask to a rectangle of its operands (``legacy_index.mask_box``) and then calls
the current front end's helper (``frontend.helpers``), which allocates the result and emits
the documented instructions. So ``nl.add(a, b)`` here and ``nl.add(a, b)`` in the current API
are the same ``tensor_tensor``; a masked element-wise result is computed on the rectangle and
copied into a tile of the full shape (one ``tensor_copy`` more than the compiler would emit).

Tile assignment (``t[...] = v``) and ``+=`` live here too (:func:`assign`, :func:`accumulate`):
``psum[...] += nisa.nc_matmul(x, y)`` and ``+= nl.matmul(...)`` become one matmul accumulating
into ``psum``, as the compiler makes them.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from nkisim.errors import KernelError, OperandError, ShapeError, user_location
from nkisim.frontend import helpers as today
from nkisim.frontend.context import current_context, is_running
from nkisim.frontend.helpers import CallableOp
from nkisim.frontend.legacy_index import mask_box
from nkisim.frontend.legacy_tile import OPERATORS, LegacyTile, PendingView, as_tile, empty_box, restrict
from nkisim.frontend.lowering import FP32, HelperCall, is_scalar, scalar_value, to_sbuf
from nkisim.isa.ops import OPS, Op
from nkisim.memory import Buffer, Tensor, same_bytes, to_dtype
from nkisim.memory.dtypes import NKI_DTYPES

BOOL = NKI_DTYPES["bool_"]

#: numpy functions a legacy kernel passes as ``op=`` (``np.add``, ``np.max``), by the op they stand for.
NUMPY_OPS: dict[Any, str] = {
    **{getattr(np, name): name for name in OPS if hasattr(np, name) and callable(getattr(np, name))},
    np.max: "maximum",
    np.amax: "maximum",
    np.min: "minimum",
    np.amin: "minimum",
    np.sum: "add",
    np.prod: "multiply",
    np.negative: "multiply",
    np.mean: "average",
}


def to_op(value: Any) -> Any:
    """``value`` with a numpy function (``np.add``) replaced by the nkisim operator it names."""
    try:
        name = NUMPY_OPS.get(value)
    except TypeError:  # unhashable
        return value
    return OPS[name] if name is not None else value


def retag(exc: KernelError, instruction: str) -> KernelError:
    """``exc`` naming ``instruction`` when it names none yet (errors of the shared index code)."""
    if exc.instruction:
        return exc
    fresh = type(exc)(exc.rule, loc=exc.loc, instruction=instruction, target=exc.target, operand=exc.operand)
    return fresh


class Masked:
    """One legacy call's mask: its rectangle, and the operands restricted to it."""

    def __init__(self, name: str, mask: Any) -> None:
        self.name = name
        self.loc = user_location(2)
        try:
            self.box = mask_box(mask)
        except KernelError as exc:
            raise retag(exc, name) from None

    @property
    def empty(self) -> bool:
        return empty_box(self.box)

    def __call__(self, value: Any) -> Any:
        try:
            return restrict(to_op(value), self.box, self.loc)
        except KernelError as exc:
            raise retag(exc, self.name) from None


def _full_shape(args: tuple[Any, ...]) -> tuple[int, ...] | None:
    shapes = [tuple(a.shape) for a in args if isinstance(a, (Tensor, PendingView))]
    return builtins.max(shapes, key=len) if shapes else None


def legacy(name: str, helper: Callable[..., Any], tiles: int = 1, dtype_default: Any = None) -> Callable[..., Any]:
    """The legacy ``nl.<name>``: ``helper`` (a current-API helper) with ``mask=`` and legacy defaults.

    ``tiles`` is how many leading positional arguments are operands (restricted by the mask).
    """

    def fn(*args: Any, mask: Any = None, **kwargs: Any) -> Any:
        m = Masked(f"nl.{name}", mask)
        full = _full_shape(args[:tiles])
        ops = tuple(m(a) if i < tiles else a for i, a in enumerate(args))
        if dtype_default is not None and kwargs.get("dtype") is None:
            kwargs["dtype"] = dtype_default
        kwargs = {k: to_op(v) for k, v in kwargs.items()}
        if any(isinstance(a, PendingView) for a in ops):
            raise OperandError("index expressions reach outside the tensor", instruction=f"nl.{name}")
        if tiles == 2 and len(ops) >= 2:
            ops = (*_across_partitions(ops[0], ops[1]), *ops[2:])
        result = as_tile(helper(*ops, **kwargs))
        if m.box is None or not isinstance(result, Tensor) or full is None or full == result.shape:
            return result
        return _widen(result, full, m)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``nl.{name}`` of ``neuronxcc.nki`` (with ``mask=``); see ``nkisim.nki.language.{name}``."
    return fn


def _across_partitions(x: Any, y: Any) -> tuple[Any, Any]:
    """``x`` and ``y`` with a one-partition tile broadcast to the other's partitions (numpy broadcasting).

    The legacy API broadcasts across partitions implicitly; the copy is a stride-0 ``dma_copy``
    into a new tile (``nl.broadcast_to``), as costly as the docs warn.
    """
    if not (isinstance(x, Tensor) and isinstance(y, Tensor)) or x.ndim != y.ndim or x.partitions == y.partitions:
        return x, y
    if y.partitions == 1:
        return x, today.broadcast_to(y, (x.partitions, *y.shape[1:]))
    if x.partitions == 1:
        return today.broadcast_to(x, (y.partitions, *x.shape[1:])), y
    return x, y


def _widen(result: Tensor, full: tuple[int, ...], m: Masked) -> LegacyTile:
    """A tile of the full shape holding ``result`` in the mask's rectangle."""
    call = HelperCall(m.name.removeprefix("nl."))
    dst = as_tile(call.tile(full, result.dtype, result.buffer))
    call.emit("tensor_copy", dst=restrict(dst, m.box, m.loc), src=result)
    return dst


# -- element-wise operators: operator constants that are also legacy functions -------

_COMPARISONS = {"equal", "not_equal", "greater", "greater_equal", "less", "less_equal"}
_LOGICAL = {"logical_and", "logical_or", "logical_xor"}


def _legacy_op(op: CallableOp) -> CallableOp:
    if op.helper is None:
        return op
    arity = 1 if op.is_activation or op.name in ("copy", "invert") else 2
    default = BOOL if op.name in _COMPARISONS | _LOGICAL else None
    fn = legacy(op.name, op.helper, tiles=arity, dtype_default=default)
    fields = {f.name: getattr(op, f.name) for f in dataclasses.fields(Op)}
    return CallableOp(**fields, helper=fn)


#: The legacy ``nl`` operator constants (``nl.add`` as ``op=``, or called as a function).
LEGACY_OPS: dict[str, CallableOp] = {name: _legacy_op(op) for name, op in today.CALLABLE_OPS.items()}
add = LEGACY_OPS["add"]
subtract = LEGACY_OPS["subtract"]
multiply = LEGACY_OPS["multiply"]
divide = LEGACY_OPS["divide"]
power = LEGACY_OPS["power"]
bitwise_and = LEGACY_OPS["bitwise_and"]
bitwise_or = LEGACY_OPS["bitwise_or"]
bitwise_xor = LEGACY_OPS["bitwise_xor"]
left_shift = LEGACY_OPS["left_shift"]
right_shift = LEGACY_OPS["right_shift"]
less = LEGACY_OPS["less"]
less_equal = LEGACY_OPS["less_equal"]
greater = LEGACY_OPS["greater"]
greater_equal = LEGACY_OPS["greater_equal"]
abs = LEGACY_OPS["abs"]
copy = LEGACY_OPS["copy"]
invert = LEGACY_OPS["invert"]
negative = legacy("negative", today.negative)
logical_not = legacy("logical_not", today.logical_not, dtype_default=BOOL)


# -- data movement ----------------------------------------------------------------------


def load(src: Any, *, mask: Any = None, dtype: Any = None, **kwargs: Any) -> LegacyTile:
    """A new SBUF tile holding ``src`` (an HBM view), cast to ``dtype`` (dma_copy).

    With a mask the tile has the full shape and the DMA writes the mask's rectangle of it.
    """
    m = Masked("nl.load", mask)
    if m.box is None:
        view = m(src)
        if isinstance(view, Tensor) and view.ndim == 1:  # A[0:128, i]: one value per partition, a [128, 1] tile
            view = view.reshape((view.shape[0], 1))
        return as_tile(today.load(view, dtype=dtype))
    call = HelperCall("load")
    full = _full_shape((src,)) or ()
    dst = as_tile(call.tile(full, call.dtype(dtype, src.dtype)))
    if not m.empty:
        call.emit("dma_copy", dst=restrict(dst, m.box, m.loc), src=m(src))
    return dst


def store(dst: Any, value: Any, *, mask: Any = None, **kwargs: Any) -> None:
    """Copy the on-chip tile ``value`` into the HBM view ``dst`` (dma_copy)."""
    m = Masked("nl.store", mask)
    target, source = m(dst), m(value)
    if m.empty:
        return
    if isinstance(source, Tensor) and source.buffer is Buffer.psum:
        call = HelperCall("store")
        source = to_sbuf(call, source)
    if is_scalar(source):
        call = HelperCall("store")
        staged = call.tile(target.shape if target.ndim >= 2 else (1, *target.shape), np.dtype(target.dtype))
        call.emit("memset", dst=staged, value=scalar_value(source))
        source = staged
    today.store(target, source)


def load_transpose2d(src: Any, *, mask: Any = None, dtype: Any = None, **kwargs: Any) -> LegacyTile:
    """``src`` (2-D HBM) transposed into a new SBUF tile (dma_transpose)."""
    m = Masked("nl.load_transpose2d", mask)
    return as_tile(today.load_transpose2d(m(src), dtype=dtype))


def atomic_rmw(dst: Any, value: Any, op: Any, *, mask: Any = None, **kwargs: Any) -> None:
    """``dst = op(dst, value)`` on HBM in one DMA (dma_copy with ``dst_rmw_op``)."""
    m = Masked("nl.atomic_rmw", mask)
    call = HelperCall("atomic_rmw")
    call.emit("dma_copy", dst=m(dst), src=m(value), dst_rmw_op=to_op(op))


def broadcast_to(src: Any, *, shape: Any, **kwargs: Any) -> LegacyTile:
    """``src`` broadcast to ``shape`` in a new SBUF tile."""
    return as_tile(today.broadcast_to(src, shape, kwargs.get("dtype")))


def matmul(x: Any, y: Any, *, transpose_x: bool = False, mask: Any = None, **kwargs: Any) -> LegacyTile:
    """``x @ y`` (``x.T @ y`` with ``transpose_x``) in a new float32 PSUM tile (nc_matmul).

    The matmul is held back until the next instruction, so ``acc += nl.matmul(...)``
    accumulates into ``acc`` directly.
    """
    m = Masked("nl.matmul", mask)
    x, y = m(x), m(y)
    if transpose_x:
        call = HelperCall("matmul")
        x, y = call.on_chip("x", x), call.on_chip("y", y)
        if x.partitions != y.partitions:
            raise call.error(ShapeError, f"x's partition dim {x.partitions} must match y's {y.partitions}")
        dst = as_tile(call.tile((x.free_size, *y.shape[1:]), FP32, Buffer.psum))
        kwargs_ = {"dst": dst, "stationary": to_sbuf(call, x), "moving": to_sbuf(call, y)}
        call.ctx.defer("nc_matmul", kwargs_, call.loc)
        return dst
    return as_tile(today.matmul(x, y, transpose_x=False))


def transpose(x: Any, *, dtype: Any = None, mask: Any = None, **kwargs: Any) -> LegacyTile:
    """Swap the partition and free dims of a 2-D tile (nc_transpose)."""
    return as_tile(today.transpose(Masked("nl.transpose", mask)(x), dtype=dtype))


def where(condition: Any, x: Any, y: Any, *, dtype: Any = None, mask: Any = None, **kwargs: Any) -> LegacyTile:
    m = Masked("nl.where", mask)
    return as_tile(today.where(m(condition), m(x), m(y), dtype=dtype))


def _reduction(name: str, fn: Callable[..., Any], dtype_default: Any = None) -> Callable[..., Any]:
    def reduce(x: Any, axis: Any, *, dtype: Any = None, mask: Any = None, keepdims: bool = False, **kw: Any) -> Any:
        m = Masked(f"nl.{name}", mask)
        out = dtype if dtype is not None else dtype_default
        return as_tile(fn(m(x), axis, dtype=out, keepdims=keepdims))

    reduce.__name__ = reduce.__qualname__ = name
    reduce.__doc__ = f"``nl.{name}(x, axis, dtype=None, mask=None, keepdims=False)`` (tensor_reduce)."
    return reduce


sum = _reduction("sum", today.HELPERS["sum"])
max = _reduction("max", today.HELPERS["max"])
min = _reduction("min", today.HELPERS["min"])
prod = _reduction("prod", today.HELPERS["prod"])
all = _reduction("all", today.HELPERS["all"], BOOL)
mean = _reduction("mean", today.HELPERS["mean"])


def var(x: Any, axis: Any, *, dtype: Any = None, mask: Any = None, **kwargs: Any) -> LegacyTile:
    return as_tile(today.var(Masked("nl.var", mask)(x), axis, dtype=dtype))


def softmax(x: Any, axis: Any, *, dtype: Any = None, compute_dtype: Any = None, mask: Any = None, **kw: Any) -> Any:
    return as_tile(today.softmax(Masked("nl.softmax", mask)(x), axis, dtype=dtype))


def rms_norm(
    x: Any, w: Any, axis: Any, n: int, epsilon: float = 1e-6, *, dtype: Any = None, compute_dtype: Any = None, **kw: Any
) -> LegacyTile:
    return as_tile(today.rms_norm(x, w, axis, n, epsilon, dtype=dtype, compute_dtype=compute_dtype))


def dropout(x: Any, rate: Any, *, dtype: Any = None, mask: Any = None, **kwargs: Any) -> LegacyTile:
    m = Masked("nl.dropout", mask)
    return as_tile(today.dropout(m(x), m(rate), dtype=dtype))


def gather_flattened(data: Any, indices: Any, *, mask: Any = None, dtype: Any = None, **kwargs: Any) -> LegacyTile:
    m = Masked("nl.gather_flattened", mask)
    return as_tile(today.gather_flattened(m(data), m(indices), dtype=dtype))


def rand(shape: Any, dtype: Any = np.float32, **kwargs: Any) -> LegacyTile:
    """A new SBUF tile of uniform random values in [0, 1)."""
    return as_tile(today.rand(shape, dtype, kwargs.get("buffer", Buffer.sbuf)))


def random_seed(seed: Any, *, mask: Any = None, **kwargs: Any) -> None:
    """Seed the generator ``nl.rand`` and ``nl.dropout`` use from a [1, 1] tile."""
    today.random_seed(seed)


def expand_dims(data: Any, axis: int) -> LegacyTile:
    return as_tile(today.expand_dims(data, axis))


def static_cast(input_data: Any, dtype: Any) -> Any:
    """``input_data`` cast to ``dtype`` in a new SBUF tile (tensor_copy).

    Outside a kernel, on a numpy array (as the SDK's attention sample prepares its inputs), the
    array cast to ``dtype``.
    """
    if isinstance(input_data, np.ndarray) and not is_running():
        return input_data.astype(to_dtype(dtype))
    return as_tile(today.copy(input_data, dtype=dtype))


NUMPY_OPS.update({sum: "add", max: "maximum", min: "minimum", prod: "multiply", all: "logical_and"})


# -- assignment and accumulation ----------------------------------------------------------


def _held(value: Any, opcode: str | None = None) -> Any:
    """The instruction held back whose result is ``value`` (of ``opcode``, if given), or None."""
    held = current_context().deferred
    if held is None or held.arguments.get("dst") is not value or opcode not in (None, held.opcode):
        return None
    return held


def assign(target: Tensor, value: Any) -> None:
    """``target[...] = value``: a scalar (memset), a tile (tensor_copy) or a DMA between HBM and SBUF.

    A legacy ``nisa`` result still held back is written into ``target`` directly, as the
    compiler does, when ``target`` has its shape, dtype and memory (a matmul: any PSUM tile).
    """
    call = HelperCall("assign")
    if is_scalar(value):
        if not target.buffer.is_on_chip:
            raise call.error(OperandError, f"cannot assign a scalar to HBM tensor {target.name!r}; use nl.store")
        call.emit("memset", dst=target, value=scalar_value(value))
        return
    if not isinstance(value, Tensor):
        raise call.error(OperandError, f"cannot assign {type(value).__name__} to {target!r}")
    held = _held(value)
    if held is not None and _retargets(held, target, value):
        held.arguments["dst"] = target
        if held.opcode == "nc_matmul":
            held.arguments["accumulate"] = False
        call.ctx.flush_deferred()
        return
    if same_bytes(target, value):
        call.ctx.flush_deferred()
        return
    if target.shape != value.shape and target.size == value.size:
        value = value.reshape(target.shape) if value.buffer.is_on_chip == target.buffer.is_on_chip else value
    if target.buffer.is_on_chip and value.buffer.is_on_chip:
        dynamic = "tensor_copy_dynamic_dst" if target.is_dynamic else "tensor_copy_dynamic_src"
        call.emit(dynamic if target.is_dynamic or value.is_dynamic else "tensor_copy", dst=target, src=value)
    else:
        call.emit("dma_copy", dst=target, src=value)


def _retargets(held: Any, target: Tensor, value: Tensor) -> bool:
    """True when the held instruction may write ``target`` instead of its own result ``value``."""
    if target.shape != value.shape or target.is_dynamic:
        return False
    if held.opcode == "nc_matmul":
        return target.buffer is Buffer.psum
    return target.buffer is value.buffer and target.dtype == value.dtype


def accumulate(target: Tensor, value: Any, op_name: str) -> None:
    """``target op= value`` in place; ``psum += <matmul result>`` accumulates in the matmul itself."""
    call = HelperCall(f"{op_name} (in place)")
    held = _held(value, "nc_matmul") if op_name == "add" else None
    if held is not None and target.buffer is Buffer.psum:
        held.arguments["dst"] = target
        call.ctx.start_accumulation(target)
        call.ctx.flush_deferred()
        return
    op = OPS[op_name]
    if isinstance(value, PendingView):
        raise value.error(call.loc)
    if is_scalar(value):
        call.emit("tensor_scalar", dst=target, data=target, op0=op, operand0=scalar_value(value))
        return
    value = call.on_chip("value", value)
    if value.free_size == 1 and target.free_size > 1 and value.partitions == target.partitions:
        column = value if value.dtype == FP32 else today.copy(value, dtype=FP32)
        call.emit("tensor_scalar", dst=target, data=target, op0=op, operand0=column)
        return
    if value.buffer is Buffer.psum and target.buffer is Buffer.psum:
        value = to_sbuf(call, value)
    call.emit("tensor_tensor", dst=target, data1=target, data2=value, op=op)


def device_print(prefix: str, x: Any, *, mask: Any = None, **kwargs: Any) -> None:
    """Print a tile's values when the kernel reaches this line (after the instructions before it)."""
    ctx = current_context()
    ctx.flush_deferred()
    if not isinstance(x, Tensor):
        raise OperandError(f"x must be a tile, got {type(x).__name__}", instruction="nl.device_print")
    ctx.machine.check_running()  # a run that will start again prints nothing more
    if ctx.prints.claim():
        ctx.memory.settle_pending()  # tiles whose poison is due show it
        print(f"{prefix} {x.name}{list(x.shape)}:\n{np.asarray(x.array)}")


def unsupported(name: str, why: str) -> Callable[..., Any]:
    """A legacy function nkisim does not provide: calling it raises an :class:`OperandError` saying why."""

    def fn(*args: Any, **kwargs: Any) -> Any:
        raise OperandError(f"is not supported by nkisim: {why}", instruction=f"nl.{name}")

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Not supported by nkisim: {why}"
    return fn


OPERATORS.update(LEGACY_OPS)
OPERATORS.update(
    {"assign": assign, "accumulate": accumulate, "broadcast_to": broadcast_to, "negative": negative, "copy": copy}
)
