"""``nki.isa`` for nkisim: every instruction, with NKI's names, arguments and defaults.

Kernels use it exactly as NKI's: ``import nkisim.nki.isa as nisa``. Each function
validates its operands, computes its result and schedules it on its engine.
"""

from __future__ import annotations

import functools
from enum import Enum

from nkisim.errors import KernelError as NkiValidationError
from nkisim.frontend.context import current_context
from nkisim.frontend.handles import NkiInstruction
from nkisim.frontend.stubs import STUBS
from nkisim.hw import Engine as engine  # noqa: N813 - NKI's name
from nkisim.isa.enums import dge_mode, dma_engine, matmul_perf_mode, oob_mode, reduce_cmd
from nkisim.isa.registers import VirtualRegister, register_alloc

tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown


@functools.total_ordering
class nc_version(Enum):
    """NeuronCore version of a target; versions compare in order (``get_nc_version() >= nc_version.gen3``).

    Only kernels ask it: nkisim's instructions ask the target's named capabilities instead.
    """

    gen2 = 2
    gen3 = 3
    gen4 = 4

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, nc_version):
            return NotImplemented
        return self.value < other.value


def get_nc_version() -> nc_version:
    """The NeuronCore version of the running target."""
    return nc_version(current_context().hw.nc_version)


def get_nc_sub_version() -> int:
    """The silicon revision of the running target within its NeuronCore version (0: the first)."""
    return current_context().hw.nc_sub_version


globals().update(STUBS)

__all__ = [
    "NkiInstruction",
    "NkiValidationError",
    "VirtualRegister",
    "dge_mode",
    "dma_engine",
    "engine",
    "get_nc_sub_version",
    "get_nc_version",
    "matmul_perf_mode",
    "nc_version",
    "oob_mode",
    "reduce_cmd",
    "register_alloc",
    *STUBS,
]
