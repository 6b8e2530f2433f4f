"""The enums of ``nki.isa`` that instructions take (the engine enum is :class:`nkisim.hw.Engine`;
the NeuronCore version enum, which only reports the target to kernels, is in :mod:`nkisim.nki.isa`)."""

from __future__ import annotations

from enum import Enum


class dge_mode(Enum):
    """DMA descriptor generation mode."""

    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(Enum):
    """What a dynamic DMA does with an out-of-bounds index."""

    error = 0
    skip = 1


class reduce_cmd(Enum):
    """Commands for an engine's accumulator registers."""

    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class matmul_perf_mode(Enum):
    """Tensor Engine performance mode."""

    none = "none"
    double_row = "double_row"


class dma_engine(Enum):
    """Which DMA mechanism a transfer uses (NKI 0.3+; ``nisa.sendrecv(dma_engine=...)``)."""

    dma = 1
    gpsimd_dma = 2
