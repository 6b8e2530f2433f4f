"""nkisim: a cycle-approximate, instruction-level simulator for AI accelerators.

Run an NKI kernel on a CPU and get its exact outputs and a profile::

    import nkisim
    result = nkisim.run(kernel, [a, b])
    result.outputs, result.profile.total_ns

Run it again on new values of the same shapes, replaying the recorded program::

    prog = nkisim.compile(kernel, [a, b])
    prog([a2, b2]).outputs
"""

import importlib
from typing import Any

from nkisim.compat.alias import install_nki_alias, uninstall_nki_alias
from nkisim.errors import (
    BoundsError,
    BudgetError,
    CapacityError,
    CheckError,
    CheckWarning,
    DependencyError,
    Diagnostic,
    DtypeError,
    KernelError,
    MemoryKindError,
    OperandError,
    ShapeError,
    SignatureError,
    SourceLoc,
    TargetError,
    UnsupportedError,
)
from nkisim.frontend import (
    ArraySpec,
    CompiledKernel,
    ExecutionError,
    Kernel,
    RunResult,
    collect_profiles,
    compile,
    jit,
    output_specs,
    profile,
    run,
)
from nkisim.report import InstructionRecord, Profile
from nkisim.sim.checks import CHECKS, ignore_checks
from nkisim.sweeps import SweepRecord, SweepTable, sweep

__version__ = "0.1.0"

#: Subpackages loaded on first attribute access (``nkisim.torch.custom_op``).
_LAZY_SUBMODULES = ("torch", "jax", "gpsimd", "tpc")

__all__ = [
    "CHECKS",
    "ArraySpec",
    "BoundsError",
    "BudgetError",
    "CapacityError",
    "CheckError",
    "CheckWarning",
    "CompiledKernel",
    "DependencyError",
    "Diagnostic",
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
    "SignatureError",
    "SourceLoc",
    "SweepRecord",
    "SweepTable",
    "TargetError",
    "UnsupportedError",
    "collect_profiles",
    "compile",
    "ignore_checks",
    "install_nki_alias",
    "jit",
    "output_specs",
    "profile",
    "run",
    "sweep",
    "uninstall_nki_alias",
]


def __getattr__(name: str) -> Any:
    """Load :mod:`nkisim.torch`, :mod:`nkisim.jax`, :mod:`nkisim.gpsimd` and :mod:`nkisim.tpc` when first used."""
    if name not in _LAZY_SUBMODULES:
        raise AttributeError(f"module 'nkisim' has no attribute {name!r}")
    return importlib.import_module(f"nkisim.{name}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY_SUBMODULES])
