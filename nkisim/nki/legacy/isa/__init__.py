"""``neuronxcc.nki.isa`` for nkisim: value-returning instructions with the legacy argument orders.

``nisa.activation(op=nl.exp, data=t)`` allocates its result tile and issues the same
``activation`` instruction as the current API's ``nisa.activation(dst=..., ...)``.
"""

from __future__ import annotations

from nkisim.errors import KernelError as NkiValidationError
from nkisim.frontend.legacy_isa import LEGACY_NISA
from nkisim.nki.isa import get_nc_version
from nkisim.nki.legacy.isa import constants
from nkisim.nki.legacy.isa.constants import dge_mode, dma_engine, engine, fp32, nc_version, oob_mode, reduce_cmd

tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown

globals().update(LEGACY_NISA)

__all__ = [
    "NkiValidationError",
    "constants",
    "dge_mode",
    "dma_engine",
    "engine",
    "fp32",
    "get_nc_version",
    "gpsimd_engine",
    "nc_version",
    "oob_mode",
    "reduce_cmd",
    "scalar_engine",
    "tensor_engine",
    "unknown_engine",
    "vector_engine",
    *LEGACY_NISA,
]
