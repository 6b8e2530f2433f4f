"""``neuronxcc.nki.typing``: annotations for kernel parameters and tiles (accepted, not checked)."""

from __future__ import annotations

from typing import Any


class TensorAnnotation:
    """``tensor[128, 512]``: a shape annotation for kernel parameters (not enforced); ``name`` shows in its repr."""

    def __init__(self, shape: tuple[Any, ...] = (), name: str = "tensor") -> None:
        self.shape = shape
        self.name = name

    def __getitem__(self, shape: Any) -> TensorAnnotation:
        return TensorAnnotation(shape if isinstance(shape, tuple) else (shape,), self.name)

    def __repr__(self) -> str:
        return f"{self.name}[{', '.join(map(str, self.shape))}]" if self.shape else self.name


tensor = TensorAnnotation()
mutable_tensor = TensorAnnotation(name="mutable_tensor")
scalar = TensorAnnotation(name="scalar")

__all__ = ["mutable_tensor", "scalar", "tensor"]
