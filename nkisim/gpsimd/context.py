"""The per-core context a kernel receives first: ``ctx``.

It gathers what a C++ kernel gets from ``<torch/torch.h>``, ``neuron/neuron-utils.hpp`` and
the runtime: the core id and count, the output tensor, TCM allocation, stack arrays,
``printf``, the factory functions and the ATen subset of the device library (each op also
as ``op_out(result, ...)``; no broadcasting).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from nkisim.errors import SourceLoc, user_location
from nkisim.gpsimd.core import ChargedArray, Core
from nkisim.gpsimd.errors import GpsimdArgumentError, GpsimdBroadcastError, GpsimdUndefinedBehavior
from nkisim.gpsimd.tensor import DeviceTensor, check_dtype, check_sizes

_C_LENGTH = re.compile(r"%([-+ #0-9.*]*)(?:hh|h|ll|l|z|j|t|L)?([diouxXeEfFgGcsp%])")


def c_format(fmt: str, args: tuple[Any, ...]) -> str:
    """``printf``-style formatting with C length modifiers (``%zu``, ``%ld``) accepted."""
    py = _C_LENGTH.sub(lambda m: "%" + m.group(1) + ("d" if m.group(2) == "u" else m.group(2)), fmt)
    values = tuple(v.item() if isinstance(v, np.generic) else v for v in args)
    return py % values if values else py.replace("%%", "%")


class CoreContext:
    """What a kernel running on one GPSIMD core can call (the C++ device API, in Python)."""

    def __init__(self, core: Core, dst: DeviceTensor, stdout: Callable[[str], None]) -> None:
        self._core = core
        self._dst = dst
        self._stdout = stdout
        self.dst_requested = False

    # -- neuron-utils -------------------------------------------------------------------

    def get_cpu_id(self) -> int:
        """This core's id, in ``[0, get_cpu_count())``."""
        return self._core.id

    def get_cpu_count(self) -> int:
        """How many cores run this kernel (8 with ``multicore=True``, else 1)."""
        return self._core.count

    def get_dst_tensor(self) -> DeviceTensor:
        """The operator's output tensor; once called, the kernel's return value is ignored."""
        self.dst_requested = True
        return self._dst

    # -- TCM ----------------------------------------------------------------------------

    def tcm_malloc(self, nbytes: int, dtype: Any = np.float32) -> ChargedArray | None:
        """A 1-D array view of ``nbytes`` of this core's TCM pool, or None when the pool is exhausted."""
        return self._core.tcm_malloc(int(nbytes), check_dtype(dtype, "tcm_malloc", user_location(), self._core.op))

    def tcm_free(self, buf: ChargedArray | None) -> None:
        """Give back a buffer from :meth:`tcm_malloc` (anything else is undefined behaviour)."""
        self._core.tcm_free(buf, user_location())

    # -- stack and printf ---------------------------------------------------------------

    def stack_array(self, shape: Any, dtype: Any = np.float32) -> ChargedArray:
        """A zeroed local array on the kernel's stack (counts towards the stack size)."""
        return self._core.stack_array(shape, dtype)

    def printf(self, fmt: str, *args: Any) -> None:
        """C ``printf``: buffered on the device, printed after the run (core 0 only in multicore)."""
        core = self._core
        core.printf_calls += 1
        if core.id == 0:
            self._stdout(c_format(fmt, args))

    # -- factory functions --------------------------------------------------------------

    def _new(self, sizes: Any, dtype: Any, fill: Any) -> DeviceTensor:
        loc = user_location()
        dt = check_dtype(dtype, "a factory function's tensor", loc, self._core.op)
        shape = check_sizes((sizes,) if isinstance(sizes, (int, np.integer)) else sizes, "a new tensor", loc)
        data = np.zeros(shape, dtype=dt) if fill is None else np.full(shape, fill, dtype=dt)
        self._core.aten_elements += data.size
        return DeviceTensor(data, self._core)

    def zeros(self, sizes: Any, dtype: Any) -> DeviceTensor:
        """``torch::zeros(sizes, dtype)`` (the dtype is required)."""
        return self._new(sizes, dtype, None)

    def empty(self, sizes: Any, dtype: Any) -> DeviceTensor:
        """``torch::empty(sizes, dtype)`` (zeroed here)."""
        return self._new(sizes, dtype, None)

    def ones(self, sizes: Any, dtype: Any) -> DeviceTensor:
        return self._new(sizes, dtype, 1)

    def full(self, sizes: Any, fill_value: Any, dtype: Any) -> DeviceTensor:
        return self._new(sizes, dtype, _value(fill_value))

    def eye(self, n: int, m: int | None = None, dtype: Any = None) -> DeviceTensor:
        """``torch::eye(n, m, dtype)``."""
        t = self._new((n, n if m is None else m), dtype, None)
        np.fill_diagonal(t._data, 1)
        return t

    # -- the ATen subset ----------------------------------------------------------------

    def _operands(self, name: str, *xs: Any) -> tuple[list[Any], tuple[int, ...], np.dtype]:
        loc = user_location(2)
        tensors = [x for x in xs if isinstance(x, DeviceTensor)]
        if not tensors:
            raise GpsimdArgumentError(f"{name} needs a tensor operand", loc=loc, op=self._core.op)
        shape = tensors[0].sizes()
        for t in tensors[1:]:
            if t.sizes() != shape:
                raise GpsimdBroadcastError(
                    f"{name}: sizes {list(shape)} and {list(t.sizes())} differ (the device library does not broadcast)",
                    loc=loc,
                    op=self._core.op,
                    core=self._core.id,
                )
        values = [x._data if isinstance(x, DeviceTensor) else _value(x) for x in xs]
        return values, shape, tensors[0].dtype

    def _result(self, name: str, data: np.ndarray, out: DeviceTensor | None, dtype: np.dtype) -> DeviceTensor:
        self._core.aten_elements += data.size
        if out is None:
            return DeviceTensor(np.asarray(data, dtype=dtype).reshape(data.shape), self._core)
        if out.sizes() != data.shape:
            raise GpsimdBroadcastError(
                f"{name}_out: result sizes {list(out.sizes())} differ from {list(data.shape)}",
                loc=user_location(),
                op=self._core.op,
                core=self._core.id,
            )
        out._data[...] = data.astype(out.dtype, copy=False)
        if out._is_dst:
            self._core.dst_writes.append((0, out.numel(), user_location()))
        return out

    def _unary(self, name: str, fn: Callable[[np.ndarray], np.ndarray], x: DeviceTensor, out: Any) -> DeviceTensor:
        (v,), _, dt = self._operands(name, x)
        with np.errstate(all="ignore"):
            data = fn(v.astype(np.float32) if dt.kind == "f" and dt.itemsize < 4 else v)
        return self._result(name, data, out, dt)

    def _binary(self, name: str, fn: Callable[..., np.ndarray], a: Any, b: Any, out: Any) -> DeviceTensor:
        (va, vb), _, dt = self._operands(name, a, b)
        with np.errstate(all="ignore"):
            data = np.asarray(fn(va, vb))
        return self._result(name, data, out, dt)

    def _integral(self, name: str, x: Any) -> None:
        if isinstance(x, DeviceTensor) and x.dtype.kind not in "iu":
            raise GpsimdArgumentError(
                f"{name} is for integral tensors, not {x.dtype.name}", loc=user_location(2), op=self._core.op
            )

    def add(self, a: Any, b: Any, alpha: Any = 1, out: Any = None) -> DeviceTensor:
        """``a + alpha * b`` (tensor or scalar ``b``; same sizes, no broadcasting)."""
        return self._binary("add", lambda x, y: x + _value(alpha) * y, a, b, out)

    def sub(self, a: Any, b: Any, alpha: Any = 1, out: Any = None) -> DeviceTensor:
        """``a - alpha * b``."""
        return self._binary("sub", lambda x, y: x - _value(alpha) * y, a, b, out)

    def mul(self, a: Any, b: Any, out: Any = None) -> DeviceTensor:
        return self._binary("mul", np.multiply, a, b, out)

    def div(self, a: Any, b: Any, out: Any = None) -> DeviceTensor:
        return self._binary("div", np.true_divide, a, b, out)

    def pow(self, a: Any, b: Any, out: Any = None) -> DeviceTensor:
        """tensor ** scalar, scalar ** tensor, or tensor ** tensor."""
        return self._binary("pow", np.power, a, b, out)

    def clamp(self, x: DeviceTensor, min: Any = None, max: Any = None, out: Any = None) -> DeviceTensor:
        """Elements limited to ``[min, max]``."""
        lo, hi = _value(min), _value(max)
        return self._unary("clamp", lambda v: np.clip(v, lo, hi), x, out)

    def bitwise_and(self, a: Any, b: Any, out: Any = None) -> DeviceTensor:
        self._integral("bitwise_and", a)
        return self._binary("bitwise_and", lambda x, y: np.bitwise_and(x, np.asarray(y).astype(x.dtype)), a, b, out)

    def bitwise_or(self, a: Any, b: Any, out: Any = None) -> DeviceTensor:
        self._integral("bitwise_or", a)
        return self._binary("bitwise_or", lambda x, y: np.bitwise_or(x, np.asarray(y).astype(x.dtype)), a, b, out)

    def bitwise_not(self, x: DeviceTensor, out: Any = None) -> DeviceTensor:
        self._integral("bitwise_not", x)
        return self._unary("bitwise_not", np.invert, x, out)

    def __getattr__(self, name: str) -> Any:
        if name.endswith("_out") and name[:-4] in _ATEN:
            base = getattr(self, name[:-4])

            def op_out(result: DeviceTensor, *args: Any, **kwargs: Any) -> DeviceTensor:
                return base(*args, out=result, **kwargs)

            op_out.__name__ = name
            return op_out
        raise AttributeError(
            f"ctx.{name}: not part of the GPSIMD device API (see docs/gpsimd.md for the supported subset)"
        )


def _value(x: Any) -> Any:
    """A Scalar argument's value, or the value itself."""
    return x.value if hasattr(x, "value") and not isinstance(x, (np.ndarray, np.generic)) else x


_UNARY = {
    "abs": np.abs,
    "ceil": np.ceil,
    "floor": np.floor,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "exp": np.exp,
}


def _make_unary(name: str, fn: Callable[[np.ndarray], np.ndarray]) -> Callable[..., DeviceTensor]:
    def op(self: CoreContext, x: DeviceTensor, out: Any = None) -> DeviceTensor:
        return self._unary(name, fn, x, out)

    op.__name__ = name
    op.__doc__ = f"Elementwise ``{name}`` (``torch::{name}``)."
    return op


for _name, _fn in _UNARY.items():
    setattr(CoreContext, _name, _make_unary(_name, _fn))

#: The ATen operations of the device library (each also as ``<name>_out(result, ...)``).
_ATEN = (*_UNARY, "pow", "clamp", "add", "sub", "mul", "div", "bitwise_and", "bitwise_or", "bitwise_not")


def kernel_loc(func: Callable[..., Any]) -> SourceLoc:
    """Where a kernel function is defined."""
    code = getattr(func, "__code__", None)
    if code is None:
        return SourceLoc("<unknown>", 0)
    return SourceLoc(code.co_filename, code.co_firstlineno, code.co_name)


def undefined(rule: str, core: Core, loc: SourceLoc) -> GpsimdUndefinedBehavior:
    return GpsimdUndefinedBehavior(rule, loc=loc, op=core.op, core=core.id)
