"""``neuronxcc.nki.typing``: annotations for kernel parameters and tiles (accepted, not checked)."""

from __future__ import annotations

from typing import Any


class _TensorAnnotation:
    """``tensor[128, 512]``: a shape annotation."""

    def __init__(self, shape: tuple[Any, ...] = ()) -> None:
        self.shape = shape

    def __getitem__(self, shape: Any) -> _TensorAnnotation:
        return _TensorAnnotation(shape if isinstance(shape, tuple) else (shape,))

    def __repr__(self) -> str:
        return f"tensor[{', '.join(map(str, self.shape))}]" if self.shape else "tensor"


tensor = _TensorAnnotation()
mutable_tensor = _TensorAnnotation()
scalar = _TensorAnnotation()

__all__ = ["mutable_tensor", "scalar", "tensor"]
