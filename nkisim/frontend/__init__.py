"""Tracing: ``@jit``, argument binding, the running kernel context and the ``nki.isa`` stubs."""

from nkisim.frontend.context import ExecutionError, KernelContext, current_context
from nkisim.frontend.jit import Kernel, RunResult, jit, run

__all__ = ["ExecutionError", "Kernel", "KernelContext", "RunResult", "current_context", "jit", "run"]
