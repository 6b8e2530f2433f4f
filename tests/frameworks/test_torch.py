"""Simulated NKI kernels as PyTorch operators: values, autograd, opcheck, torch.compile, errors."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the nkisim[torch] extra (PyTorch) is not installed")

import nkisim  # noqa: E402
import nkisim.nki as nki  # noqa: E402
import nkisim.nki.isa as nisa  # noqa: E402
import nkisim.nki.language as nl  # noqa: E402
import nkisim.torch as nt  # noqa: E402
from nkisim.examples.matmul import matmul_tiled  # noqa: E402
from nkisim.examples.softmax import softmax_rows  # noqa: E402
from nkisim.examples.tensor_add import nki_tensor_add  # noqa: E402

from .conftest import EXAMPLES, load_example  # noqa: E402

add_op = nt.custom_op("nkisim_test::tensor_add", nki_tensor_add)
add_op.register_autograd(lambda ctx, grad: (grad, grad))
matmul_op = nt.custom_op("nkisim_test::matmul", matmul_tiled)
softmax_op = nt.custom_op("nkisim_test::softmax", softmax_rows)


def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _softmax_backward(ctx, grad):
    (y,) = ctx.saved_tensors
    return y * (grad - (grad * y).sum(dim=-1, keepdim=True))


softmax_op.register_autograd(_softmax_backward, setup_context=_softmax_setup)


def _matmul_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _matmul_backward(ctx, grad):
    lhs_t, rhs = ctx.saved_tensors  # out = lhs_t.T @ rhs
    return rhs @ grad.T, lhs_t @ grad


matmul_op.register_autograd(_matmul_backward, setup_context=_matmul_setup)


def test_seed_pytorch_example_matches_native_ops() -> None:
    example = load_example("torch_add")
    a, b = torch.randn(256, 1024), torch.randn(256, 1024)
    out = example.forward(a, b)
    assert isinstance(out, torch.Tensor)
    assert torch.equal(out, a * b * (a + b))


def test_seed_autograd_function_example_backward() -> None:
    example = load_example("torch_autograd")
    a, b = torch.randn(256, 512), torch.randn(256, 512)
    loss, grad_a, grad_b = example.loss_and_grads(a, b)
    assert torch.allclose(loss, (a * b * (a + b)).sum(), rtol=1e-5)
    assert torch.allclose(grad_a, b * (a + b) + a * b, rtol=1e-5, atol=1e-5)
    assert torch.allclose(grad_b, a * (a + b) + a * b, rtol=1e-5, atol=1e-5)


def test_registered_operator_values_and_dtypes() -> None:
    a, b = torch.randn(128, 512), torch.randn(128, 512)
    assert torch.equal(torch.ops.nkisim_test.tensor_add(a, b), a + b)
    ab, bb = a.to(torch.bfloat16), b.to(torch.bfloat16)
    out = add_op(ab, bb)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, (ab.float() + bb.float()).to(torch.bfloat16))
    lhs_t, rhs = torch.randn(256, 128), torch.randn(256, 512)
    torch.testing.assert_close(matmul_op(lhs_t, rhs), lhs_t.T @ rhs, rtol=1e-5, atol=1e-4)
    x = torch.randn(128, 200)
    torch.testing.assert_close(softmax_op(x), torch.softmax(x, dim=-1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("op", "args"),
    [
        (add_op, lambda: (torch.randn(128, 512), torch.randn(128, 512))),
        (matmul_op, lambda: (torch.randn(128, 128), torch.randn(128, 512))),
        (softmax_op, lambda: (torch.randn(128, 64),)),
    ],
    ids=["tensor_add", "matmul", "softmax"],
)
def test_opcheck(op: nt.SimulatedOp, args) -> None:
    torch.library.opcheck(op.op, args())


def test_fake_kernel_traces_shapes_without_running() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), nkisim.collect_profiles() as profiles:
        lhs_t = torch.empty(256, 128, dtype=torch.bfloat16)
        rhs = torch.empty(256, 1024, dtype=torch.bfloat16)
        out = matmul_op(lhs_t, rhs)
    assert tuple(out.shape) == (128, 1024)
    assert out.dtype == torch.bfloat16
    assert profiles == []  # nothing was simulated with values
    meta = add_op(torch.empty(128, 512, device="meta"), torch.empty(128, 512, device="meta"))
    assert meta.device.type == "meta"
    assert tuple(meta.shape) == (128, 512)


def test_torch_compile_inductor() -> None:
    def model(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.ops.nkisim_test.tensor_add(x, y) * x

    compiled = torch.compile(model, fullgraph=True)
    a, b = torch.randn(128, 512), torch.randn(128, 512)
    assert torch.allclose(compiled(a, b), (a + b) * a)


def test_torch_compile_with_autograd() -> None:
    compiled = torch.compile(lambda x: softmax_op(x * 2.0).sum(dim=0), backend="aot_eager")
    x = torch.randn(128, 32, requires_grad=True)
    compiled(x).pow(2).sum().backward()
    x_ref = x.detach().clone().requires_grad_()
    torch.softmax(x_ref * 2.0, dim=-1).sum(dim=0).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-5)


def test_gradcheck() -> None:
    # NKI has no float64, so the kernels run in float32: gradcheck with float32 tolerances.
    a = torch.randn(128, 512, requires_grad=True)
    b = torch.randn(128, 512, requires_grad=True)
    assert torch.autograd.gradcheck(add_op, (a, b), eps=1e-2, atol=1e-2, rtol=1e-2, fast_mode=True)
    x = torch.randn(128, 8, requires_grad=True)
    assert torch.autograd.gradcheck(softmax_op, (x,), eps=1e-2, atol=1e-2, rtol=1e-2, fast_mode=True)
    lhs_t = torch.randn(128, 128, requires_grad=True)
    rhs = torch.randn(128, 512, requires_grad=True)
    assert torch.autograd.gradcheck(matmul_op, (lhs_t, rhs), eps=1e-2, atol=2e-2, rtol=1e-2, fast_mode=True)


def test_profiles_of_every_call_are_collected() -> None:
    a, b = torch.randn(128, 512), torch.randn(128, 512)
    with nkisim.collect_profiles() as profiles:
        add_op(a, b)
        softmax_op(a)
    assert [p.kernel for p in profiles] == ["nki_tensor_add", "softmax_rows"]
    assert all(p.total_ns > 0 for p in profiles)


def test_wrong_dtype_names_the_operator_and_the_callers_line() -> None:
    a = torch.randn(128, 512, dtype=torch.float64)
    with pytest.raises(nt.OperatorError, match=r"nkisim_test::tensor_add argument 0: dtype torch.float64") as info:
        add_op(a, a)  # CALL_LINE
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if text.endswith("# CALL_LINE"))
    assert str(info.value).startswith(f"test_torch.py:{line}: ")  # not torch's dispatcher


def test_one_dtype_table_both_ways() -> None:
    import ml_dtypes

    assert nt.numpy_dtype(torch.bfloat16) == np.dtype(ml_dtypes.bfloat16)
    assert nt.numpy_dtype(torch.float8_e5m2) == np.dtype(ml_dtypes.float8_e5m2)
    assert nt.numpy_dtype(torch.float64) is None and nt.numpy_dtype(torch.int64) is None
    assert nt.torch_dtype(np.dtype(ml_dtypes.bfloat16)) == torch.bfloat16
    assert nt.torch_dtype(np.dtype(np.float64)) is None


def test_a_non_contiguous_input_is_copied_at_the_boundary() -> None:
    a = torch.randn(512, 128).T
    b = torch.randn(128, 512)
    assert not a.is_contiguous()
    got = add_op(a, b)
    np.testing.assert_array_equal(got.numpy(), a.numpy() + b.numpy())


def test_non_cpu_inputs_are_rejected() -> None:
    with pytest.raises(nt.OperatorError, match="on meta"):
        nt.to_numpy(torch.empty(2, 2, device="meta"))


@nki.jit
def _too_many_partitions(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)  # BAD_LINE
    nisa.dma_copy(dst=out, src=tile)
    return out


_BAD_LINE = next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1) if line.endswith("# BAD_LINE"))
bad_op = nt.custom_op("nkisim_test::bad", _too_many_partitions)


def test_kernel_validation_error_names_operator_and_line() -> None:
    x = torch.randn(256, 64)
    pattern = rf"^test_torch.py:{_BAD_LINE}: nkisim_test::bad: nisa.dma_copy \[DMA, trn1\]: dst has 8192 elements"
    with pytest.raises(nt.OperatorError, match=pattern):
        bad_op(x)
    # torch.compile traces with the fake kernel, which validates the kernel; dynamo wraps the error
    with pytest.raises(Exception, match=re.escape(f"test_torch.py:{_BAD_LINE}: nkisim_test::bad: nisa.dma_copy")):
        torch.compile(lambda t: bad_op(t), backend="aot_eager", fullgraph=True)(x)


def test_tuple_outputs_need_a_tuple_schema() -> None:
    @nki.jit
    def two_copies(x):
        a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=a, src=x)
        nisa.dma_copy(dst=b, src=x)
        return a, b

    op = nt.custom_op("nkisim_test::two_copies", two_copies, schema="(Tensor x) -> (Tensor, Tensor)")
    x = torch.randn(4, 8)
    first, second = op(x)
    assert torch.equal(first, x) and torch.equal(second, x)
    wrong = nt.custom_op("nkisim_test::two_copies_wrong", two_copies)
    with pytest.raises(nt.OperatorError, match=r"returned 2 tensors"):
        wrong(x)


def test_decorator_form_registers_the_operator() -> None:
    @nt.custom_op("nkisim_test::double")
    @nki.jit
    def double(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        nisa.tensor_scalar(dst=tile, data=tile, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out, src=tile)
        return out

    x = torch.randn(64, 32)
    assert torch.equal(torch.ops.nkisim_test.double(x), x * 2)


def test_custom_op_example_script_runs() -> None:
    runpy.run_path(str(EXAMPLES / "torch_custom_op.py"), run_name="__main__")


def test_torch_round_trip_keeps_bits() -> None:
    for dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2, torch.int8, torch.int32, torch.float16):
        t = torch.randn(3, 5).to(dtype)
        back = nt.from_numpy(nt.to_numpy(t))
        assert back.dtype == dtype
        assert torch.equal(back.view(torch.uint8), t.contiguous().view(torch.uint8))
    assert nt.to_numpy(torch.ones(2, dtype=torch.bfloat16)).dtype == np.dtype("bfloat16")
