"""Glue code, the GC2.0 interface between the graph compiler and a TPC kernel: pydantic models, GC names.

A glue class names its kernel (``GetKernelName``: the GUID) and, given the node's tensors and user
parameters (:class:`HabanaKernelParams`), fills a :class:`HabanaKernelInstantiation`: the index-space
geometry, each tensor's access pattern ``a*i + [start_b, end_b]`` per dimension, the scalar parameters
(32-bit words) and the kernel itself (``kernel.kernelElf``: here the Python kernel function). It
returns a :class:`GlueCodeReturn`. A :class:`KernelLibrary` holds glue classes by GUID, as a kernel
``.so`` on ``GC_KERNEL_PATH`` does.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Iterable
from enum import IntEnum
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


class GlueCodeReturn(IntEnum):
    """The glue's return codes (``gcapi::GlueCodeReturn_t``)."""

    GLUE_SUCCESS = 0
    GLUE_INCOMPATIBLE_INPUT_COUNT = 1
    GLUE_INCOMPATIBLE_OUTPUT_COUNT = 2
    GLUE_INCOMPATIBLE_INPUT_SIZE = 3
    GLUE_INCOMPATIBLE_OUTPUT_SIZE = 4
    GLUE_INCOMPATIBLE_DATA_TYPE = 5
    GLUE_INSUFFICIENT_AUX_BUFFER_SIZE = 6
    GLUE_INSUFFICIENT_ELF_BUFFER = 7
    GLUE_UNSUPPORTED_LAYOUTS = 8
    GLUE_NODE_NOT_FOUND = 9
    GLUE_FAILED = 10


class DeviceId(IntEnum):
    """``gcapi::DeviceId_t``."""

    DEVICE_ID_GAUDI = 1
    DEVICE_ID_GRECO = 2
    DEVICE_ID_GAUDI2 = 3
    DEVICE_ID_GAUDI3 = 4


#: ``geometry.dataType`` flags (``gcapi::TensorDataType_t``).
DATA_I8 = 1 << 0
DATA_I16 = 1 << 1
DATA_I32 = 1 << 2
DATA_U8 = 1 << 3
DATA_BF16 = 1 << 8
DATA_F16 = 1 << 11
DATA_F32 = 1 << 12
DATA_TYPES = {
    np.dtype(np.int8): DATA_I8,
    np.dtype(np.int16): DATA_I16,
    np.dtype(np.int32): DATA_I32,
    np.dtype(np.uint8): DATA_U8,
    np.dtype(np.float16): DATA_F16,
    np.dtype(np.float32): DATA_F32,
}


def data_type(dtype: Any) -> int:
    """The ``DATA_*`` flag of a numpy dtype."""
    dt = np.dtype(dtype)
    return DATA_BF16 if dt.name == "bfloat16" else DATA_TYPES[dt]


class _Model(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True, validate_assignment=True)


class TensorGeometry(_Model):
    """``TensorGeometry``: sizes in TPC order (dim0, the fastest-changing, first)."""

    dims: int = Field(ge=0, le=5)
    maxSizes: list[int]  # noqa: N815 (GC names)
    dataType: int = DATA_F32  # noqa: N815


class Tensor(_Model):
    """``Tensor``: a node tensor as the glue sees it (geometry only)."""

    geometry: TensorGeometry


class NodeParams(_Model):
    """``nodeParams``: the user parameter struct (a ``ctypes.Structure``, bytes, or None) and its size."""

    nodeParams: Any = None  # noqa: N815
    nodeParamsSize: int = 0  # noqa: N815


class HabanaKernelParams(_Model):
    """``HabanaKernelParams``: what the graph compiler tells the glue about one node."""

    apiVersion: int = 1  # noqa: N815
    deviceId: DeviceId = DeviceId.DEVICE_ID_GAUDI2  # noqa: N815
    guid: str = ""
    nodeParams: NodeParams = Field(default_factory=NodeParams)  # noqa: N815
    inputTensors: list[Tensor] = Field(default_factory=list)  # noqa: N815
    inputTensorNr: int = 0  # noqa: N815
    outputTensors: list[Tensor] = Field(default_factory=list)  # noqa: N815
    outputTensorNr: int = 0  # noqa: N815
    maxAvailableTpc: int = 0  # noqa: N815
    useDeterministic: bool = False  # noqa: N815
    uniqueNodeId: int = 0  # noqa: N815
    debugFlags: int = 0  # noqa: N815


class DimMapping(_Model):
    """``TensorAccessPattern.mapping[d]``: member ``i`` touches ``[a*i + start_b, a*i + end_b]`` of the dim."""

    indexSpaceDim: int = Field(default=0, ge=0, le=4)  # noqa: N815
    a: float = 0.0
    start_b: float = 0.0
    end_b: float = 0.0


class TensorAccessPattern(_Model):
    """The access pattern of one tensor: a mapping per dimension, or ``allRequired`` (any member reads it all)."""

    allRequired: bool = False  # noqa: N815
    mapping: list[DimMapping] = Field(default_factory=lambda: [DimMapping() for _ in range(5)])


class AuxTensor(_Model):
    """``auxiliaryTensors[i]``: a scratch or constant tensor the glue asks for."""

    geometry: TensorGeometry
    pData: Any = None  # noqa: N815  (initial contents: a numpy array, or None for zeros)
    bufferSize: int = 0  # noqa: N815


class KernelDescriptor(_Model):
    """``kernel``: the program (``kernelElf``: a :func:`nkisim.tpc.kernel`) and its scalar parameters."""

    kernelElf: Any = None  # noqa: N815
    elfSize: int = 0  # noqa: N815
    scalarParams: list[int] = Field(default_factory=list)  # noqa: N815
    paramsNr: int = 0  # noqa: N815


class HabanaKernelInstantiation(_Model):
    """``HabanaKernelInstantiation``: what the glue returns about the kernel it instantiates."""

    indexSpaceRank: int = Field(default=1, ge=1, le=5)  # noqa: N815
    indexSpaceGeometry: list[int] = Field(default_factory=lambda: [1] * 5)  # noqa: N815
    inputTensorAccessPattern: list[TensorAccessPattern] = Field(default_factory=list)  # noqa: N815
    outputTensorAccessPattern: list[TensorAccessPattern] = Field(default_factory=list)  # noqa: N815
    auxiliaryTensors: list[AuxTensor] = Field(default_factory=list)  # noqa: N815
    auxiliaryTensorNr: int = 0  # noqa: N815
    kernel: KernelDescriptor = Field(default_factory=KernelDescriptor)
    preferredSplitDim: int = 0  # noqa: N815
    inputPadValues: list[float] = Field(default_factory=list)  # noqa: N815


class Glue:
    """Base of glue classes (one per kernel GUID), as the HCK kernel classes are.

    Subclasses implement :meth:`GetKernelName` and :meth:`GetGcDefinitions`.
    """

    def GetKernelName(self) -> str:  # noqa: N802 (GC names)
        """The kernel GUID (at most 64 characters), e.g. ``custom_relu_fwd_f32_gaudi2``."""
        raise NotImplementedError

    def GetGcDefinitions(  # noqa: N802
        self, in_defs: HabanaKernelParams, out_defs: HabanaKernelInstantiation
    ) -> GlueCodeReturn:
        """Validate ``in_defs`` and fill ``out_defs``; return ``GLUE_SUCCESS`` or the error code."""
        raise NotImplementedError


class KernelLibrary:
    """Glue classes by GUID: what ``GetKernelGuids`` lists and ``InstantiateTpcKernel`` finds.

    Args:
        name: the library's name (as its ``.so`` would be called).
        glues: glue objects to add.
    """

    def __init__(self, name: str, glues: Iterable[Glue] = ()) -> None:
        self.name = name
        self._glues: dict[str, Glue] = {}
        for glue in glues:
            self.add(glue)

    def add(self, glue: Glue) -> Glue:
        """Add a glue object under its ``GetKernelName()``; returns it."""
        guid = glue.GetKernelName()
        if len(guid) >= 64:
            raise ValueError(f"kernel GUID {guid!r} is longer than 63 characters")
        self._glues[guid] = glue
        return glue

    def GetKernelGuids(self) -> list[str]:  # noqa: N802
        return sorted(self._glues)

    def find(self, guid: str) -> Glue | None:
        return self._glues.get(guid)


def elementwise_pattern(lanes: int) -> TensorAccessPattern:
    """The access pattern of an elementwise kernel: dim0 in vectors of ``lanes``, other dims one by one."""
    mapping = [DimMapping(indexSpaceDim=0, a=lanes, start_b=0, end_b=lanes - 1)]
    mapping += [DimMapping(indexSpaceDim=d, a=1, start_b=0, end_b=0) for d in range(1, 5)]
    return TensorAccessPattern(mapping=mapping)


def pack_params(params: Any) -> list[int]:
    """A user-parameter struct as 32-bit words (``ctypes.Structure``, bytes, or a sequence of numbers).

    Floats are packed as IEEE float32 bits, integers as int32.
    """
    if params is None:
        return []
    if isinstance(params, (ctypes.Structure | ctypes.Array, bytes | bytearray)):
        raw = bytes(params)
    else:
        raw = b"".join(struct.pack("<f" if isinstance(p, float) else "<i", p) for p in params)
    raw += b"\0" * (-len(raw) % 4)
    return list(struct.unpack(f"<{len(raw) // 4}I", raw))


def unpack_word(word: int, annotation: Any) -> Any:
    """A 32-bit scalar parameter as the kernel declares it (``float`` or ``int``)."""
    raw = struct.pack("<I", word & 0xFFFFFFFF)
    if annotation in (float, "float"):
        return struct.unpack("<f", raw)[0]
    return struct.unpack("<i", raw)[0]
