"""A model's custom-op library used from PyTorch: tensor_negate and a differentiable ReLU.

A model uses one custom-op library, so this one holds every op the model needs. After
``register_torch()`` the ops are ``torch.ops.model_ops.<op>``; ``relu`` has a backward op, so
autograd works through it.
"""

from __future__ import annotations

import nkisim.gpsimd as gpsimd
from nkisim.examples.gpsimd_negate import tensor_negate, tensor_negate_shape
from nkisim.examples.gpsimd_relu import relu_backward_shape, relu_backward_tcm, relu_shape, relu_tcm

model_lib = gpsimd.Library("model_ops")
model_lib.shape("tensor_negate")(tensor_negate_shape)
model_lib.kernel("tensor_negate")(tensor_negate)
model_lib.shape("relu")(relu_shape)
model_lib.kernel("relu")(relu_tcm)
model_lib.shape("relu_backward")(relu_backward_shape)
model_lib.kernel("relu_backward")(relu_backward_tcm)
model_lib.backward("relu", "relu_backward")


def main() -> None:
    import torch

    ops = model_lib.register_torch()
    x = torch.randn(4, 256, requires_grad=True)
    y = ops.relu(x)
    y.sum().backward()
    assert torch.equal(y, torch.relu(x)) and torch.equal(x.grad, (x > 0).float())
    print("torch.ops.model_ops.relu forward and backward match torch.relu")
    print(torch.ops.model_ops.tensor_negate(torch.arange(4.0)))


if __name__ == "__main__":
    main()
