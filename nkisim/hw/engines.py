"""The engines of a NeuronCore, with NKI's enum values."""

from __future__ import annotations

from enum import Enum


class Engine(Enum):
    """A NeuronCore engine. Values match ``nki.isa.engine``, so the same object serves both."""

    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    dma = 4
    vector = 5
    sync = 6

    @property
    def title(self) -> str:
        """The display name used in messages and profiles (``Tensor``, ``GpSimd``, ...)."""
        return _TITLES[self]


_TITLES = {
    Engine.unknown: "Unknown",
    Engine.tensor: "Tensor",
    Engine.scalar: "Scalar",
    Engine.gpsimd: "GpSimd",
    Engine.dma: "DMA",
    Engine.vector: "Vector",
    Engine.sync: "Sync",
}

#: The compute and control engines that have their own in-order instruction queue.
QUEUED_ENGINES = (Engine.sync, Engine.tensor, Engine.vector, Engine.scalar, Engine.gpsimd)
