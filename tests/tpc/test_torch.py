"""Habana custom operators as torch ops: seed 001's custom_topk, the descriptor rules, PT2 registration."""

from __future__ import annotations

import itertools

import pytest

import nkisim.tpc as tpc
from nkisim.tpc import custom_op

torch = pytest.importorskip("torch")

_names = itertools.count()


def _ns() -> str:
    """A fresh torch namespace per registration (tests share one process)."""
    return f"nkisim_tpc_test{next(_names)}"


@pytest.mark.parametrize(
    ("shape", "k", "dim", "bottom"),
    [
        ((6, 6), 3, 1, False),
        ((6, 6), 3, 1, True),
        ((4, 150), 5, 1, False),
        ((70, 3), 2, 0, True),
        ((2, 9, 5), 3, 1, False),
    ],
)
def test_custom_topk_matches_torch(shape: tuple[int, ...], k: int, dim: int, bottom: bool) -> None:
    import nkisim.examples.tpc_topk  # noqa: F401 (registers torch.ops.custom_op.custom_topk)

    a = torch.randn(shape, generator=torch.Generator().manual_seed(len(shape) * 10 + k))
    values, indices = torch.ops.custom_op.custom_topk(a, k, dim, bottom)
    want_v, want_i = torch.topk(a, k, dim=dim, largest=not bottom)
    assert indices.dtype == torch.int64 and values.dtype == torch.float32
    assert torch.equal(values, want_v)
    assert torch.equal(indices, want_i)


def test_seed_call_and_fake_kernel() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    from nkisim.examples.tpc_topk import DESCRIPTOR

    a = torch.randn(6, 6)
    # bottom=False: the top k, as torch.topk(a, 3, 1) (Habana's own test compares with that call)
    values, indices = torch.ops.custom_op.custom_topk(a, 3, 1, False)
    assert torch.equal(values, torch.topk(a, 3, 1).values) and torch.equal(indices, torch.topk(a, 3, 1).indices)
    values, indices = torch.ops.custom_op.custom_topk(a, 3, 1, True)
    want = torch.topk(a, 3, dim=1, largest=False)
    assert torch.equal(values, want.values) and torch.equal(indices, want.indices)
    assert DESCRIPTOR.last_result.cycles > 0
    with FakeTensorMode() as mode:
        fv, fi = torch.ops.custom_op.custom_topk(mode.from_tensor(a), 3, 1, False)
    assert fv.shape == (6, 3) and fi.dtype == torch.int64


def _relu_library() -> tpc.KernelLibrary:
    from nkisim.examples.tpc_relu import LIBRARY

    return LIBRARY


def test_legacy_relu_op_defaults_to_input_0_shape() -> None:
    ns = _ns()
    desc = custom_op.REGISTER_CUSTOM_OP_ATTRIBUTES(
        f"{ns}::relu",
        "custom_relu_fwd_f32_gaudi2",
        [custom_op.InputDesc(custom_op.input_type.TENSOR, 0)],
        [custom_op.OutputDesc(0)],
        kernels=_relu_library(),
    )
    op = custom_op.register_torch(f"{ns}::relu(Tensor self) -> Tensor", desc)
    x = torch.randn(3, 100)
    assert torch.equal(op(x), torch.relu(x))
    assert custom_op.getCustomOpDescriptor(f"{ns}::relu") is desc


def test_pt2_registration_bf16_add() -> None:
    ns = _ns()
    desc = custom_op.registerUserCustomOp(
        f"{ns}::add",
        "custom_add_bf16_gaudi2",
        lambda stack: [custom_op.PartialOutputMetaData("bfloat16", list(stack[0].shape))],
        kernels=_relu_library(),
    )
    op = custom_op.register_torch(f"{ns}::add(Tensor a, Tensor b) -> Tensor", desc)
    a, b = torch.randn(5, 300).bfloat16(), torch.randn(5, 300).bfloat16()
    assert torch.equal(op(a, b), (a.float() + b.float()).bfloat16())


def test_input_0_must_be_a_tensor() -> None:
    with pytest.raises(tpc.TpcCustomOpError, match=r"input 0 must be a TENSOR .*got SCALAR") as info:
        custom_op.REGISTER_CUSTOM_OP_ATTRIBUTES(
            f"{_ns()}::bad",
            "custom_relu_fwd_f32_gaudi2",
            [custom_op.InputDesc(custom_op.input_type.SCALAR, 0), custom_op.InputDesc(custom_op.input_type.TENSOR, 1)],
            [custom_op.OutputDesc(0)],
            kernels=_relu_library(),
        )
    assert str(info.value).startswith("test_torch.py:")


def test_one_kernel_per_descriptor_and_known_guid() -> None:
    inputs = [custom_op.InputDesc(custom_op.input_type.TENSOR, 0)]
    with pytest.raises(tpc.TpcCustomOpError, match="exactly one TPC kernel"):
        custom_op.REGISTER_CUSTOM_OP_ATTRIBUTES(
            f"{_ns()}::two", ["custom_relu_fwd_f32_gaudi2", "custom_add_f32_gaudi2"], inputs, [custom_op.OutputDesc(0)],
            kernels=_relu_library(),
        )  # fmt: skip
    with pytest.raises(tpc.TpcCustomOpError, match="no TPC kernel with GUID 'nope'"):
        custom_op.REGISTER_CUSTOM_OP_ATTRIBUTES(
            f"{_ns()}::nope", "nope", inputs, [custom_op.OutputDesc(0)], kernels=_relu_library()
        )
    with pytest.raises(tpc.TpcCustomOpError, match="not unique"):
        custom_op.REGISTER_CUSTOM_OP_ATTRIBUTES(
            f"{_ns()}::dup",
            "custom_relu_fwd_f32_gaudi2",
            inputs * 2,
            [custom_op.OutputDesc(0)],
            kernels=_relu_library(),
        )


def test_user_params_are_packed_into_scalar_words() -> None:
    from nkisim.examples.tpc_topk import synBeamParams

    params = synBeamParams(bsw=3, axis=0, bottomK=1)
    assert tpc.pack_params(params) == [3, 0, 1]
    assert tpc.pack_params([1.0, 2]) == [0x3F800000, 2]
    p, size = custom_op.HPU_PARAMS_STUB(synBeamParams)
    assert size == 12 and p.bsw == 0


def test_custom_op_is_an_attribute_of_the_package_without_importing_torch():
    import subprocess
    import sys

    code = "import sys, nkisim; d = nkisim.tpc.custom_op.InputDesc; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
