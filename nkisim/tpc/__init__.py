"""Habana Gaudi TPC kernels and custom operators, simulated in Python.

A kernel is a Python function written like TPC-C (``@tpc.kernel``; ``ctx.v_f32_ld_tnsr_b``,
``ctx.get_index_space_offset()``, ...). Glue code (:class:`Glue`, GC2.0 names) gives it an index
space and access patterns; :func:`run` splits the index space among the Gaudi's TPCs, runs every
member, checks what each touched, and times it with a VLIW bundle schedule built from the public
compiler's latency tables. :mod:`nkisim.tpc.custom_op` registers kernels as PyTorch operators with
the Habana CustomOp API's descriptors. See docs/tpc.md.
"""

from nkisim.hw.tpc import TpcConfig, gaudi_names, load_gaudi
from nkisim.tpc import custom_op
from nkisim.tpc.context import LocalArray, TpcCoherenceWarning, TpcContext
from nkisim.tpc.errors import (
    TpcAccessPatternError,
    TpcCustomOpError,
    TpcError,
    TpcGlueError,
    TpcLocalMemoryError,
    TpcRaceError,
    TpcSignatureError,
    TpcTypeError,
    TpcUnwrittenOutputError,
)
from nkisim.tpc.glue import (
    DATA_BF16,
    DATA_F32,
    DATA_I32,
    AuxTensor,
    DeviceId,
    DimMapping,
    Glue,
    GlueCodeReturn,
    HabanaKernelInstantiation,
    HabanaKernelParams,
    KernelDescriptor,
    KernelLibrary,
    TensorAccessPattern,
    TensorGeometry,
    elementwise_pattern,
    pack_params,
)
from nkisim.tpc.intrinsics import INTRINSICS, IntrinsicSpec
from nkisim.tpc.runtime import ISA, Kernel, TpcResult, kernel, run, tensor
from nkisim.tpc.semantics import SW_NEG, SW_RD, SW_RHNE, SW_RU, SW_RZ
from nkisim.tpc.types import VTYPES, Pair, Vec, VType, int5

__all__ = [
    "DATA_BF16",
    "DATA_F32",
    "DATA_I32",
    "INTRINSICS",
    "ISA",
    "SW_NEG",
    "SW_RD",
    "SW_RHNE",
    "SW_RU",
    "SW_RZ",
    "VTYPES",
    "AuxTensor",
    "DeviceId",
    "DimMapping",
    "Glue",
    "GlueCodeReturn",
    "HabanaKernelInstantiation",
    "HabanaKernelParams",
    "IntrinsicSpec",
    "Kernel",
    "KernelDescriptor",
    "KernelLibrary",
    "LocalArray",
    "Pair",
    "TensorAccessPattern",
    "TensorGeometry",
    "TpcAccessPatternError",
    "TpcCoherenceWarning",
    "TpcConfig",
    "TpcContext",
    "TpcCustomOpError",
    "TpcError",
    "TpcGlueError",
    "TpcLocalMemoryError",
    "TpcRaceError",
    "TpcResult",
    "TpcSignatureError",
    "TpcTypeError",
    "TpcUnwrittenOutputError",
    "VType",
    "Vec",
    "custom_op",
    "elementwise_pattern",
    "gaudi_names",
    "int5",
    "kernel",
    "load_gaudi",
    "pack_params",
    "run",
    "tensor",
]
