"""``nki.language`` for nkisim: data types, buffers, tensor creation, loops and operator constants.

Kernels use it exactly as NKI's: ``import nkisim.nki.language as nl``.
"""

from __future__ import annotations

import builtins
import dataclasses
import os
from typing import Any

import numpy as np

from nkisim.errors import DtypeError, OperandError, ShapeError, SourceLoc, user_location
from nkisim.frontend.context import current_context, is_running, running_context
from nkisim.frontend.helpers import CALLABLE_OPS, HELPERS
from nkisim.frontend.loops import AffineRange, DynamicRange, dynamic_iterations
from nkisim.hw import load_target
from nkisim.isa.registers import VirtualRegister
from nkisim.memory import ON_CHIP_BUFFERS, Buffer, DynSlice, Tensor, cast, to_dtype
from nkisim.memory.dtypes import NKI_DTYPES, PLAIN_DTYPES
from nkisim.memory.pattern import is_int

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
float8_e8m0fnu = NKI_DTYPES["float8_e8m0fnu"]
float8_e5m2_x4 = NKI_DTYPES["float8_e5m2_x4"]
float8_e4m3fn_x4 = NKI_DTYPES["float8_e4m3fn_x4"]
float4_e2m1fn_x4 = NKI_DTYPES["float4_e2m1fn_x4"]

# -- user classes (NKI 0.3+) ----------------------------------------------------------


class _NKIObjectMeta(type):
    """Builds NKI objects the way NKI translates them: from the keyword arguments given."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        init = cls.__init__
        generated = getattr(getattr(init, "__code__", None), "co_filename", "") == "<string>"
        if not dataclasses.is_dataclass(cls) or not generated:
            return super().__call__(*args, **kwargs)
        fields = [f for f in dataclasses.fields(cls) if f.init]
        if len(args) > len(fields):
            raise TypeError(f"{cls.__name__}() takes at most {len(fields)} positional arguments")
        obj = cls.__new__(cls)
        values = {f.name: a for f, a in zip(fields, args)}
        for name, value in kwargs.items():
            if name in values:
                raise TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
            values[name] = value
        for f in fields:
            if f.name in values:
                continue
            if f.default is not dataclasses.MISSING:
                values[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                values[f.name] = f.default_factory()
        obj.__dict__.update(values)
        post_init = getattr(obj, "__post_init__", None)
        if post_init is not None:
            post_init()
        return obj


class NKIObject(metaclass=_NKIObjectMeta):
    """Base class for user classes used in kernels (NKI 0.3+): keyword arguments become attributes.

    As in NKI, which translates such objects through their ``__dict__``, a dataclass
    subclass takes its fields by position or keyword, takes keywords that are not
    fields (plain class attributes) too, and leaves a field that is not given and has
    no default unset. A subclass's own ``__init__`` is called as usual.
    """

    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)


# -- buffers --------------------------------------------------------------------------
sbuf = Buffer.sbuf
psum = Buffer.psum
hbm = Buffer.hbm
private_hbm = Buffer.private_hbm
shared_hbm = Buffer.shared_hbm


def _buffer(value: Any) -> Buffer:
    if value is None:
        return Buffer.sbuf
    if value.__class__ is Buffer:
        return value
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


#: What :data:`PLAIN_DTYPES` gives for a value that is not an ``nl`` dtype (never a dtype itself, unlike None).
_NOT_A_DTYPE = object()


def ndarray(shape: Any, dtype: Any, buffer: Any = None, name: str = "", address: Any = None) -> Tensor:
    """A new tensor in ``buffer`` (SBUF by default). Its memory is uninitialised (poisoned with NaN).

    ``address=(partition_offset, free_offset)`` (NKI 0.3+) places an SBUF or PSUM
    tensor at that partition and byte offset (PSUM: on a 2 KiB bank boundary);
    overlapping a live tensor raises :class:`~nkisim.errors.CapacityError`.
    """
    loc = user_location(2)  # from the caller: this frame is never kernel code
    machine = (running_context() or current_context()).machine
    # a tile per instruction is common: the usual arguments (an nl buffer, an nl dtype) are taken without calls
    buf = buffer if buffer.__class__ is Buffer else _buffer(buffer)
    partitions = machine.hw.sbuf.partitions
    if (
        shape.__class__ is tuple
        and len(shape) == 2
        and shape[0].__class__ is shape[1].__class__ is int
        and 0 < shape[0] <= partitions
        and shape[1] > 0
    ):
        dims = shape  # the usual tile, right for any buffer: checked here, without the call
    else:
        dims = _shape(shape, buf, partitions, loc)
    if PLAIN_DTYPES.get(id(dtype), _NOT_A_DTYPE) is dtype:
        dt = dtype
    else:
        try:
            dt = to_dtype(dtype)
        except TypeError as exc:
            raise DtypeError(f"nl.ndarray: {exc}", loc=loc) from None
    return machine.memory.new_tensor(dims, dt, buf, name, loc, address)


def zeros(shape: Any, dtype: Any, buffer: Any = None, name: str = "") -> Tensor:
    """A new tensor filled with zeros (on chip, by a ``memset`` instruction)."""
    tensor = ndarray(shape, dtype, buffer, name)
    if tensor.buffer.is_on_chip:
        current_context().emit("memset", {"dst": tensor, "value": 0}, user_location())
    else:
        current_context().machine.store(tensor.array, 0)
    return tensor


def full(shape: Any, fill_value: Any, dtype: Any, buffer: Any = None, name: str = "") -> Tensor:
    """A new tensor filled with ``fill_value`` (on chip, by a ``memset`` instruction)."""
    tensor = ndarray(shape, dtype, buffer, name)
    if tensor.buffer.is_on_chip:
        current_context().emit("memset", {"dst": tensor, "value": fill_value}, user_location())
    else:
        values = cast(np.full(tensor.shape, fill_value, dtype=np.float64), tensor.dtype)
        current_context().machine.store(tensor.array, values)
    return tensor


def ones(shape: Any, dtype: Any, buffer: Any = None, name: str = "") -> Tensor:
    """A new tensor filled with ones (on chip, by a ``memset`` instruction)."""
    return full(shape, 1, dtype, buffer, name)


def zeros_like(x: Tensor, dtype: Any = None, buffer: Any = None, name: str = "") -> Tensor:
    """A new tensor of zeros with ``x``'s shape, and its dtype unless ``dtype`` is given (SBUF by default)."""
    return zeros(x.shape, x.dtype if dtype is None else dtype, buffer, name)


def empty_like(x: Tensor, dtype: Any = None, buffer: Any = None, name: str = "") -> Tensor:
    """A new uninitialised tensor with ``x``'s shape, dtype and buffer unless others are given."""
    return ndarray(x.shape, x.dtype if dtype is None else dtype, x.buffer if buffer is None else buffer, name)


def shared_constant(constant: Any, dtype: Any = None) -> Tensor:
    """An HBM tensor holding compile-time constant data: an array, or (NKI 0.3) the path of a ``.npy`` file."""
    if isinstance(constant, (str, os.PathLike)):
        try:
            constant = np.load(constant, allow_pickle=False)
        except (OSError, ValueError) as exc:
            where = os.fspath(constant)
            raise OperandError(f"nl.shared_constant: cannot load {where!r} as a .npy file: {exc}") from None
    values = np.asarray(constant)
    try:
        dt = to_dtype(dtype if dtype is not None else values.dtype)
    except TypeError as exc:
        raise DtypeError(f"nl.shared_constant: {exc}") from None
    return current_context().memory.hbm_tensor_from(values.astype(dt), dt, "shared_constant")


def shared_identity_matrix(n: int, dtype: Any = "uint8", dst: Tensor | None = None) -> Tensor:
    """An ``n x n`` identity matrix in SBUF (NKI 0.3), loaded by one DMA from a shared HBM constant.

    With ``dst`` (an SBUF ``[n, n]`` tile) the matrix is written there and ``dst`` is returned.
    """
    loc = user_location()
    hbm = shared_constant(np.eye(n), dtype if dst is None else dst.dtype)
    if dst is None:
        dst = ndarray((n, n), hbm.dtype, sbuf, name="identity")
    elif dst.buffer is not Buffer.sbuf or tuple(dst.shape) != (n, n):
        raise ShapeError(f"nl.shared_identity_matrix: dst must be an SBUF [{n}, {n}] tile, got {dst!r}", loc=loc)
    current_context().emit("dma_copy", {"dst": dst, "src": hbm}, loc)
    return dst


def _shape(shape: Any, buffer: Buffer, partitions: int, loc: Any) -> tuple[int, ...]:
    plain = shape.__class__ is tuple and len(shape) == 2 and shape[0].__class__ is shape[1].__class__ is int
    if plain and shape[0] > 0 and shape[1] > 0:
        dims = shape  # the usual case, checked without generators: a tile of two positive plain ints
    else:
        dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        if not dims or any(not isinstance(d, (int, np.integer)) or d <= 0 for d in dims):
            raise ShapeError(f"nl.ndarray: shape {shape!r} must be positive integers", loc=loc)
        dims = tuple(int(d) for d in dims)
    if buffer in ON_CHIP_BUFFERS:
        if len(dims) < 2:
            raise ShapeError(
                f"nl.ndarray: {buffer.value} tensors need a partition dim and a free dim, got shape {list(dims)}",
                loc=loc,
            )
        if dims[0] > partitions:
            raise ShapeError(f"nl.ndarray: partition dim {dims[0]} exceeds {partitions}", loc=loc)
    return dims


# -- loops and indexing ---------------------------------------------------------------


def affine_range(start: int, stop: int | None = None, step: int = 1) -> AffineRange:
    """Loop iterator for iterations without loop-carried dependencies, except associative accumulation.

    Runs like Python ``range``; with the sanitizer on (``check=``), a value carried from
    one iteration to a later one is reported, and ``nkisim.run(..., affine_order=)``
    may run the iterations reversed or shuffled (docs/checks.md).
    """
    loc = user_location()
    return AffineRange(_python_range("affine_range", start, stop, step, loc), loc)


def sequential_range(start: int, stop: int | None = None, step: int = 1) -> builtins.range:
    """Loop iterator for iterations with loop-carried dependencies (runs as Python ``range``)."""
    return _python_range("sequential_range", start, stop, step, user_location())


def static_range(start: int, stop: int | None = None, step: int = 1) -> builtins.range:
    """Fully unrolled loop iterator (runs as Python ``range``)."""
    return _python_range("static_range", start, stop, step, user_location())


# NKI's name shadows the builtin in this module, which calls builtins.range itself
def range(start: int, stop: int | None = None, step: int = 1) -> builtins.range:
    """Loop iterator of a plain loop, unrolled while tracing (``nl.range``, as nki-library's kernels call it).

    Taken to be ``static_range``: iterations in order, none checked as independent (docs/semantics.md).
    """
    return _python_range("range", start, stop, step, user_location())


def _python_range(name: str, start: Any, stop: Any, step: Any, loc: SourceLoc) -> builtins.range:
    """``range(start, stop, step)``, its bounds checked: integers known while tracing, and a step other than 0."""
    bounds = {"stop": start} if stop is None else {"start": start, "stop": stop}
    for what, value in (*bounds.items(), ("step", step)):
        if not is_int(value):
            hint = " (a quotient: write n // d, not n / d)" if isinstance(value, (float, np.floating)) else ""
            raise OperandError(
                f"nl.{name}: {what} {value!r} must be an integer known while tracing, not {type(value).__name__}{hint}",
                loc=loc,
            )
    if step == 0:
        raise OperandError(f"nl.{name}: step must not be 0", loc=loc)
    return builtins.range(int(start), int(stop), int(step)) if stop is not None else builtins.range(int(start))


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
    """Index of this program along ``axis`` of the launch grid: 0 or 1 with ``kernel[2]``, else 0."""
    ctx = current_context()
    _check_axis(axis, ctx.grid, "program_id")
    return ctx.program_id


def num_programs(axes: Any = None) -> int:
    """Number of programs along ``axes`` of the launch grid (all of them when ``axes`` is None)."""
    ctx = current_context()
    if axes is not None:
        for axis in axes if isinstance(axes, (tuple, list)) else (axes,):
            _check_axis(axis, ctx.grid, "num_programs")
    return ctx.num_programs


def program_ndim() -> int:
    """Number of dimensions of the launch grid: 1 for ``kernel[n]``, 0 for a plain call."""
    return len(current_context().grid)


def _check_axis(axis: Any, grid: tuple[int, ...], what: str) -> None:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not 0 <= axis < (len(grid) or 1):
        raise OperandError(f"nl.{what}: axis {axis!r} is not an axis of the launch grid {list(grid) or [1]}")


# -- dynamic loops (NKI 0.3+; the bounds are registers read when the loop starts) -----


def dynamic_range(start: Any, stop: Any = None, step: int = 1) -> DynamicRange:
    """A loop that runs on the device with bounds held in registers (``nisa.register_alloc``).

    nkisim reads the registers when the loop starts (values are known then, since
    instructions execute as they are called) and iterates as Python's ``range``. The
    sequencer's per-iteration branch is not timed.
    """
    loc = user_location()
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 1:
        raise OperandError(f"nl.dynamic_range: step {step!r} must be a positive compile-time integer", loc=loc)
    lo, hi = (0, start) if stop is None else (start, stop)
    return DynamicRange(builtins.range(_bound(lo, "dynamic_range", loc), _bound(hi, "dynamic_range", loc), int(step)))


def fori_loop(lower: Any, upper: Any, body_fun: Any, step: int = 1) -> None:
    """``for i in range(lower, upper, step): body_fun(i)``, with ``i`` passed as a register."""
    for i in dynamic_range(lower, upper, step):
        body_fun(VirtualRegister.derived(i, (upper, lower)))


def while_loop(init: Any, body_fun: Any) -> None:
    """``r = init; while r != 0: r = body_fun(r)`` on a condition register."""
    loc = user_location()
    reg = init

    def condition() -> bool:
        if not isinstance(reg, VirtualRegister):
            raise OperandError(f"nl.while_loop: the condition must be a register, got {type(reg).__name__}", loc=loc)
        return _bound(reg, "while_loop", loc) != 0

    def body() -> None:
        nonlocal reg
        reg = body_fun(reg)

    dynamic_iterations(condition, body)


def _bound(value: Any, what: str, loc: Any) -> int:
    """An integer loop bound, or a register's current value."""
    if isinstance(value, VirtualRegister):
        if not current_context().compute:
            raise OperandError(
                f"nl.{what}: register {value.name} holds a run-time value, which nkisim.profile does not compute "
                "from (shape, dtype) inputs; use nkisim.run",
                loc=loc,
            )
        return value.read()
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise OperandError(f"nl.{what}: bound {value!r} must be an integer or a register", loc=loc)
    return int(value)


def device_print(print_prefix: str, tensor: Tensor) -> None:
    """Print a tensor's current values, prefixed, when the kernel reaches this line.

    Printed once per run: when the liveness retry runs the kernel again, the prints the
    first attempt made are not repeated.
    """
    ctx = current_context()
    if not isinstance(tensor, Tensor):
        raise OperandError(f"nl.device_print: tensor must be an NKI tensor, got {type(tensor).__name__}")
    ctx.machine.check_running()  # a run that will start again prints nothing more
    if not ctx.prints.claim():
        return
    ctx.memory.settle_pending()  # before the view's values, which a run-time offset tile may address
    ctx.machine.effect(_print_values, (print_prefix, tensor.name, tensor.shape, tensor.array))


def _print_values(what: tuple[str, str, tuple[int, ...], np.ndarray]) -> None:
    prefix, name, shape, values = what
    print(f"{prefix} {name}{list(shape)}:\n{np.asarray(values)}")


# -- operator constants (nl.add, nl.exp, ...) -----------------------------------------
globals().update(CALLABLE_OPS)

# -- NKI 0.3+ value-returning helpers (nl.load, nl.sum, nl.matmul, ...) -----------------
# These shadow the builtins sum, max, min and all in this module, as in NKI's own.
globals().update(HELPERS)

# -- types (NKI 0.3+) -----------------------------------------------------------------
#: The type of NKI data types: every ``nl`` dtype is a numpy dtype in nkisim.
DType = np.dtype
#: The memory regions of tensors (``nl.sbuf``, ``nl.psum``, ``nl.private_hbm``, ``nl.shared_hbm``; ``nl.hbm``).
MemoryRegion = Buffer
#: The tensor type that ``nl.ndarray`` and the helpers return.
NkiTensor = Tensor
