"""GPSIMD ops as torch.library operators: end to end, fake kernels, autograd, opcheck, one library."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nkisim import gpsimd

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def ops() -> Any:
    from nkisim.examples.gpsimd_torch import model_lib

    return model_lib.register_torch()


def test_seed_tensor_negate_from_torch(ops: Any) -> None:
    x = torch.tensor([1.0, -2.5, 3.0])
    assert torch.equal(torch.ops.model_ops.tensor_negate(x), -x)


def test_relu_forward_and_backward(ops: Any) -> None:
    x = torch.randn(3, 700, requires_grad=True)
    y = ops.relu(x)
    assert torch.equal(y, torch.relu(x))
    (y * torch.arange(700.0)).sum().backward()
    assert torch.equal(x.grad, (x > 0).float() * torch.arange(700.0))


def test_the_profile_of_the_last_call_is_kept(ops: Any) -> None:
    from nkisim.examples.gpsimd_torch import model_lib

    ops.relu(torch.ones(2048))
    result = model_lib.relu.last_result
    assert result.total_ns > 0 and {r.engine for r in result.profile.instructions} == {"GpSimd 0"}


def test_fake_kernel_is_the_shape_function(ops: Any) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(5, 6)
        out = ops.tensor_negate(x)
    assert tuple(out.shape) == (30,) and out.dtype == torch.float32


@pytest.mark.parametrize("name", ["relu", "tensor_negate"])
def test_opcheck(ops: Any, name: str) -> None:
    x = torch.randn(2, 300, requires_grad=True) if name == "relu" else torch.randn(300)  # the seed's op is 1-D
    torch.library.opcheck(getattr(ops, name).default, (x,))


def test_torch_compile(ops: Any) -> None:
    fn = torch.compile(lambda t: ops.relu(t) * 2, backend="eager", fullgraph=True)
    x = torch.randn(1000)
    assert torch.equal(fn(x), torch.relu(x) * 2)


def test_a_second_library_is_an_error(ops: Any) -> None:
    other = gpsimd.Library("other_model_ops")
    other.shape("op")(lambda t: gpsimd.zeros(t.sizes(), t.dtype))
    other.kernel("op")(lambda ctx, t: ctx.get_dst_tensor())
    with pytest.raises(gpsimd.GpsimdLibraryError) as info:
        other.register_torch()
    text = str(info.value)
    assert text.startswith("test_torch.py:") and "one custom-op library" in text and "'model_ops'" in text


def test_registering_again_is_harmless(ops: Any) -> None:
    from nkisim.examples.gpsimd_torch import model_lib

    assert model_lib.register_torch() is ops


def test_schema_from_annotations() -> None:
    from nkisim.gpsimd.frameworks import schema

    lib = gpsimd.Library("schema_ops")

    def kernel(ctx, t, factor: float, count: int, s: gpsimd.Scalar):
        return ctx.get_dst_tensor()

    lib.kernel("op")(kernel)
    assert schema(lib.op) == "(Tensor t, float factor, int count, Scalar s) -> Tensor"


def test_bfloat16_round_trip(ops: Any) -> None:
    from nkisim.gpsimd.frameworks import from_numpy, to_numpy

    x = torch.randn(10).to(torch.bfloat16)
    assert torch.equal(from_numpy(to_numpy(x, ops_handle())), x)


def ops_handle() -> gpsimd.Op:
    from nkisim.examples.gpsimd_torch import model_lib

    return model_lib.relu


@pytest.mark.parametrize("dtype", ["float64", "float8_e4m3fn", "bool"])
def test_unsupported_torch_dtype_names_the_callers_line(ops: Any, dtype: str) -> None:
    # float64 has no NKI equivalent; fp8 and bool have one, but custom operators do not take them
    with pytest.raises(gpsimd.GpsimdArgumentError, match="do not support") as info:
        ops.relu(torch.ones(3).to(getattr(torch, dtype)))  # CALL_LINE
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if text.endswith("# CALL_LINE"))
    assert str(info.value).startswith(f"test_torch.py:{line}: gpsimd model_ops.relu: argument 0 of model_ops.relu")


def test_fake_kernel_refuses_an_unsupported_dtype(ops: Any) -> None:
    with pytest.raises(gpsimd.GpsimdArgumentError, match=r"torch\.float64, which custom operators do not support"):
        ops.relu(torch.empty(3, dtype=torch.float64, device="meta"))


def test_meta_tensors_keep_device_and_dtype(ops: Any) -> None:
    out = ops.relu(torch.empty(4, 5, dtype=torch.bfloat16, device="meta"))
    assert out.device.type == "meta" and tuple(out.shape) == (4, 5) and out.dtype == torch.bfloat16


def test_bfloat16_input_through_an_op(ops: Any) -> None:
    x = torch.randn(70).to(torch.bfloat16)
    out = ops.tensor_negate(x)
    assert out.dtype == torch.float32 and torch.equal(out, -x.float())  # bf16 widens to float32 exactly


def test_non_contiguous_input_is_taken(ops: Any) -> None:
    x = torch.randn(70, 3).T
    assert not x.is_contiguous() and torch.equal(ops.relu(x), torch.relu(x))


def test_output_does_not_share_memory_with_the_kept_result(ops: Any) -> None:
    from nkisim.examples.gpsimd_torch import model_lib

    y = ops.relu(torch.ones(8))
    y.add_(1)
    assert np.array_equal(model_lib.relu.last_result.outputs, np.ones(8, np.float32))


def test_tensors_are_converted_by_the_torch_adapter(ops: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import nkisim.torch
    from nkisim.frontend.frameworks import adapter

    assert adapter("torch") is nkisim.torch
    seen: list[str] = []
    to_numpy = nkisim.torch.to_numpy

    def spy(tensor: Any, where: str = "input") -> np.ndarray:
        seen.append(where)
        return to_numpy(tensor, where)

    monkeypatch.setattr(nkisim.torch, "to_numpy", spy)
    ops.relu(torch.ones(4))
    assert seen == ["argument 0 of model_ops.relu"]


def test_numpy_reference_matches_torch(ops: Any) -> None:
    x = np.linspace(-1, 1, 33, dtype=np.float32)
    assert np.array_equal(ops.relu(torch.from_numpy(x)).numpy(), np.maximum(x, 0))
