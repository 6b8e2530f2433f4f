"""``neuronxcc.nki.typing``: annotations for kernel parameters and tiles (accepted, not checked)."""

from __future__ import annotations

from nkisim.frontend.annotations import TensorAnnotation

tensor = TensorAnnotation()
mutable_tensor = TensorAnnotation(name="mutable_tensor")
scalar = TensorAnnotation(name="scalar")

__all__ = ["mutable_tensor", "scalar", "tensor"]
