"""Simulated NKI kernels as PyTorch operators (needs the ``nkisim[torch]`` extra).

::

    import nkisim.torch

    add_op = nkisim.torch.custom_op("my_ops::nki_tensor_add", nki_tensor_add)
    c = torch.ops.my_ops.nki_tensor_add(a, b)          # or add_op(a, b)
    add_op.register_autograd(lambda ctx, grad: (grad, grad))

The operator is a real ``torch.library`` custom operator: its CPU kernel runs the
simulation, its fake kernel traces the kernel on shapes alone (for ``torch.compile``
and meta tensors), and it passes ``torch.library.opcheck``.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np

try:
    import torch
except ModuleNotFoundError as exc:  # pragma: no cover - exercised in a subprocess without torch
    raise ImportError("nkisim.torch needs PyTorch, which is not installed: pip install 'nkisim[torch]'") from exc

from nkisim.errors import KernelError, OperandError, SourceLoc, user_location
from nkisim.frontend.jit import ArraySpec, Kernel, output_specs, run
from nkisim.frontend.validate import check_kernel, check_target

__all__ = [
    "OperatorError",
    "SimulatedOp",
    "call",
    "caller_location",
    "custom_op",
    "define_op",
    "empty_output",
    "from_numpy",
    "numpy_dtype",
    "to_numpy",
    "torch_dtype",
    "write_back",
]

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_NKISIM_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_EXAMPLES_DIR = _NKISIM_DIR + "examples" + os.sep


class OperatorError(KernelError):
    """A simulated operator was called with inputs it cannot take, or its kernel failed."""


# torch dtype -> (numpy dtype, same-size integer torch dtype used to reinterpret the bits)
_DTYPES: dict[torch.dtype, tuple[np.dtype, torch.dtype | None]] = {
    torch.float32: (np.dtype(np.float32), None),
    torch.float16: (np.dtype(np.float16), None),
    torch.bfloat16: (np.dtype(ml_dtypes.bfloat16), torch.int16),
    torch.float8_e4m3fn: (np.dtype(ml_dtypes.float8_e4m3fn), torch.uint8),
    torch.float8_e5m2: (np.dtype(ml_dtypes.float8_e5m2), torch.uint8),
    torch.int8: (np.dtype(np.int8), None),
    torch.int16: (np.dtype(np.int16), None),
    torch.int32: (np.dtype(np.int32), None),
    torch.uint8: (np.dtype(np.uint8), None),
    torch.bool: (np.dtype(np.bool_), None),
}
_TORCH_OF = {np_dt: torch_dt for torch_dt, (np_dt, _) in _DTYPES.items()}


def numpy_dtype(dtype: torch.dtype) -> np.dtype | None:
    """The numpy (NKI) dtype of a torch dtype, or ``None`` when NKI has no equivalent."""
    entry = _DTYPES.get(dtype)
    return None if entry is None else entry[0]


def torch_dtype(dtype: np.dtype) -> torch.dtype | None:
    """The torch dtype of a numpy (NKI) dtype, or ``None`` when torch has no equivalent."""
    return _TORCH_OF.get(np.dtype(dtype))


def caller_location() -> SourceLoc:
    """The user's line that called the operator: the innermost frame outside nkisim and torch.

    :func:`nkisim.errors.user_location` alone would name torch's dispatcher, which calls the
    operator's kernels.
    """
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith((_TORCH_DIR, _NKISIM_DIR)) or filename.startswith(_EXAMPLES_DIR):
            return SourceLoc(filename, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back  # type: ignore[assignment]
    return user_location()


def _numpy_dtype(dtype: torch.dtype, where: str) -> np.dtype:
    np_dtype = numpy_dtype(dtype)
    if np_dtype is None:
        names = ", ".join(str(d).removeprefix("torch.") for d in _DTYPES)
        raise OperatorError(f"{where}: dtype {dtype} has no NKI equivalent (supported: {names})", loc=caller_location())
    return np_dtype


def to_numpy(tensor: torch.Tensor, where: str = "input") -> np.ndarray:
    """A CPU tensor's values as a numpy array of the matching NKI dtype (bf16 and fp8 via ml_dtypes).

    The array shares the tensor's memory, except for a non-contiguous tensor (a transpose such
    as ``lhs.T``, a strided slice), whose values are copied into a contiguous one first, as a
    device would need them. ``where`` leads the error message (e.g. the operator and argument).

    Raises:
        OperatorError: the tensor is not on the CPU, or of a dtype NKI lacks.
    """
    if tensor.device.type != "cpu":
        raise OperatorError(
            f"{where}: tensor is on {tensor.device}; simulated kernels take CPU tensors", loc=caller_location()
        )
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    np_dtype = _numpy_dtype(tensor.dtype, where)
    bits = _DTYPES[tensor.dtype][1]
    plain = tensor.detach().resolve_conj().resolve_neg()
    if bits is None:
        return plain.numpy()
    return plain.view(bits).numpy().view(np_dtype)


def from_numpy(array: np.ndarray) -> torch.Tensor:
    """A torch tensor with the array's values (shares memory when it can)."""
    array = np.ascontiguousarray(array)
    target = _torch_dtype(array.dtype)
    bits = _DTYPES[target][1]
    if bits is None:
        return torch.from_numpy(array)
    return torch.from_numpy(array.view(_bits_numpy(bits))).view(target)


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    target = torch_dtype(dtype)
    if target is None:
        raise OperatorError(f"output dtype {dtype} has no torch equivalent", loc=caller_location())
    return target


def write_back(passed: torch.Tensor, values: np.ndarray) -> None:
    """Copy a kernel's writes into the tensor the caller passed (``nki.simulate``'s in-place update)."""
    with torch.no_grad():
        passed.copy_(from_numpy(np.ascontiguousarray(values)))


def _bits_numpy(dtype: torch.dtype) -> np.dtype:
    return np.dtype(np.int16) if dtype == torch.int16 else np.dtype(np.uint8)


def call(kernel: Kernel, *args: Any, target: str | None = None, **kwargs: Any) -> Any:
    """Run ``kernel`` on torch CPU tensors and return torch tensors."""
    np_args = [to_numpy(a, f"argument {i}") if isinstance(a, torch.Tensor) else a for i, a in enumerate(args)]
    np_kwargs = {k: to_numpy(v, k) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    if np_args and np_kwargs:
        raise OperatorError("pass tensors either all by position or all by keyword")
    return _to_torch(run(kernel, np_args or np_kwargs, target=target).outputs)


def _to_torch(outputs: Any) -> Any:
    if isinstance(outputs, np.ndarray):
        return from_numpy(outputs)
    if isinstance(outputs, tuple):
        return tuple(_to_torch(o) for o in outputs)
    return outputs


class SimulatedOp:
    """A registered operator: call it like ``torch.ops.<namespace>.<name>``.

    Attributes:
        qualname: ``"namespace::name"``.
        kernel: the NKI kernel it simulates.
        schema: the operator's schema, e.g. ``"(Tensor a, Tensor b) -> Tensor"``.
    """

    def __init__(self, qualname: str, kernel: Kernel, schema: str, target: str | None) -> None:
        self.qualname = qualname
        self.kernel = kernel
        self.schema = schema
        self.target = target
        namespace, name = qualname.split("::")
        self._library = torch.library.Library(namespace, "FRAGMENT")
        define_op(self._library, name, schema, cpu=self._cpu, fake=self._fake)
        self._returns_tuple = schema.split("->")[1].strip().startswith("(")

    @property
    def op(self) -> Any:
        namespace, name = self.qualname.split("::")
        return getattr(getattr(torch.ops, namespace), name).default

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.op(*args, **kwargs)

    def register_autograd(
        self, backward: Callable[..., Any], *, setup_context: Callable[..., Any] | None = None
    ) -> None:
        """Give the operator a backward (see ``torch.library.register_autograd``)."""
        torch.library.register_autograd(self.qualname, backward, setup_context=setup_context, lib=self._library)

    def _cpu(self, *args: Any) -> Any:
        np_args = [self._input(a, i) for i, a in enumerate(args)]
        try:
            outputs = run(self.kernel, np_args, target=self.target).outputs
        except OperatorError:
            raise
        except KernelError as exc:
            raise self._error(exc) from exc
        return self._shape_outputs(_to_torch(outputs))

    def _fake(self, *args: Any) -> Any:
        specs = [
            ArraySpec(tuple(int(d) for d in a.shape), _numpy_dtype(a.dtype, self._where(i)))
            if isinstance(a, torch.Tensor)
            else a
            for i, a in enumerate(args)
        ]
        try:
            outputs = output_specs(self.kernel, specs, target=self.target)
        except KernelError as exc:
            raise self._error(exc) from exc

        def empty(spec: Any) -> Any:
            if isinstance(spec, ArraySpec):
                return empty_output(args, spec.shape, spec.dtype)
            return tuple(empty(s) for s in spec)

        return self._shape_outputs(empty(outputs))

    def _shape_outputs(self, outputs: Any) -> Any:
        if self._returns_tuple and not isinstance(outputs, tuple):
            raise OperatorError(f"{self.qualname}: the schema returns a tuple but the kernel returned one tensor")
        if not self._returns_tuple and isinstance(outputs, tuple):
            raise OperatorError(
                f"{self.qualname}: the kernel returned {len(outputs)} tensors; give a schema like "
                f"'(...) -> ({', '.join(['Tensor'] * len(outputs))})'"
            )
        return outputs

    def _error(self, exc: KernelError) -> OperatorError:
        """The kernel's error, its message led by the kernel line and then the operator's name."""
        detail = str(exc).removeprefix(f"{exc.loc}: ")
        return OperatorError(f"{self.qualname}: {detail}", loc=exc.loc)

    def _where(self, index: int) -> str:
        return f"{self.qualname} argument {index}"

    def _input(self, value: Any, index: int) -> Any:
        return to_numpy(value, self._where(index)) if isinstance(value, torch.Tensor) else value


def define_op(
    library: torch.library.Library, name: str, schema: str, *, cpu: Callable[..., Any], fake: Callable[..., Any]
) -> str:
    """Define operator ``name`` with ``schema`` in ``library``, with its CPU and fake (meta) kernels.

    The CPU kernel runs the simulation; the fake kernel returns empty tensors of the output
    shapes (see :func:`empty_output`). Returns the qualified name, ``"namespace::name"``.
    """
    qualname = f"{library.ns}::{name}"
    library.define(name + schema)
    library.impl(name, cpu, "CPU")
    torch.library.register_fake(qualname, fake, lib=library)
    return qualname


def empty_output(args: Sequence[Any], shape: Sequence[int], dtype: np.dtype) -> torch.Tensor:
    """A fake kernel's output: an empty tensor of ``shape`` and the torch dtype of ``dtype``.

    It is made like the first tensor in ``args`` (same device, fake or meta when that one is),
    or on the CPU when no argument is a tensor.
    """
    template = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if template is None:
        return torch.empty(tuple(shape), dtype=_torch_dtype(dtype))
    return template.new_empty(tuple(shape), dtype=_torch_dtype(dtype))


def custom_op(
    qualname: str, kernel: Kernel | None = None, *, schema: str | None = None, target: str | None = None
) -> Any:
    """Register ``kernel`` as the PyTorch operator ``qualname`` (``"namespace::name"``).

    Used as a function, ``custom_op("ns::op", kernel)``, or as a decorator,
    ``@custom_op("ns::op")`` above ``@nki.jit``. Without ``schema``, every kernel
    parameter is a ``Tensor`` and the result one ``Tensor``.
    """
    if not isinstance(qualname, str):
        raise TypeError(
            f"nkisim.torch.custom_op: the operator name must be a string 'namespace::name', got {qualname!r}"
        )
    check_target("nkisim.torch.custom_op", target)
    if kernel is None:
        return lambda k: custom_op(qualname, k, schema=schema, target=target)
    check_kernel("nkisim.torch.custom_op", kernel)
    if "::" not in qualname:
        raise OperandError(f"operator name {qualname!r} must be 'namespace::name'", loc=_loc(kernel))
    if not isinstance(kernel, Kernel):
        kernel = Kernel(kernel)
    if schema is None:
        params = inspect.signature(kernel.func).parameters
        schema = "(" + ", ".join(f"Tensor {p}" for p in params) + ") -> Tensor"
    return SimulatedOp(qualname, kernel, schema, target)


def _loc(kernel: Any) -> SourceLoc:
    code = getattr(kernel, "func", kernel).__code__
    return SourceLoc(code.co_filename, code.co_firstlineno, code.co_name)
