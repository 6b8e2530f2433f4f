"""``lib.register_torch()``: a library's ops as ``torch.ops.<library>.<op>`` through ``torch.library``.

The ops go through the machinery NKI kernels use (:mod:`nkisim.torch`): tensors are converted by
the torch adapter of :mod:`nkisim.frontend.frameworks` (one dtype table; bfloat16 bit-exactly
through ml_dtypes), and :func:`nkisim.torch.define_op` defines each op with a CPU kernel that runs
the simulation and a fake (meta) kernel, which here is the op's shape function. Each op gets a
schema from the kernel's parameters (``Tensor`` unless annotated ``float``, ``int`` or ``Scalar``)
and, when the library names a backward op, autograd. As on Neuron, a process (a model) uses one
custom-op library: registering a second one is an error. torch is imported only here, and only
when this is called.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from nkisim.errors import SourceLoc, user_location
from nkisim.frontend.frameworks import adapter
from nkisim.gpsimd.errors import GpsimdLibraryError
from nkisim.gpsimd.runtime import Scalar, output_spec, run
from nkisim.gpsimd.tensor import ShapeTensor, check_dtype

if TYPE_CHECKING:
    from nkisim.gpsimd.library import Library, Op

#: The library registered with torch in this process, and the torch.library objects that keep it alive.
_REGISTERED: dict[str, Any] = {}


def _numpy_dtype(tensor: Any, what: str, op: Op, loc: SourceLoc) -> np.dtype:
    """The numpy dtype of ``tensor`` (from the torch adapter's table), if custom operators take it.

    Raises:
        GpsimdArgumentError: the dtype is not one of the seven GPSIMD dtypes (64-bit, fp8, bool...).
    """
    import nkisim.torch

    np_dtype = nkisim.torch.numpy_dtype(tensor.dtype)
    return check_dtype(tensor.dtype if np_dtype is None else np_dtype, what, loc, op.qualname)


def to_numpy(tensor: Any, op: Op, what: str | None = None) -> np.ndarray:
    """A tensor's values as numpy, converted by the torch adapter NKI kernels use.

    Any layout is taken (the tensor is made contiguous first). ``what`` names the argument in
    errors.

    Raises:
        GpsimdArgumentError: custom operators do not take the tensor's dtype; names the caller's line.
    """
    import nkisim.torch

    what = what or f"a tensor argument of {op.qualname}"
    _numpy_dtype(tensor, what, op, nkisim.torch.caller_location())
    return adapter("torch").to_numpy(tensor.contiguous().cpu(), what)


def from_numpy(array: np.ndarray) -> Any:
    """A torch tensor with a copy of the array's values, converted by the torch adapter NKI kernels use."""
    return adapter("torch").from_numpy(np.array(array, copy=True))


def _schema_type(param: inspect.Parameter) -> str:
    annotation = param.annotation
    if annotation in (float, "float"):
        return "float"
    if annotation in (int, "int"):
        return "int"
    if annotation in (Scalar, "Scalar", "gpsimd.Scalar"):
        return "Scalar"
    return "Tensor"


def schema(op: Op) -> str:
    """The torch schema of ``op``: its kernel's parameters after ``ctx``, returning one Tensor."""
    assert op.kernel_fn is not None
    params = list(inspect.signature(op.kernel_fn).parameters.values())[1:]
    return "(" + ", ".join(f"{_schema_type(p)} {p.name}" for p in params) + ") -> Tensor"


def _argument(index: int, op: Op) -> str:
    return f"argument {index} of {op.qualname}"


def _cpu_kernel(op: Op) -> Callable[..., Any]:
    """The CPU implementation: run the simulation on the arguments, keep the result in ``op.last_result``."""
    import torch

    def cpu(*args: Any) -> Any:
        inputs = [to_numpy(a, op, _argument(i, op)) if isinstance(a, torch.Tensor) else a for i, a in enumerate(args)]
        result = run(op, inputs)
        op.last_result = result
        return from_numpy(result.outputs)

    return cpu


def _fake_kernel(op: Op) -> Callable[..., Any]:
    """The fake (meta) implementation: the op's shape function, on sizes and dtypes alone."""
    import torch

    import nkisim.torch

    def fake(*args: Any) -> Any:
        loc = nkisim.torch.caller_location()
        shaped = [
            ShapeTensor(tuple(a.shape), _numpy_dtype(a, _argument(i, op), op, loc))
            if isinstance(a, torch.Tensor)
            else a
            for i, a in enumerate(args)
        ]
        spec = output_spec(op, shaped)
        return nkisim.torch.empty_output(args, spec.sizes(), spec.dtype)

    return fake


def _register_backward(tlib: Any, lib: Library, op: Op) -> None:
    import torch

    assert op.backward is not None
    backward_op = getattr(getattr(torch.ops, lib.name), op.backward.name)

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        tensors = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
        ctx.tensor_positions = tensors
        ctx.others = [None if i in tensors else x for i, x in enumerate(inputs)]
        ctx.save_for_backward(*(inputs[i] for i in tensors))

    def backward(ctx: Any, grad: Any) -> tuple[Any, ...]:
        inputs = list(ctx.others)
        for i, saved in zip(ctx.tensor_positions, ctx.saved_tensors):
            inputs[i] = saved
        grad_in = backward_op(grad.contiguous(), *inputs)
        grads: list[Any] = [None] * len(inputs)
        grads[ctx.tensor_positions[0]] = grad_in
        return tuple(grads)

    torch.library.register_autograd(f"{lib.name}::{op.name}", backward, setup_context=setup_context, lib=tlib)


def register_torch(lib: Library) -> Any:
    """Register every op of ``lib`` as ``torch.ops.<lib.name>.<op>``; returns that namespace.

    Raises:
        GpsimdLibraryError: another library is already registered in this process (one per model).
    """
    import torch

    import nkisim.torch

    loc = user_location()
    current = _REGISTERED.get("library")
    if current is lib:
        return getattr(torch.ops, lib.name)
    if current is not None:
        raise GpsimdLibraryError(
            f"a model may use one custom-op library; {current.name!r} is already registered with torch, "
            f"so {lib.name!r} cannot be",
            loc=loc,
            op=lib.name,
        )
    for op in lib.ops.values():
        if op.shape_fn is None or op.kernel_fn is None:
            raise GpsimdLibraryError(f"operator {op.name!r} needs a shape function and a kernel", loc=loc, op=lib.name)
    tlib = torch.library.Library(lib.name, "DEF")
    for op in lib.ops.values():
        nkisim.torch.define_op(tlib, op.name, schema(op), cpu=_cpu_kernel(op), fake=_fake_kernel(op))
    for op in lib.ops.values():
        if op.backward is not None:
            _register_backward(tlib, lib, op)
    _REGISTERED.update(library=lib, torch_library=tlib)
    return getattr(torch.ops, lib.name)
