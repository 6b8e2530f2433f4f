"""``neuronxcc.nki`` (Neuron 2.26 and earlier) for nkisim: ``import nkisim.nki.legacy as nki``.

Kernels written against the legacy API compute with tiles as values (``c = nl.load(a)``,
``nisa.activation(op=nl.exp, data=t)`` returns its result) and index with ``nl.arange``/
``nl.mgrid`` expressions and ``mask=`` predicates. They trace to the same instruction
records, core and timeline as the current API (``nkisim.nki``); see docs/legacy-api.md.
:func:`nkisim.install_nki_alias` makes ``import neuronxcc.nki`` load these modules.
"""

from numpy import dtype

from nkisim.frontend.legacy_launch import (
    LegacyKernel,
    LegacyRunResult,
    baremetal,
    benchmark,
    jit,
    profile,
    run_legacy,
    simulate_kernel,
)
from nkisim.nki.legacy import compiler, isa, language, typing
from nkisim.nki.legacy.typing import tensor

#: ``nki.trace``: the tracing decorator (the same as ``nki.jit`` here).
trace = jit

__all__ = [
    "LegacyKernel",
    "LegacyRunResult",
    "baremetal",
    "benchmark",
    "compiler",
    "dtype",
    "isa",
    "jit",
    "language",
    "profile",
    "run_legacy",
    "simulate_kernel",
    "tensor",
    "trace",
    "typing",
]
