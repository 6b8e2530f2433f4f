"""The legacy ``neuronxcc.nki`` API: each construct against a numpy reference written here."""

import numpy as np
import pytest

import nkisim
import nkisim.nki.legacy as nki
import nkisim.nki.legacy.isa as nisa
import nkisim.nki.legacy.language as nl
from nkisim.errors import BoundsError, KernelError
from nkisim.frontend.legacy_launch import run_legacy

RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.random(shape, dtype=np.float32)


@nki.jit
def _load_store_mgrid(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:256]
    for b in nl.affine_range(x.shape[0]):
        t = nl.load(x[b, i_p, i_f])
        nl.store(out[b, i_p, i_f], value=t * 2.0)
    return out


def test_load_store_with_mgrid_and_loop_index():
    x = rand(3, 128, 256)
    assert np.array_equal(_load_store_mgrid(x), x * 2.0)


@nki.jit
def _strided(x):
    out = nl.ndarray((64, 128), x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(64)[:, None]
    i_f = nl.arange(128)[None, :]
    t = nl.load(x[2 * i_p + 1, i_f * 2])
    nl.store(out[i_p, i_f], t)
    return out


def test_affine_index_expressions_give_strided_views():
    x = rand(128, 256)
    assert np.array_equal(_strided(x), x[1::2, ::2])


@nki.jit
def _masked(x):
    out = nl.ndarray((100, 300), x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(512)[None, :]
    t = nl.load(x[i_p, i_f], mask=(i_p < 100) & (i_f < 300))
    sq = nl.square(t, mask=(i_p < 100) & (i_f < 300))
    nl.store(out[i_p, i_f], sq[i_p, i_f], mask=(i_p < 100) & (i_f < 300))
    return out


def test_mask_restricts_load_compute_and_store():
    x = rand(100, 300)
    assert np.allclose(_masked(x), x * x)


@nki.jit
def _no_mask(x):
    out = nl.ndarray((100, 300), x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(300)[None, :]
    nl.store(out[i_p, i_f], nl.load(x[i_p, i_f]))
    return out


def test_out_of_bounds_index_without_mask_is_a_bounds_error_at_the_kernel_line():
    with pytest.raises(BoundsError, match=r"test_legacy_api\.py:\d+:.*out of bounds"):
        _no_mask(rand(100, 300))


@nki.jit
def _activation(a, c):
    out = nl.ndarray(a.shape, nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.load(a)
    bias = nl.load(c)
    r = nisa.activation(op=np.square, data=t, bias=bias, scale=2.0, dtype=nl.bfloat16)
    nl.store(out, r)
    return out


def test_activation_returns_its_result_with_numpy_op_bias_scale_and_dtype():
    a, c = rand(128, 64), rand(128, 1)
    expected = np.square(a * 2.0 + c)
    assert np.allclose(_activation(a, c).astype(np.float32), expected, rtol=1e-2)


@nki.jit
def _reduce(a):
    out = nl.ndarray((128, 1), a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(out, nisa.tensor_reduce(np.max, t, axis=1, keepdims=True))
    return out


def test_tensor_reduce_with_a_numpy_function_as_op():
    a = rand(128, 96)
    assert np.array_equal(_reduce(a), a.max(axis=1, keepdims=True))


@nki.jit
def _matmul_accumulate(lhs_t, rhs):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    i_k, i_m = nl.mgrid[0:128, 0:128]
    _, i_n = nl.mgrid[0:128, 0:512]
    for k in nl.affine_range(lhs_t.shape[0] // 128):
        acc += nisa.nc_matmul(nl.load(lhs_t[k * 128 + i_k, i_m]), nl.load(rhs[k * 128 + i_k, i_n]))
    nl.store(out, acc)
    return out


def test_psum_accumulation_of_nc_matmul_results():
    lhs_t, rhs = rand(384, 128), rand(384, 512)
    result = run_legacy(_matmul_accumulate, (lhs_t, rhs), {})
    assert np.allclose(result.outputs, lhs_t.T @ rhs, rtol=1e-5)
    opcodes = [r.opcode for r in result.profile.instructions]
    assert opcodes.count("nc_matmul") == 3  # accumulated in place, no extra add
    assert "tensor_tensor" not in opcodes


@nki.jit
def _nl_matmul(x, y):
    out = nl.ndarray((64, 256), nl.float32, buffer=nl.shared_hbm)
    res = nl.matmul(nl.load(x), nl.load(y), transpose_x=True)
    nl.store(out, res)
    return out


def test_nl_matmul_transpose_x():
    x, y = rand(128, 64), rand(128, 256)
    assert np.allclose(_nl_matmul(x, y), x.T @ y, rtol=1e-5)


@nki.jit
def _iota():
    out = nl.ndarray((128, 64), nl.int32, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(64)[None, :]
    nl.store(out, nisa.iota(3 + 2 * i_p - i_f, dtype=nl.int32))
    return out


def test_iota_of_an_affine_expression():
    p, f = np.meshgrid(np.arange(128), np.arange(64), indexing="ij")
    assert np.array_equal(_iota(), 3 + 2 * p - f)


@nki.jit
def _par_dim(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((4, nl.par_dim(128), 32), dtype=x.dtype, buffer=nl.sbuf)
    for b in nl.affine_range(4):
        buf[b] = nl.load(x[b])
    for b in nl.affine_range(4):
        nl.store(out[b], value=buf[b] + 1.0)
    return out


def test_par_dim_block_buffer():
    x = rand(4, 128, 32)
    assert np.array_equal(_par_dim(x), x + 1.0)


@nki.jit
def _spmd(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    t = nl.load(a[i, j])
    n = nl.num_programs() * 10 + nl.program_ndim()
    nl.store(out[i, j], value=t + float(n))
    return out


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_spmd_grid_of_rank_two(target):
    a = rand(4, 2, 8, 16)
    result = run_legacy(_spmd[4, 2], (a,), {}, target=target)
    assert np.array_equal(result.outputs, a + 82.0)
    assert [p.index for p in result.programs] == [(i, j) for i in range(4) for j in range(2)]
    assert {p.core for p in result.programs} == ({0, 1} if target == "trn2" else {0})
    assert result.total_ns == pytest.approx(max(p.end_ns for p in result.programs))


def test_spmd_dim_places_programs_on_cores():
    a = rand(4, 2, 8, 16)
    result = run_legacy(_spmd[nl.spmd_dim(2, nl.nc(2)), 2], (a,), {}, target="trn2")
    assert [p.core for p in result.programs][:4] == [0, 0, 1, 1]
    assert np.array_equal(result.outputs, a + 82.0)


def _writes_argument(a, out):
    nl.store(out, nl.exp(nl.load(a)))


def test_simulate_kernel_writes_output_arguments_in_place():
    a = rand(128, 64)
    out = np.zeros_like(a)
    nki.simulate_kernel(_writes_argument, a, out)
    assert np.allclose(out, np.exp(a), rtol=1e-6)


def test_benchmark_reports_the_simulated_latency(capsys):
    k = nki.benchmark(warmup=2, iters=5)(_nl_matmul.func)
    x, y = rand(128, 64), rand(128, 256)
    assert np.allclose(k(x, y), x.T @ y, rtol=1e-5)
    expected = run_legacy(_nl_matmul, (x, y), {}).total_ns / 1000.0
    assert k.benchmark_result.nc_latency.get_latency_percentile(50) == pytest.approx(expected)
    printed = capsys.readouterr().out
    assert "(simulated" in printed and f"p99 {expected:.2f} us" in printed


def test_benchmark_on_typing_annotations_simulates_shapes_alone():
    import nkisim.nki.legacy.typing as nt

    lhs, rhs = nt.tensor[[128, 64], nl.float32], nt.tensor[(128, 256), nl.float32]
    assert (lhs.shape, lhs.dtype, repr(nt.tensor[128, 512])) == ((128, 64), nl.float32, "tensor[128, 512]")
    k = nki.benchmark(warmup=2, iters=5)(_nl_matmul.func)
    assert k(lhs, rhs) is None  # no values: a benchmark ignores them
    # the timeline of shapes alone is the one arrays of those shapes give
    expected = run_legacy(_nl_matmul, (rand(128, 64), rand(128, 256)), {}).total_ns / 1000.0
    assert k.benchmark_result.nc_latency.get_latency_percentile(99) == pytest.approx(expected)


@nki.jit
def _scaled_add(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.multiply(nl.load(b), 2.0)))
    return out


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_a_legacy_kernel_takes_and_gives_framework_arrays(framework):
    lib = pytest.importorskip(framework)
    a, b = rand(128, 64), rand(128, 64)
    if framework == "jax":
        out = _scaled_add(lib.numpy.asarray(a), lib.numpy.asarray(b))
        assert isinstance(out, lib.Array)
    else:
        out = _scaled_add(lib.from_numpy(a), lib.from_numpy(b))
        assert isinstance(out, lib.Tensor)
    np.testing.assert_allclose(np.asarray(out), a + 2.0 * b, rtol=1e-6)


def test_benchmark_refuses_annotations_it_cannot_read_as_inputs():
    import nkisim.nki.legacy.typing as nt

    k = nki.benchmark()(_nl_matmul.func)
    with pytest.raises(KernelError, match=r"input tensor\[128, 64\] has no dtype: give shape and dtype"):
        k(nt.tensor[128, 64], nt.tensor[[128, 256], nl.float32])
    with pytest.raises(KernelError, match=r"needs a shape of positive integers"):
        k(nt.tensor[["M", 64], nl.float32], nt.tensor[[128, 256], nl.float32])


def test_unsupported_function_says_why():
    @nki.jit
    def k(a):
        return nl.all_reduce(a, np.add, program_axes=[0])

    with pytest.raises(KernelError, match=r"all_reduce.*not supported"):
        k(rand(4, 4))


def test_alias_maps_neuronxcc_and_nki_side_by_side():
    nkisim.install_nki_alias()
    try:
        import neuronxcc.nki.isa as legacy_isa
        import neuronxcc.nki.language as legacy_nl
        import nki.language as current_nl

        assert legacy_nl is nl and legacy_isa is nisa
        assert current_nl is not legacy_nl
    finally:
        nkisim.uninstall_nki_alias()
    import sys

    assert "neuronxcc.nki" not in sys.modules


@nki.jit
def _scale_rows_by_column(x, a, j):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    column = nl.load(a[0 : x.shape[0], j])  # one value per partition
    assert tuple(column.shape) == (x.shape[0], 1)
    nl.store(out, nl.multiply(nl.load(x), column))
    return out


def test_a_column_load_is_a_partition_by_one_tile():
    x, a = rand(128, 16), rand(128, 5)
    np.testing.assert_allclose(_scale_rows_by_column(x, a, 3), x * a[:, 3:4], rtol=1e-6)


def test_static_cast_of_a_host_array_outside_a_kernel_casts_it():
    import ml_dtypes

    values = np.array([[1.0, 1.00390625, -2.5]], dtype=np.float64)
    cast = nl.static_cast(values, nl.bfloat16)
    assert cast.dtype == ml_dtypes.bfloat16
    # 1 + 2**-8 lies halfway between bfloat16's 1.0 and 1.0078125: it rounds to the even 1.0
    np.testing.assert_array_equal(cast.astype(np.float64), [[1.0, 1.0, -2.5]])


def test_an_output_argument_that_is_a_non_contiguous_torch_tensor_is_written():
    torch = pytest.importorskip("torch")
    a = rand(128, 64)
    out = torch.zeros(64, 128).T  # a transposed view: numpy gets a copy of it
    assert not out.is_contiguous()
    nki.jit(_writes_argument)(torch.from_numpy(a), out)
    np.testing.assert_allclose(out.numpy(), np.exp(a), rtol=1e-6)
