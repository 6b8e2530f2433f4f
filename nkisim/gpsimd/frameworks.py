"""``lib.register_torch()``: a library's ops as ``torch.ops.<library>.<op>`` through ``torch.library``.

Each op gets a schema (from the kernel's parameters: ``Tensor`` unless annotated ``float``, ``int``
or ``Scalar``), a CPU implementation that runs the simulation, a fake (meta) implementation from
the shape function, and, when the library names a backward op, autograd. As on Neuron, a process
(a model) uses one custom-op library: registering a second one is an error. torch is imported
only here, and only when this is called.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import numpy as np

from nkisim.errors import user_location
from nkisim.gpsimd.errors import GpsimdArgumentError, GpsimdLibraryError
from nkisim.gpsimd.runtime import Scalar, output_spec, run

if TYPE_CHECKING:
    from nkisim.gpsimd.library import Library, Op

#: The library registered with torch in this process, and the torch.library objects that keep it alive.
_REGISTERED: dict[str, Any] = {}


def _dtypes() -> dict[Any, np.dtype]:
    import ml_dtypes
    import torch

    return {
        torch.float32: np.dtype(np.float32),
        torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
        torch.float16: np.dtype(np.float16),
        torch.int32: np.dtype(np.int32),
        torch.int16: np.dtype(np.int16),
        torch.int8: np.dtype(np.int8),
        torch.uint8: np.dtype(np.uint8),
    }


def to_numpy(tensor: Any, op: Op) -> np.ndarray:
    """A CPU tensor's values as numpy (bfloat16 through its bits)."""
    import torch

    dtypes = _dtypes()
    if tensor.dtype not in dtypes:
        raise GpsimdArgumentError(
            f"a {tensor.dtype} tensor: custom operators do not support this dtype", loc=user_location(), op=op.qualname
        )
    plain = tensor.detach().contiguous().cpu()
    if tensor.dtype == torch.bfloat16:
        return plain.view(torch.int16).numpy().view(dtypes[tensor.dtype]).copy()
    return plain.numpy().copy()


def from_numpy(array: np.ndarray) -> Any:
    """A torch tensor with the array's values."""
    import torch

    torch_of = {v: k for k, v in _dtypes().items()}
    array = np.ascontiguousarray(array)
    if torch_of[array.dtype] == torch.bfloat16:
        return torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(array.copy())


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


def _register_op(tlib: Any, lib: Library, op: Op) -> None:
    import torch

    qualname = f"{lib.name}::{op.name}"
    tlib.define(f"{op.name}{schema(op)}")

    def cpu(*args: Any) -> Any:
        inputs = [to_numpy(a, op) if isinstance(a, torch.Tensor) else a for a in args]
        result = run(op, inputs)
        op.last_result = result
        return from_numpy(result.outputs)

    def fake(*args: Any) -> Any:
        shaped = [np.empty(tuple(a.shape), _dtypes()[a.dtype]) if isinstance(a, torch.Tensor) else a for a in args]
        spec = output_spec(op, shaped)
        torch_of = {v: k for k, v in _dtypes().items()}
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
        return torch.empty(spec.sizes(), dtype=torch_of[spec.dtype], device=device)

    torch.library.impl(qualname, "CPU", lib=tlib)(cpu)
    torch.library.register_fake(qualname, lib=tlib)(fake)


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
    tlib = torch.library.Library(lib.name, "DEF")
    for op in lib.ops.values():
        output_spec_ready = op.shape_fn is not None and op.kernel_fn is not None
        if not output_spec_ready:
            raise GpsimdLibraryError(f"operator {op.name!r} needs a shape function and a kernel", loc=loc, op=lib.name)
        _register_op(tlib, lib, op)
    for op in lib.ops.values():
        if op.backward is not None:
            _register_backward(tlib, lib, op)
    _REGISTERED.update(library=lib, torch_library=tlib)
    return getattr(torch.ops, lib.name)
