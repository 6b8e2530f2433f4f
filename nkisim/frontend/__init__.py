"""Tracing: ``@jit``, argument binding, the running kernel context and the ``nki.isa`` stubs."""

from nkisim.frontend.context import ExecutionError, KernelContext, current_context
from nkisim.frontend.jit import ArraySpec, Kernel, RunResult, jit, output_specs, profile, run

__all__ = [
    "ArraySpec",
    "ExecutionError",
    "Kernel",
    "KernelContext",
    "RunResult",
    "current_context",
    "jit",
    "output_specs",
    "profile",
    "run",
]
