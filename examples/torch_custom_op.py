"""A simulated NKI kernel registered as a real PyTorch operator, checked and compiled.

python examples/torch_custom_op.py
"""

import torch

import nkisim
import nkisim.torch
from nkisim.examples.softmax import softmax_rows
from nkisim.examples.tensor_add import nki_tensor_add

add_op = nkisim.torch.custom_op("nkisim_examples::tensor_add", nki_tensor_add)
add_op.register_autograd(lambda ctx, grad: (grad, grad))

softmax_op = nkisim.torch.custom_op("nkisim_examples::softmax_rows", softmax_rows)


def _softmax_setup(ctx: torch.autograd.function.FunctionCtx, inputs: tuple[torch.Tensor], output: torch.Tensor) -> None:
    ctx.save_for_backward(output)


def _softmax_backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> torch.Tensor:
    (y,) = ctx.saved_tensors
    return y * (grad - (grad * y).sum(dim=-1, keepdim=True))


softmax_op.register_autograd(_softmax_backward, setup_context=_softmax_setup)


if __name__ == "__main__":
    torch.manual_seed(0)
    a = torch.randn(256, 512)
    b = torch.randn(256, 512)
    torch.library.opcheck(add_op.op, (a, b))
    torch.library.opcheck(softmax_op.op, (a,))
    print("opcheck passed for", add_op.qualname, "and", softmax_op.qualname)

    compiled = torch.compile(lambda x, y: torch.ops.nkisim_examples.softmax_rows(x * y), backend="aot_eager")
    with nkisim.collect_profiles() as profiles:
        out = compiled(a, b)
    assert torch.allclose(out, torch.softmax(a * b, dim=-1), atol=1e-6)
    print("torch.compile result matches torch.softmax;", profiles[-1].summary().splitlines()[0])
