"""What kernel samples import from ``torch_xla`` and ``torch_neuronx``, for running them on the CPU.

The Neuron SDK's PyTorch samples move their tensors to the XLA device (``xm.xla_device()``),
mark steps (``xm.mark_step()``) and decorate kernels with ``torch_neuronx.nki_jit``. With the
alias installed by ``install_nki_alias(xla_device=True)`` and neither package importable,
``torch_xla.core.xla_model`` and ``torch_neuronx`` are this module: the device is the CPU, a step
mark does nothing (nkisim runs each kernel call when it is made), and ``nki_jit`` is
``neuronxcc.nki.jit``.
"""

from __future__ import annotations

from typing import Any


def xla_device(n: int | None = None, devkind: str | None = None) -> Any:
    """The CPU device: tensors "moved to the NeuronCore" stay where nkisim reads them."""
    import torch

    return torch.device("cpu")


def mark_step(*args: Any, **kwargs: Any) -> None:
    """Nothing to do: nkisim has already run every kernel called before the mark."""


def nki_jit(func: Any = None, **kwargs: Any) -> Any:
    """``torch_neuronx.nki_jit``: the legacy ``nki.jit``, which takes and gives torch tensors."""
    from nkisim.nki.legacy import jit

    return jit(func, **kwargs) if func is not None else jit(**kwargs)


__all__ = ["mark_step", "nki_jit", "xla_device"]
