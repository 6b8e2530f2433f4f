"""PyTorch autograd through a simulated NKI kernel, with a ``torch.autograd.Function``.

python examples/torch_autograd.py
"""

import torch

from nkisim.examples.tensor_add import nki_tensor_add


class SimulatedAdd(torch.autograd.Function):
    """y = a + b in the forward pass by the kernel; dy/da = dy/db = 1."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return nki_tensor_add(a, b)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return grad, grad


def loss_and_grads(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """sum(a * b * (a + b)) and its gradients with respect to a and b."""
    a = a.detach().requires_grad_()
    b = b.detach().requires_grad_()
    loss = (a * b * SimulatedAdd.apply(a, b)).sum()
    loss.backward()
    return loss.detach(), a.grad, b.grad


if __name__ == "__main__":
    torch.manual_seed(0)
    a = torch.randn(256, 1024)
    b = torch.randn(256, 1024)
    loss, grad_a, grad_b = loss_and_grads(a, b)
    # d/da of a*b*(a+b) = b*(a+b) + a*b
    assert torch.allclose(grad_a, b * (a + b) + a * b, rtol=1e-5, atol=1e-5)
    assert torch.allclose(grad_b, a * (a + b) + a * b, rtol=1e-5, atol=1e-5)
    print(f"loss {loss.item():.4f}; gradients match the analytic ones")
