"""More constructs of the legacy ``neuronxcc.nki`` API, each against a numpy reference written here.

Negative tests check that the error names the kernel's file:line, the instruction, the
operand and the rule.
"""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nkisim
import nkisim.nki.legacy as nki
import nkisim.nki.legacy.compiler as ncc
import nkisim.nki.legacy.isa as nisa
import nkisim.nki.legacy.language as nl
from nkisim.errors import BoundsError, CapacityError, OperandError, ShapeError
from nkisim.frontend.legacy_launch import run_legacy
from nkisim.hw import load_target

RNG = np.random.default_rng(11)
HERE = r"test_legacy_constructs\.py:\d+: "


def rand(*shape, dtype=np.float32):
    return RNG.random(shape, dtype=np.float32).astype(dtype)


def opcodes(kernel, *args, target="trn1"):
    return [r.opcode for r in run_legacy(kernel, args, {}, target=target).profile.instructions]


# -- tiles as values: assignment and in-place operators --------------------------------


@nki.jit
def _assign_and_accumulate(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    t[...] = 2.0  # memset
    t += nl.load(a)  # tensor_tensor in place
    t *= 3.0  # tensor_scalar in place
    t -= nl.load(b[:, 0:1])  # a (P, 1) column: tensor_scalar in place
    c = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    c[...] = t  # tensor_copy
    nl.store(out, c)
    return out


def test_assignment_and_in_place_operators():
    a, b = rand(128, 64), rand(128, 8)
    expected = (np.float32(2) + a) * np.float32(3) - b[:, 0:1]
    np.testing.assert_allclose(_assign_and_accumulate(a, b), expected, rtol=1e-6)
    assert opcodes(_assign_and_accumulate, a, b).count("tensor_copy") == 1


@nki.jit
def _nl_matmul_accumulate(x, y):
    out = nl.ndarray((128, 256), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 256), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(x.shape[0] // 128):
        acc += nl.matmul(nl.load(x[k * 128 : (k + 1) * 128]), nl.load(y[k * 128 : (k + 1) * 128]), transpose_x=True)
    nl.store(out, acc)
    return out


def test_nl_matmul_accumulates_into_psum_with_one_matmul_per_step():
    x, y = rand(384, 128), rand(384, 256)
    np.testing.assert_allclose(_nl_matmul_accumulate(x, y), x.T.astype(np.float64) @ y, rtol=1e-5)
    assert opcodes(_nl_matmul_accumulate, x, y).count("nc_matmul") == 3


@nki.jit
def _returned_into(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    y = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    y[...] = nisa.activation(op=nl.exp, data=t)  # written into y, no copy
    nl.store(out, y)
    return out


def test_an_instruction_result_assigned_to_a_tile_writes_that_tile():
    x = rand(128, 32)
    np.testing.assert_allclose(_returned_into(x), np.exp(x), rtol=1e-6)
    assert opcodes(_returned_into, x) == ["dma_copy", "activation", "dma_copy"]


# -- nl.zeros in PSUM: the memset waits for the tile's first use ----------------------------


def _profile(kernel, *args):
    return run_legacy(kernel, args, {}).profile.instructions


@nki.jit
def _zeros_then_matmul(x, y):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    a, b = nl.load(x), nl.load(y)
    acc += nisa.nc_matmul(a, b)
    acc += nisa.nc_matmul(b[:, 0:128], b)
    nl.store(out, acc)
    return out


def test_a_matmul_accumulating_into_fresh_zeros_starts_the_accumulation():
    x, y = rand(128, 128), rand(128, 512)
    expected = x.T.astype(np.float64) @ y + y[:, 0:128].T.astype(np.float64) @ y
    np.testing.assert_allclose(_zeros_then_matmul(x, y), expected, rtol=1e-5)
    assert [r.opcode for r in _profile(_zeros_then_matmul, x, y)] == [
        "dma_copy", "dma_copy", "nc_matmul", "nc_matmul", "tensor_copy", "dma_copy"
    ]  # fmt: skip


@nki.jit
def _zeros_then_read(x):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 64), nl.float32, buffer=nl.psum)
    t = nl.load(x)
    acc += t  # reads acc: the zeros are needed
    nl.store(out, acc)
    return out


@nki.jit
def _zeros_then_copy(x):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 64), nl.float32, buffer=nl.psum)
    t = nl.load(x)
    nl.store(out, nl.copy(acc) + t)
    return out


@pytest.mark.parametrize("kernel", [_zeros_then_read, _zeros_then_copy])
def test_any_other_first_use_of_psum_zeros_issues_the_memset_just_before_it(kernel):
    x = rand(128, 64)
    np.testing.assert_allclose(kernel(x), x, rtol=0)
    ops = [(r.opcode, r.source) for r in _profile(kernel, x)]
    assert ops[0][0] == "dma_copy" and ops[1][0] == "memset"  # after the load, where the tile is first used
    zeros_line = kernel.func.__code__.co_firstlineno + 3  # after @nki.jit, def and out
    assert ops[1][1].endswith(f":{zeros_line}")
    assert [op for op, _ in ops].count("memset") == 1


@nki.jit
def _zeros_then_part_matmul(x, y):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    acc[:, 0:256] += nisa.nc_matmul(nl.load(x), nl.load(y))
    nl.store(out, acc)
    return out


def test_a_matmul_into_part_of_psum_zeros_keeps_the_memset_for_the_rest():
    x, y = rand(128, 128), rand(128, 256)
    expected = np.zeros((128, 512))
    expected[:, 0:256] = x.T.astype(np.float64) @ y
    np.testing.assert_allclose(_zeros_then_part_matmul(x, y), expected, rtol=1e-5)
    assert [r.opcode for r in _profile(_zeros_then_part_matmul, x, y)][:4] == [
        "dma_copy", "dma_copy", "memset", "nc_matmul"
    ]  # fmt: skip


@nki.jit
def _unused_zeros_and_sbuf_zeros(x):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    nl.zeros((128, 512), nl.float32, buffer=nl.psum)  # never used: never filled
    ones = nl.ones((128, 64), nl.float32, buffer=nl.psum)  # not zeros: filled at once
    s = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)  # SBUF: filled at once
    nl.store(out, nl.load(x) + s + ones)
    return out


def test_psum_zeros_never_used_cost_nothing_and_other_fills_stay_eager():
    x = rand(128, 64)
    np.testing.assert_allclose(_unused_zeros_and_sbuf_zeros(x), x + 1, rtol=1e-6)
    assert [r.opcode for r in _profile(_unused_zeros_and_sbuf_zeros, x)][:3] == ["memset", "memset", "dma_copy"]


@nki.jit
def _print_zeros(x):
    acc = nl.zeros((2, 3), nl.float32, buffer=nl.psum)
    nl.device_print("acc", acc)
    out = nl.ndarray((2, 3), nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.load(x))
    return out


def test_psum_zeros_hold_zeros_before_their_memset_is_issued(capsys):
    _print_zeros(rand(2, 3))
    assert "[[0. 0. 0.]\n [0. 0. 0.]]" in capsys.readouterr().out


# -- indices -----------------------------------------------------------------------------


@nki.jit
def _ds_and_whole_mgrid(x):
    out = nl.ndarray((128, 64), x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x[nl.ds(128, 128), nl.ds(64, 64)])
    nl.store(out[nl.mgrid[0:128, 0:64]], value=t)
    return out


def test_nl_ds_and_an_mgrid_used_whole_as_an_index():
    x = rand(256, 128)
    assert np.array_equal(_ds_and_whole_mgrid(x), x[128:, 64:])


@nki.jit
def _gather_scatter(x, idx):
    out = nl.ndarray((2 * idx.shape[0], x.shape[1]), x.dtype, buffer=nl.shared_hbm)
    rows = nl.load(idx)
    i_f = nl.arange(x.shape[1])[None, :]
    t = nl.load(x[rows, i_f])  # one row of x per partition (DMA gather)
    nl.store(out, nl.zeros(out.shape, x.dtype))
    nl.store(out[rows, i_f], value=t)  # and back, scattered
    return out


def test_indirect_rows_gather_and_scatter():
    x = rand(100, 48)
    idx = RNG.permutation(100)[:64].astype(np.int32)[:, None]
    expected = np.zeros((128, 48), np.float32)
    expected[idx[:, 0]] = x[idx[:, 0]]
    assert np.array_equal(_gather_scatter(x, idx), expected)


@nki.jit
def _dynamic(x, offsets):
    out = nl.ndarray((128, offsets.shape[1] * 4), x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    o = nl.load(offsets)
    gathered = nl.ndarray((128, offsets.shape[1] * 4), x.dtype, buffer=nl.sbuf)
    i_p, i_f = nl.mgrid[0:128, 0:4]
    for j in nl.affine_range(offsets.shape[1]):
        gathered[i_p, j * 4 + i_f] = nisa.tensor_copy_dynamic_src(t[i_p, o[0, j] + i_f])
    back = nl.zeros(x.shape, x.dtype)
    for j in nl.sequential_range(offsets.shape[1]):
        nisa.tensor_copy_dynamic_dst(dst=back[i_p, i_f + o[0, j]], src=gathered[i_p, j * 4 + i_f])
    nl.store(out, gathered)
    return out, _store(back)


def _store(t):
    out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
    nl.store(out, t)
    return out


@settings(max_examples=6, deadline=None)
@given(
    starts=st.lists(st.integers(0, 60), min_size=1, max_size=5),
    dtype=st.sampled_from([np.float32, ml_dtypes.bfloat16, np.int32]),
)
def test_run_time_offsets_gather_and_scatter_within_sbuf(starts, dtype):
    x = (RNG.random((128, 64)) * 100).astype(dtype)
    offsets = np.array([starts], dtype=np.int32)
    gathered, back = _dynamic(x, offsets)
    expected = np.concatenate([x[:, s : s + 4] for s in starts], axis=1)
    assert np.array_equal(gathered, expected)
    scattered = np.zeros_like(x)
    for s in starts:  # later copies win, as the sequential loop writes them in order
        scattered[:, s : s + 4] = x[:, s : s + 4]
    assert np.array_equal(back, scattered)


def test_a_run_time_offset_copy_costs_min_ii_dynamic():
    x, offsets = rand(128, 64), np.array([[3, 9]], dtype=np.int32)
    result = run_legacy(_dynamic, (x, offsets), {})
    dyn = [r for r in result.profile.instructions if r.opcode.startswith("tensor_copy_dynamic")]
    assert len(dyn) == 4
    clock = load_target("trn1").clock_ghz(nkisim.hw.Engine.vector)
    assert all(r.duration_ns == pytest.approx(600 / clock) for r in dyn)


@nki.jit
def _fp8_view(a):
    out = nl.ndarray(a.shape, nl.float8_e5m2, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, nl.float8_e5m2, buffer=nl.sbuf)
    i_p, i_f = nl.mgrid[0 : a.shape[0], 0 : a.shape[1]]
    t[i_p, i_f] = nl.load(a.view(nl.float8_e5m2))
    nl.store(out, t[i_p, i_f])
    return out


def test_views_of_fp8_tensors_by_index_expressions():
    raw = RNG.integers(0, 120, (128, 16), dtype=np.uint8)  # finite fp8 e5m2 bit patterns
    out = _fp8_view(raw)
    assert np.array_equal(out.view(np.uint8), raw)


# -- masks, predicates and broadcasting ---------------------------------------------------


@nki.jit
def _affine_select(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(x.shape[0])[:, None]
    i_f = nl.arange(x.shape[1])[None, :]
    nl.store(out, nisa.affine_select(i_p - i_f >= 0, nl.load(x), -1.0))
    return out


def test_affine_select_keeps_the_lower_triangle():
    x = rand(128, 96)
    assert np.array_equal(_affine_select(x), np.where(np.tri(128, 96, dtype=bool), x, np.float32(-1)))


@nki.jit
def _compare(a, b):
    out = nl.ndarray(a.shape, nl.uint8, buffer=nl.shared_hbm)
    c = nl.greater(nl.load(a), nl.load(b))
    assert c.dtype == nl.bool_
    nl.store(out, nl.copy(c, dtype=nl.uint8))
    return out


def test_comparisons_return_bool_tiles():
    a, b = rand(128, 40), rand(128, 40)
    assert np.array_equal(_compare(a, b), (a > b).astype(np.uint8))


@nki.jit
def _predicated(pred, a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    dst = nl.load(b)
    nisa.tensor_copy_predicated(src=nl.load(a), dst=dst, predicate=nl.load(pred))
    nl.store(out, dst)
    return out


def test_a_bool_predicate_is_read_as_uint8():
    a, b = rand(128, 64), rand(128, 64)
    pred = a > 0.5
    assert np.array_equal(_predicated(pred, a, b), np.where(pred, a, b))


@nki.jit
def _broadcast_add(a, b):
    out = nl.ndarray((a.shape[0], max(a.shape[1], b.shape[1])), nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(b)))
    return out


@settings(max_examples=10, deadline=None)
@given(
    pa=st.sampled_from([1, 32, 128]),
    fa=st.sampled_from([1, 64]),
    fb=st.sampled_from([1, 64]),
    swap=st.booleans(),
)
def test_add_broadcasts_like_numpy_across_partitions_and_free_dims(pa, fa, fb, swap):
    a, b = rand(pa, fa), rand(1, fb)
    if swap:
        a, b = b, a
    if a.shape[0] == 1 and b.shape[0] > 1:  # the output's partition dim is the larger one
        expected = b + a
        out = _broadcast_add(b, a)
    else:
        expected = a + b
        out = _broadcast_add(a, b)
    np.testing.assert_array_equal(out, expected)


@nki.jit
def _masked_add(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    inside = (i_p < 100) & (i_f >= 16)
    r = nl.add(nl.load(a), nl.load(b), mask=inside)
    assert r.shape == a.shape  # the full shape; only the mask's rectangle is written
    nl.store(out, r, mask=inside)
    return out


def test_a_masked_element_wise_result_holds_values_only_inside_the_mask():
    a, b = rand(128, 64), rand(128, 64)
    out = _masked_add(a, b)
    assert np.array_equal(out[:100, 16:], a[:100, 16:] + b[:100, 16:])


@nki.jit
def _hbm_blocks(a):
    out = nl.ndarray((2, nl.par_dim(128), 64), a.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(2):
        nl.store(out[b], value=nl.load(a[b]) * 2.0)
    return out


def test_par_dim_in_hbm_is_one_tensor():
    a = rand(2, 128, 64)
    out = _hbm_blocks(a)
    assert isinstance(out, np.ndarray) and np.array_equal(out, a * 2)


@nki.jit
def _local_gather(src, index):
    out = nl.ndarray((128, 64, 2), src.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.local_gather(nl.load(src), nl.load(index), 2))
    return out


def test_local_gather_result_is_valid_indices_by_elements():
    src = rand(128, 32, 2)
    per_core = RNG.integers(0, 32, (16, 4)).astype(np.uint16)
    index = np.tile(per_core, (8, 1))
    out = _local_gather(src, index * 2)
    expected = np.empty((128, 64, 2), np.float32)
    for core in range(8):
        part = slice(16 * core, 16 * (core + 1))
        expected[part] = np.take(src[part], index[part].flatten(order="F"), axis=1)
    assert np.array_equal(out, expected)


# -- launches, decorators and compiler hints ------------------------------------------------


@nki.jit
def _grid(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    nl.store(out[i], value=nl.load(a[i]) + float(i))
    return out


def test_nc_times_n_grid_places_the_outer_factor_on_cores():
    a = rand(4, 128, 16)
    result = run_legacy(_grid[nl.nc(2) * 2], (a,), {}, target="trn2")
    assert np.array_equal(result.outputs, a + np.arange(4, dtype=np.float32)[:, None, None])
    assert [p.core for p in result.programs] == [0, 0, 1, 1]


def test_trace_baremetal_and_jit_modes_all_simulate():
    def body(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.exp(nl.load(a)))
        return out

    a = rand(128, 8)
    for kernel in (nki.trace(body), nki.baremetal(body), nki.jit(body, mode="torchxla"), nki.jit(mode="jax")(body)):
        np.testing.assert_allclose(kernel(a), np.exp(a), rtol=1e-6)


def test_profile_writes_a_perfetto_trace(tmp_path):
    trace = tmp_path / "k.json"

    @nki.profile(save_trace_name=str(trace))
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a))
        return out

    a = rand(128, 8)
    assert np.array_equal(k(a), a)
    assert trace.stat().st_size > 0 and k.profile.total_ns > 0


def test_compiler_allocation_hints_are_accepted_without_effect():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        with ncc.allocation_scope():
            t = nl.ndarray(a.shape, a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
            t[...] = nl.load(a)
        nl.store(out, t)
        return out

    a = rand(128, 8)
    assert np.array_equal(k(a), a)
    assert nl.fp32.min == np.finfo(np.float32).min


def test_a_kernel_that_fits_only_with_liveness_is_retried_and_runs():
    cols = load_target("trn1").sbuf.bytes_per_partition // 4 // 4 + 16  # a little over a quarter of SBUF

    @nki.jit
    def k(a):
        out = nl.ndarray((6, 128, cols), a.dtype, buffer=nl.shared_hbm)
        kept = []
        for i in range(6):
            t = nl.full((128, cols), float(i + 1), nl.float32)
            kept.append(t)  # still reachable after its last use below
            nl.store(out[i], t)
        return out

    out = k(rand(1, 1))
    assert np.array_equal(out, np.broadcast_to(np.arange(1, 7, dtype=np.float32)[:, None, None], out.shape))


def test_a_kernel_that_does_not_fit_even_with_liveness_and_may_not_spill_reports_capacity():
    cols = load_target("trn1").sbuf.bytes_per_partition // 4 // 4 + 16

    @nki.jit(spill=False)
    def k(a):
        out = nl.ndarray((128, cols), nl.float32, buffer=nl.shared_hbm)
        tiles = [nl.full((128, cols), 1.0, nl.float32) for _ in range(6)]
        total = tiles[0]
        for t in tiles[1:]:
            total = total + t  # every tile is live until here
        nl.store(out, total)
        return out

    with pytest.raises(CapacityError, match=HERE):
        k(rand(1, 1))


# -- errors name the line, the instruction, the operand and the rule ------------------------


def _run(body, *args):
    nki.jit(body)(*args)


def test_a_triangular_mask_is_refused():
    def k(a):
        i_p, i_f = nl.mgrid[0:128, 0:64]
        nl.exp(nl.load(a), mask=(i_p >= i_f))

    with pytest.raises(OperandError, match=HERE + r"nl\.exp: mask does not hold on a rectangle"):
        _run(k, rand(128, 64))


def test_a_non_affine_index_is_refused():
    def k(a):
        i_p, i_f = nl.mgrid[0:128, 0:64]
        nl.load(a[i_p, i_f % 4])

    with pytest.raises(OperandError, match=HERE + r"a\[\.\.\.\]: the index expressions on .*a: .* are not affine"):
        _run(k, rand(128, 64))


def test_python_and_on_predicates_is_refused():
    def k(a):
        i_p, i_f = nl.mgrid[0:128, 0:64]
        nl.exp(nl.load(a), mask=(i_p < 64 and i_f < 32))

    with pytest.raises(OperandError, match=HERE + r".*no single truth value: combine predicates with & and \|"):
        _run(k, rand(128, 64))


def test_a_static_source_for_tensor_copy_dynamic_src_is_refused():
    def k(a):
        nisa.tensor_copy_dynamic_src(nl.load(a))

    with pytest.raises(OperandError, match=HERE + r"nisa\.tensor_copy_dynamic_src \[Vector, trn1\]: src must be "):
        _run(k, rand(128, 64))


def test_a_run_time_offset_on_the_partition_dim_is_refused():
    def k(a, o):
        t, off = nl.load(a), nl.load(o)
        i_p, i_f = nl.mgrid[0:1, 0:64]
        nisa.tensor_copy_dynamic_src(t[off[0, 0] + i_p, i_f])

    with pytest.raises(OperandError, match=HERE + r"sbuf\d+\[\.\.\.\]: a run-time offset cannot index the partition"):
        _run(k, rand(128, 64), np.zeros((1, 1), np.int32))


def test_a_float_offset_tile_is_refused():
    def k(a, o):
        t, off = nl.load(a), nl.load(o)
        i_p, i_f = nl.mgrid[0:128, 0:8]
        nisa.tensor_copy_dynamic_src(t[i_p, off[0, 0] + i_f])

    with pytest.raises(OperandError, match=HERE + r"index expression: tile must be one integer value"):
        _run(k, rand(128, 64), np.zeros((1, 1), np.float32))


def test_a_run_time_offset_past_the_partition_is_a_bounds_error_at_the_copy():
    def k(a, o):
        t, off = nl.load(a), nl.load(o)
        i_p, i_f = nl.mgrid[0:128, 0:8]
        r = nisa.tensor_copy_dynamic_src(t[i_p, off[0, 0] + i_f])  # the line the error names
        nl.store(nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm), r)

    with pytest.raises(BoundsError, match=HERE + r"nisa\.tensor_copy_dynamic_src: scalar_offset 60 .*outside"):
        _run(k, rand(128, 64), np.full((1, 1), 60, np.int32))
    try:
        _run(k, rand(128, 64), np.full((1, 1), 60, np.int32))
    except BoundsError as exc:
        with open(exc.loc.file) as source:
            assert "r = nisa.tensor_copy_dynamic_src" in source.read().splitlines()[exc.loc.line - 1]


def test_partition_dims_that_do_not_broadcast_are_refused():
    def k(a, b):
        nl.add(nl.load(a), nl.load(b))

    with pytest.raises(ShapeError, match=HERE + r"nl\.add \[trn1\]: partition dims 128 and 2 differ"):
        _run(k, rand(128, 64), rand(2, 64))
