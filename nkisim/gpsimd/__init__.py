"""GPSIMD custom operators: the Neuron custom C++ operator model, simulated in Python.

An author writes a shape function and a kernel, registers them in a :class:`Library`
(``custom_op.load`` + ``NEURON_LIBRARY``), and runs the op with :func:`run` or, after
``lib.register_torch()``, as ``torch.ops.<library>.<op>``. Kernels use the C++ API's names
(``ctx.get_cpu_id()``, ``t.tcm_accessor().tensor_to_tcm(buf, offset, count)``, ...), its rules
are checked, and a calibrated cost model times them on the GPSIMD cores. See docs/gpsimd.md.
"""

from nkisim.gpsimd.context import CoreContext
from nkisim.gpsimd.errors import (
    GpsimdArgumentError,
    GpsimdBoundsError,
    GpsimdBroadcastError,
    GpsimdCoherenceError,
    GpsimdError,
    GpsimdLibraryError,
    GpsimdLoadError,
    GpsimdRaceError,
    GpsimdShapeFunctionError,
    GpsimdStackOverflow,
    GpsimdStreamError,
    GpsimdUndefinedBehavior,
)
from nkisim.gpsimd.library import Library, Op
from nkisim.gpsimd.runtime import ISA, GpsimdResult, Scalar, run
from nkisim.gpsimd.tensor import (
    CoherencePolicy,
    CoherencyEnforcer,
    DeviceTensor,
    ShapeTensor,
    empty,
    kBFloat16,
    kByte,
    kChar,
    kFloat,
    kHalf,
    kInt,
    kShort,
    zeros,
)

__all__ = [
    "ISA",
    "CoherencePolicy",
    "CoherencyEnforcer",
    "CoreContext",
    "DeviceTensor",
    "GpsimdArgumentError",
    "GpsimdBoundsError",
    "GpsimdBroadcastError",
    "GpsimdCoherenceError",
    "GpsimdError",
    "GpsimdLibraryError",
    "GpsimdLoadError",
    "GpsimdRaceError",
    "GpsimdResult",
    "GpsimdShapeFunctionError",
    "GpsimdStackOverflow",
    "GpsimdStreamError",
    "GpsimdUndefinedBehavior",
    "Library",
    "Op",
    "Scalar",
    "ShapeTensor",
    "empty",
    "kBFloat16",
    "kByte",
    "kChar",
    "kFloat",
    "kHalf",
    "kInt",
    "kShort",
    "run",
    "zeros",
]
