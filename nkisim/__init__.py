"""nkisim: a cycle-approximate, instruction-level simulator for AI accelerators.

Run an NKI kernel on a CPU and get its exact outputs and a profile::

    import nkisim
    result = nkisim.run(kernel, [a, b])
    result.outputs, result.profile.total_ns
"""

from nkisim.alias import install_nki_alias, uninstall_nki_alias
from nkisim.errors import (
    BoundsError,
    CapacityError,
    DtypeError,
    KernelError,
    MemoryKindError,
    OperandError,
    ShapeError,
    SourceLoc,
    TargetError,
)
from nkisim.frontend import (
    ArraySpec,
    ExecutionError,
    Kernel,
    RunResult,
    collect_profiles,
    jit,
    output_specs,
    profile,
    run,
)
from nkisim.report import InstructionRecord, Profile

__version__ = "0.1.0"

__all__ = [
    "ArraySpec",
    "BoundsError",
    "CapacityError",
    "DtypeError",
    "ExecutionError",
    "InstructionRecord",
    "Kernel",
    "KernelError",
    "MemoryKindError",
    "OperandError",
    "Profile",
    "RunResult",
    "ShapeError",
    "SourceLoc",
    "TargetError",
    "collect_profiles",
    "install_nki_alias",
    "jit",
    "output_specs",
    "profile",
    "run",
    "uninstall_nki_alias",
]
