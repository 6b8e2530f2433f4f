"""Habana's PyTorch CustomOp API: descriptors that wrap one TPC kernel, registered as ``torch.ops.<ns>.<name>``.

Two forms, as the bridge headers have them:

* legacy ``hpu_custom_op.h``: :func:`REGISTER_CUSTOM_OP_ATTRIBUTES` with :class:`InputDesc` /
  :class:`OutputDesc` (per-output dtype and shape callback) and a user-parameter callback;
* PT2 ``hpu_custom_op_pt2.h``: :func:`registerUserCustomOp` with one output-meta callback
  (:class:`PartialOutputMetaData`) and a fill-params callback.

The bridge's rules are checked: one TPC kernel (GUID) per descriptor; input 0 is a tensor and gives
the outputs' layout and default shape; only Tensor and Scalar inputs reach the kernel (USER_PARAMS are
host values for the parameter callback); input and output indexes are unique. The user-parameter
struct is packed into the kernel's 32-bit scalar parameters. torch is imported only by
:func:`register_torch`, which also registers a fake (meta) kernel made from the shape callbacks.
64-bit integer outputs are computed as int32 by the TPC (it has no 64-bit vectors) and widened.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from nkisim.errors import SourceLoc, user_location
from nkisim.tpc.errors import TpcCustomOpError
from nkisim.tpc.glue import KernelLibrary, pack_params


class input_type(IntEnum):
    """``habana::custom_op::input_type``."""

    TENSOR = 0
    SCALAR = 1
    USER_PARAMS = 2


@dataclass(frozen=True)
class InputDesc:
    """``InputDesc{input_type type; unsigned index}``."""

    type: input_type
    index: int


@dataclass(frozen=True)
class OutputDesc:
    """``OutputDesc{index, dtype = Float, compute_output_shape_func}`` (dtype as a numpy dtype name)."""

    index: int
    dtype: str = "float32"
    compute_output_shape_func: Callable[[list[Any]], Sequence[int]] | None = None


@dataclass(frozen=True)
class NodeDesc:
    """``NodeDesc{tpc_guid, schema_name, user_param_func}``."""

    tpc_guid: str
    schema_name: str
    user_param_func: Callable[[list[Any]], tuple[Any, int]] | None = None


@dataclass(frozen=True)
class PartialOutputMetaData:
    """``habana::PartialOutputMetaData{dtype, shape}`` (PT2 API)."""

    dtype: str
    shape: list[int] = field(default_factory=list)


def HPU_PARAMS_STUB(struct_type: type) -> tuple[Any, int]:  # noqa: N802 (the C++ macro's name)
    """``HPU_PARAMS_STUB(T)``: a zeroed parameter struct and its size."""
    import ctypes

    params = struct_type()
    return params, ctypes.sizeof(params)


def _shape_of(x: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in x.shape)


def _is_tensor(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, (int, float, bool))


class _Descriptor:
    """What the legacy and the PT2 descriptors share: the GUID's glue and the run."""

    def __init__(self, schema: str, guid: Any, kernels: KernelLibrary, device: str, loc: SourceLoc) -> None:
        self.loc = loc
        if not isinstance(guid, str):
            raise TpcCustomOpError(
                f"{schema}: a descriptor wraps exactly one TPC kernel (one GUID), got {guid!r}; fuse the kernels or "
                "compose several custom ops in Python",
                loc=loc,
            )
        self.schema = schema
        self.guid = guid
        self.kernels = kernels
        self.device = device
        self.last_result: Any = None
        glue = kernels.find(guid)
        if glue is None:
            raise TpcCustomOpError(
                f"{schema}: no TPC kernel with GUID {guid!r} in library {kernels.name!r} "
                f"(it has {', '.join(kernels.GetKernelGuids()) or 'none'})",
                loc=loc,
                kernel=guid,
            )
        self.glue = glue

    def _run(
        self, tensors: list[np.ndarray], params: Any, outputs: list[tuple[tuple[int, ...], str]]
    ) -> list[np.ndarray]:
        from nkisim.tpc.runtime import run

        tpc_outputs = [(shape, "int32" if np.dtype(dt) == np.int64 else dt) for shape, dt in outputs]
        result = run(self.glue, tensors, params, device=self.device, outputs=tpc_outputs)
        self.last_result = result
        return [np.asarray(o).astype(dt) for o, (_, dt) in zip(result.outputs, outputs)]


class HabanaCustomOpDescriptor(_Descriptor):
    """``habana::custom_op::HabanaCustomOpDescriptor``: one TPC kernel with its input and output descriptors."""

    def __init__(
        self,
        node: NodeDesc,
        inputs: Sequence[InputDesc],
        outputs: Sequence[OutputDesc],
        *,
        kernels: KernelLibrary,
        device: str = "gaudi2",
    ) -> None:
        loc = user_location()
        super().__init__(node.schema_name, node.tpc_guid, kernels, device, loc)
        self.node = node
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self._verify(loc)

    def _verify(self, loc: SourceLoc) -> None:
        name = self.schema
        for d in self.inputs:
            if not isinstance(d.type, input_type):
                raise TpcCustomOpError(
                    f"{name}: input {d.index} has type {d.type!r}: only Tensor and Scalar inputs", loc=loc
                )
        by_index = sorted(self.inputs, key=lambda d: d.index)
        if not by_index or by_index[0].index != 0 or by_index[0].type is not input_type.TENSOR:
            got = "nothing" if not by_index or by_index[0].index != 0 else by_index[0].type.name
            raise TpcCustomOpError(
                f"{name}: input 0 must be a TENSOR (it gives the outputs' layout and default shape), got {got}", loc=loc
            )
        for what, descs in (("input", self.inputs), ("output", self.outputs)):
            indexes = [d.index for d in descs]
            if len(set(indexes)) != len(indexes):
                raise TpcCustomOpError(f"{name}: {what} indexes {indexes} are not unique", loc=loc)

    def hasUserParamsFunc(self) -> bool:  # noqa: N802
        return self.node.user_param_func is not None

    def hasOutputShapeFunc(self, index: int) -> bool:  # noqa: N802
        return self.outputs[index].compute_output_shape_func is not None

    def output_specs(self, stack: list[Any]) -> list[tuple[tuple[int, ...], str]]:
        """Each output's shape (the callback's, or input 0's) and dtype."""
        first = stack[0]
        if not _is_tensor(first):
            raise TpcCustomOpError(f"{self.schema}: input 0 must be a tensor, got {type(first).__name__}", loc=self.loc)
        specs = []
        for d in sorted(self.outputs, key=lambda d: d.index):
            fn = d.compute_output_shape_func
            shape = tuple(int(s) for s in fn(stack)) if fn is not None else _shape_of(first)
            specs.append((shape, d.dtype))
        return specs

    def execute(self, stack: list[Any], to_numpy: Callable[[Any], np.ndarray] = np.asarray) -> list[np.ndarray]:
        """Run the op on ``stack`` (its inputs in schema order); returns the outputs as numpy arrays."""
        tensors = []
        for d in sorted(self.inputs, key=lambda d: d.index):
            value = stack[d.index]
            if d.type is input_type.TENSOR:
                tensors.append(to_numpy(value))
            elif d.type is input_type.SCALAR:  # a device-allocated scalar: a one-element tensor
                tensors.append(np.asarray([value], dtype=np.float32))
        params = None
        if self.node.user_param_func is not None:
            params, size = self.node.user_param_func(stack)
            if len(pack_params(params)) * 4 < size:
                raise TpcCustomOpError(
                    f"{self.schema}: the parameter struct is smaller than its size {size}", loc=self.loc
                )
        return self._run(tensors, params, self.output_specs(stack))


class UserCustomOpDescriptor(_Descriptor):
    """``habana::UserCustomOpDescriptor`` (PT2 API): one output-meta callback for every output."""

    def __init__(
        self,
        schema: str,
        guid: str,
        output_meta_fn: Callable[[list[Any]], list[PartialOutputMetaData]],
        fill_params_fn: Callable[[list[Any]], tuple[Any, int]] | None = None,
        *,
        kernels: KernelLibrary,
        device: str = "gaudi2",
    ) -> None:
        super().__init__(schema, guid, kernels, device, user_location())
        self.output_meta_fn = output_meta_fn
        self.fill_params_fn = fill_params_fn

    def output_specs(self, stack: list[Any]) -> list[tuple[tuple[int, ...], str]]:
        if not stack or not _is_tensor(stack[0]):
            raise TpcCustomOpError(f"{self.schema}: input 0 must be a tensor", loc=self.loc)
        metas = self.output_meta_fn(stack)
        return [(tuple(int(s) for s in m.shape) if m.shape else _shape_of(stack[0]), m.dtype) for m in metas]

    def execute(self, stack: list[Any], to_numpy: Callable[[Any], np.ndarray] = np.asarray) -> list[np.ndarray]:
        tensors = [to_numpy(x) for x in stack if _is_tensor(x)]
        params = self.fill_params_fn(stack)[0] if self.fill_params_fn is not None else None
        return self._run(tensors, params, self.output_specs(stack))


#: Descriptors by schema name, as ``getCustomOpDescriptor`` finds them.
_DESCRIPTORS: dict[str, _Descriptor] = {}
_LOCK = threading.Lock()


def REGISTER_CUSTOM_OP_ATTRIBUTES(  # noqa: N802 (the C++ macro's name)
    schema_name: str,
    guid: str,
    inputs_desc: Sequence[InputDesc],
    outputs_desc: Sequence[OutputDesc],
    user_param_func: Callable[[list[Any]], tuple[Any, int]] | None = None,
    *,
    kernels: KernelLibrary,
    device: str = "gaudi2",
) -> HabanaCustomOpDescriptor:
    """Build the descriptor of ``schema_name`` (``"ns::name"``) around kernel ``guid`` and register it."""
    node = NodeDesc(guid, schema_name, user_param_func)
    desc = HabanaCustomOpDescriptor(node, inputs_desc, outputs_desc, kernels=kernels, device=device)
    with _LOCK:
        _DESCRIPTORS[schema_name] = desc
    return desc


def registerUserCustomOp(  # noqa: N802
    schema: str,
    guid: str,
    output_meta_fn: Callable[[list[Any]], list[PartialOutputMetaData]],
    fill_params_fn: Callable[[list[Any]], tuple[Any, int]] | None = None,
    *,
    kernels: KernelLibrary,
    device: str = "gaudi2",
) -> UserCustomOpDescriptor:
    """PT2: build and register the descriptor of ``schema`` (``"ns::name"``)."""
    desc = UserCustomOpDescriptor(schema, guid, output_meta_fn, fill_params_fn, kernels=kernels, device=device)
    with _LOCK:
        _DESCRIPTORS[schema] = desc
    return desc


def getCustomOpDescriptor(schema_name: str) -> _Descriptor:  # noqa: N802
    """The descriptor registered for ``schema_name``."""
    with _LOCK:
        found = _DESCRIPTORS.get(schema_name)
    if found is None:
        raise TpcCustomOpError(f"no custom op descriptor is registered for {schema_name!r}")
    return found


getUserCustomOpDescriptor = getCustomOpDescriptor  # noqa: N816 (the PT2 name)

# -- torch --------------------------------------------------------------------------------------

_TORCH_LIBRARIES: dict[str, Any] = {}


def _torch_dtypes() -> dict[str, Any]:
    import torch

    return {
        "float32": torch.float32,
        "bfloat16": torch.bfloat16,
        "float16": torch.float16,
        "int32": torch.int32,
        "int64": torch.int64,
        "int16": torch.int16,
        "int8": torch.int8,
        "uint8": torch.uint8,
    }


def _to_numpy(t: Any) -> np.ndarray:
    import ml_dtypes
    import torch

    plain = t.detach().contiguous().cpu()
    if plain.dtype == torch.bfloat16:
        return plain.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    return plain.numpy().copy()


def _from_numpy(a: np.ndarray) -> Any:
    import torch

    a = np.ascontiguousarray(a)
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def register_torch(schema: str, descriptor: _Descriptor | None = None) -> Any:
    """Define ``schema`` (``"ns::name(Tensor self, ...) -> (Tensor, Tensor)"``) with a CPU kernel that runs the
    descriptor's TPC kernel on the simulator and a fake kernel from its shape callbacks; returns the op.

    ``TORCH_LIBRARY(ns, m){ m.def(schema) }`` + ``TORCH_LIBRARY_IMPL``. One registration per name and process.
    """
    import torch

    qualname, _, signature = schema.partition("(")
    ns, _, name = qualname.partition("::")
    desc = descriptor or getCustomOpDescriptor(qualname)
    with _LOCK:
        if qualname in _TORCH_LIBRARIES:
            raise TpcCustomOpError(f"{qualname} is already registered with torch in this process", loc=user_location())
        tlib = torch.library.Library(ns, "FRAGMENT")
        _TORCH_LIBRARIES[qualname] = tlib
    tlib.define(f"{name}({signature}")
    dtypes = _torch_dtypes()

    def outputs(arrays: list[np.ndarray]) -> Any:
        result = tuple(_from_numpy(a) for a in arrays)
        return result[0] if len(result) == 1 else result

    def cpu(*args: Any) -> Any:
        return outputs(desc.execute(list(args), _to_numpy))

    def fake(*args: Any) -> Any:
        device = args[0].device
        made = tuple(torch.empty(shape, dtype=dtypes[dt], device=device) for shape, dt in desc.output_specs(list(args)))
        return made[0] if len(made) == 1 else made

    torch.library.impl(qualname, "CPU", lib=tlib)(cpu)
    torch.library.register_fake(qualname, lib=tlib)(fake)
    return getattr(getattr(torch.ops, ns), name)
