"""Tracing: ``@jit``, argument binding, the running kernel context and the ``nki.isa`` stubs."""

from nkisim.errors import ExecutionError
from nkisim.frontend.context import KernelContext, current_context
from nkisim.frontend.jit import ArraySpec, Kernel, RunResult, collect_profiles, jit, output_specs, profile, run
from nkisim.frontend.replay import CompiledKernel, compile

__all__ = [
    "ArraySpec",
    "CompiledKernel",
    "ExecutionError",
    "Kernel",
    "KernelContext",
    "RunResult",
    "collect_profiles",
    "compile",
    "current_context",
    "jit",
    "output_specs",
    "profile",
    "run",
]
