"""Library and registration rules: names, limits, flags, argument and return types, dtypes, sizes."""

from __future__ import annotations

import numpy as np
import pytest

from nkisim import gpsimd
from nkisim.errors import KernelError
from tests.gpsimd.kernels import library, negate_tcm, same_shape


def test_seed_tensor_negate_runs_end_to_end() -> None:
    from nkisim.examples.gpsimd_negate import negate_lib

    x = np.array([1.5, -2.0, 0.0, 7.25], dtype=np.float32)
    result = gpsimd.run(negate_lib.tensor_negate, [x])
    assert np.array_equal(result.outputs, -x)
    assert result.outputs.dtype == np.float32


def test_op_handle_is_attribute_and_callable() -> None:
    op = library("handle_lib", negate_tcm)
    assert isinstance(op, gpsimd.Op) and op.qualname == "handle_lib.op"
    x = np.arange(5, dtype=np.float32)
    assert np.array_equal(op(x), -x)
    with pytest.raises(AttributeError, match="no operator 'nope'"):
        op.library.nope  # noqa: B018


def test_reserved_name_builtin() -> None:
    with pytest.raises(gpsimd.GpsimdLibraryError) as info:
        gpsimd.Library("builtin")
    assert "test_library.py:" in str(info.value) and "'builtin' is reserved" in str(info.value)
    assert isinstance(info.value, KernelError)


def test_library_name_must_be_identifier() -> None:
    with pytest.raises(gpsimd.GpsimdLibraryError, match="identifier"):
        gpsimd.Library("my-ops")


def test_at_most_ten_functions() -> None:
    lib = gpsimd.Library("ten_ops")
    for i in range(10):
        lib.shape(f"op{i}")(same_shape)
        lib.kernel(f"op{i}")(negate_tcm)
    with pytest.raises(gpsimd.GpsimdLibraryError) as info:
        lib.shape("op10")(same_shape)
    assert "at most 10 functions" in str(info.value) and "number 11" in str(info.value)


def test_duplicate_kernel_is_an_error() -> None:
    lib = gpsimd.Library("dup_ops")
    lib.kernel("a")(negate_tcm)
    with pytest.raises(gpsimd.GpsimdLibraryError, match="already has a kernel"):
        lib.kernel("a")(negate_tcm)


def test_op_without_shape_function() -> None:
    lib = gpsimd.Library("noshape_ops")
    lib.kernel("a")(negate_tcm)
    with pytest.raises(gpsimd.GpsimdLibraryError, match="no shape function"):
        gpsimd.run(lib.a, [np.zeros(4, np.float32)])


def test_stack_size_flag_is_parsed() -> None:
    assert gpsimd.Library("flag_ops", extra_cflags=["-O2", "-DSTACK_SIZE=20000"]).stack_size == 20000
    assert gpsimd.Library("flag_ops2").stack_size is None
    with pytest.raises(gpsimd.GpsimdLibraryError, match="not a number"):
        gpsimd.Library("flag_ops3", extra_cflags=["-DSTACK_SIZE=big"])


def test_many_libraries_in_one_process_run_fine() -> None:
    x = np.ones(3, np.float32)
    for i in range(3):
        assert np.array_equal(gpsimd.run(library(f"many_{i}", negate_tcm), [x]).outputs, -x)


# -- argument and return types -----------------------------------------------------------


def scale_kernel(ctx, t, factor):
    out = ctx.get_dst_tensor()
    acc, dst = t.accessor(), out.accessor()
    f = factor.to_float() if isinstance(factor, gpsimd.Scalar) else factor
    for i in range(t.numel()):
        dst[i] = acc[i] * f
    return out


@pytest.mark.parametrize("factor", [2.5, 3, gpsimd.Scalar(-1.5)])
def test_scalar_double_and_int64_arguments(factor: object) -> None:
    op = library("scale_ops", scale_kernel)
    x = np.arange(6, dtype=np.float32)
    value = factor.value if isinstance(factor, gpsimd.Scalar) else factor
    assert np.allclose(gpsimd.run(op, [x, factor]).outputs, x * value)


@pytest.mark.parametrize(
    ("bad", "rule"),
    [
        ([1.0, 2.0], "std::vector and std::tuple arguments are not supported"),
        ((1.0,), "std::vector and std::tuple arguments are not supported"),
        (True, "is a bool"),
        ("2", "arguments are Tensor"),
    ],
)
def test_unsupported_argument_types(bad: object, rule: str) -> None:
    op = library("argtype_ops", scale_kernel)
    with pytest.raises(gpsimd.GpsimdArgumentError) as info:
        gpsimd.run(op, [np.ones(2, np.float32), bad])
    assert rule in str(info.value) and "test_library.py:" in str(info.value)


def test_wrong_number_of_arguments() -> None:
    op = library("arity_ops", scale_kernel, shape=lambda t, f: gpsimd.zeros(t.sizes(), t.dtype))
    with pytest.raises(gpsimd.GpsimdArgumentError, match="does not take these 1 arguments"):
        gpsimd.run(op, [np.ones(2, np.float32)])


def test_kernel_must_return_one_tensor() -> None:
    def two(ctx, t):
        return ctx.zeros(t.sizes(), t.dtype), ctx.zeros(t.sizes(), t.dtype)

    with pytest.raises(gpsimd.GpsimdArgumentError) as info:
        gpsimd.run(library("ret_ops", two), [np.ones(2, np.float32)])
    assert "exactly one tensor" in str(info.value) and "got tuple" in str(info.value)


def test_returned_tensor_must_match_the_shape_function() -> None:
    def wrong(ctx, t):
        return ctx.zeros([t.numel() + 1], t.dtype)

    with pytest.raises(gpsimd.GpsimdArgumentError, match=r"returned float32\[5\] but the shape function says"):
        gpsimd.run(library("mismatch_ops", wrong), [np.ones(4, np.float32)])


def test_shape_function_may_not_read_data() -> None:
    def peeking(t):
        t.accessor()
        return gpsimd.zeros(t.sizes(), t.dtype)

    with pytest.raises(gpsimd.GpsimdShapeFunctionError) as info:
        gpsimd.run(library("peek_ops", negate_tcm, shape=peeking), [np.ones(4, np.float32)])
    assert "may not read tensor data" in str(info.value)
    assert "test_library.py:" in str(info.value)


def test_shape_function_must_return_a_tensor() -> None:
    with pytest.raises(gpsimd.GpsimdShapeFunctionError, match="exactly one tensor"):
        gpsimd.run(library("shret_ops", negate_tcm, shape=lambda t: (4,)), [np.ones(4, np.float32)])


# -- dtypes and sizes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype", [gpsimd.kFloat, gpsimd.kBFloat16, gpsimd.kHalf, gpsimd.kInt, gpsimd.kShort, gpsimd.kChar, gpsimd.kByte]
)
def test_supported_dtypes(dtype: np.dtype) -> None:
    def copy(ctx, t):
        out = ctx.get_dst_tensor()
        acc, dst = t.accessor(), out.accessor()
        for i in range(t.numel()):
            dst[i] = acc[i]
        return out

    x = np.arange(5).astype(dtype)
    assert np.array_equal(gpsimd.run(library("dt_ops", copy), [x]).outputs, x)


@pytest.mark.parametrize("dtype", [np.int64, np.float64, np.bool_, np.uint32])
def test_unsupported_dtypes(dtype: type) -> None:
    with pytest.raises(gpsimd.GpsimdArgumentError) as info:
        gpsimd.run(library("baddt_ops", negate_tcm), [np.zeros(3, dtype)])
    assert "custom operators do not support" in str(info.value) and "64-bit" in str(info.value)


def test_unsupported_output_dtype_in_shape_function() -> None:
    with pytest.raises(gpsimd.GpsimdArgumentError, match="do not support"):
        gpsimd.zeros([3], np.int64)


@pytest.mark.parametrize(
    ("sizes", "ok"),
    [
        ((1,) * 8, True),
        ((1,) * 9, False),
        ((65535, 1), True),
        ((65536, 1), True),  # 2 dims: the 4-dim limit of 2**32 - 1 applies
        ((65536, 1, 1, 1, 1), False),  # 5 dims: each at most 65535
        ((2**32 - 1,), True),
        ((2**32,), False),
    ],
)
def test_tensor_size_limits(sizes: tuple[int, ...], ok: bool) -> None:
    from nkisim.gpsimd.tensor import check_sizes

    if ok:
        assert check_sizes(sizes, "t") == sizes
    else:
        with pytest.raises(gpsimd.GpsimdArgumentError, match="up to 8 dimensions of at most 65535"):
            check_sizes(sizes, "t")


def test_input_beyond_the_size_limit_is_rejected() -> None:
    x = np.zeros((1,) * 9, np.float32)
    with pytest.raises(gpsimd.GpsimdArgumentError, match=r"argument 0 of size_ops.op has sizes"):
        gpsimd.run(library("size_ops", negate_tcm), [x])
