"""PyTorch: replace ``a + b`` in ``a * b * (a + b)`` with the simulated NKI add kernel.

python examples/torch_add.py
"""

import torch

from nkisim.examples.tensor_add import nki_tensor_add


def forward(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a * b * (a + b), the sum computed by the kernel (called directly on torch tensors)."""
    c = nki_tensor_add(a, b)
    return a * b * c


if __name__ == "__main__":
    torch.manual_seed(0)
    a = torch.randn(256, 1024)
    b = torch.randn(256, 1024)
    out = forward(a, b)
    assert torch.equal(out, a * b * (a + b))
    print("a * b * (a + b) with the simulated kernel matches PyTorch:", tuple(out.shape))
