"""The nl helpers that move and create tiles (load, store, ndarray), nc_matmul accumulation, and nki.simulate.

Expected values are numpy formulas written in the tests from the NKI documentation.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nl_reference import (
    BF16,
    FP32,
    TARGETS,
    assert_same,
    f32,
    ref_cast,
    run_helper,
    values,
)

import nkisim
import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim import CapacityError, MemoryKindError, OperandError, ShapeError
from nkisim.hw import load_target

# -- load, store, creation ------------------------------------------------------------


def test_load_and_store_are_dma_copies():
    x = values(np.random.default_rng(12), (64, 32), FP32)

    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, nl.bfloat16, buffer=nl.shared_hbm)
        tile = nl.load(a, dtype=nl.bfloat16)
        assert tile.buffer == nl.sbuf and tile.dtype == nl.bfloat16
        nl.store(out, tile)
        return out

    run = nkisim.run(kernel, [x])
    assert [i.opcode for i in run.profile.instructions] == ["dma_copy", "dma_copy"]
    assert_same(run.outputs, x.astype(BF16))


def test_load_rejects_non_tensors_and_store_hbm_values():
    with pytest.raises(OperandError, match=r"nl\.load \[trn1\]: src must be an HBM tensor, got ndarray"):
        nkisim.run(lambda a: nl.load(np.ones((2, 2))), [np.ones((2, 2), np.float32)])
    with pytest.raises(MemoryKindError, match=r"value is in hbm"):
        nkisim.run(lambda a: nl.store(a, a), [np.ones((2, 2), np.float32)])


def test_elementwise_rejects_hbm_and_scalar_pairs_and_partition_broadcast():
    a = np.ones((4, 4), np.float32)
    with pytest.raises(MemoryKindError, match=r"nl\.add \[trn1\]: x is in hbm .* nl\.load"):
        nkisim.run(lambda h: nl.add(h, 1.0), [a])
    with pytest.raises(OperandError, match="both scalars"):
        run_helper(lambda t: nl.add(1.0, 2.0), [a])
    with pytest.raises(ShapeError, match="partition dims 1 and 4 differ; broadcast across partitions"):
        run_helper(lambda t, r: nl.add(r, t), [a, a[0:1]])
    with pytest.raises(ShapeError, match="differ in rank"):
        run_helper(lambda t: nl.add(t, t.reshape((4, 2, 2))), [a])


def test_creation_helpers():
    def body(a):
        full = nl.full((8, 4), 2.5, nl.bfloat16)
        ones = nl.ones((8, 4), nl.int32)
        zeros = nl.zeros_like(a)
        empty = nl.empty_like(a, dtype=nl.float16)
        assert empty.shape == a.shape and empty.dtype == nl.float16 and empty.buffer == nl.sbuf
        return full, ones, zeros

    out, ops = run_helper(body, [np.ones((8, 4), np.float32)])
    assert ops == ["memset", "memset", "memset"]
    assert_same(out[0], np.full((8, 4), 2.5, BF16))
    assert_same(out[1], np.ones((8, 4), np.int32))
    assert_same(out[2], np.zeros((8, 4), np.float32))


def test_full_in_hbm_issues_no_instruction():
    def kernel():
        return nl.full((3, 5), 7, nl.int16, buffer=nl.shared_hbm)

    run = nkisim.run(kernel)
    assert run.profile.instructions == []
    assert_same(run.outputs, np.full((3, 5), 7, np.int16))


def test_expand_dims_and_no_reorder():
    def body(a):
        with nl.no_reorder():
            s = nl.sum(a, axis=1)
        e = nl.expand_dims(s, 1)
        assert e.shape == (8, 1, 1)
        return e

    out, ops = run_helper(body, [np.ones((8, 3), np.float32)])
    assert ops == ["tensor_reduce"]
    assert_same(out, np.full((8, 1, 1), 3, np.float32))


# -- nc_matmul(accumulate=) -----------------------------------------------------------


def _matmul_sequence(modes, init=None, check=None):
    """Matmuls of x.T @ y_i into one PSUM tile with the given accumulate modes; optional memset first."""
    rng = np.random.default_rng(13)
    x = values(rng, (32, 16), FP32)
    ys = [values(rng, (32, 8), FP32) for _ in modes]

    def kernel(xh, *yh):
        xt = nl.load(xh)
        acc = nl.ndarray((16, 8), nl.float32, buffer=nl.psum)
        if init is not None:
            nisa.memset(dst=acc, value=init)
        for mode, y in zip(modes, yh):
            kwargs = {} if mode == "default" else {"accumulate": mode}
            nisa.nc_matmul(acc, xt, nl.load(y), **kwargs)
        out = nl.ndarray((16, 8), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.copy(acc))
        return out

    products = [f32(x).T.astype(np.float64) @ f32(y) for y in ys]
    return nkisim.run(kernel, [x, *ys], check=check).outputs, products


def test_accumulate_none_overwrites_first_then_adds():
    out, p = _matmul_sequence(["default", "default", "default"])
    assert_same(out, (p[0] + p[1] + p[2]).astype(np.float32), rtol=1e-6)


def test_accumulate_false_overwrites_even_after_earlier_matmuls():
    out, p = _matmul_sequence(["default", "default", False, "default"])
    assert_same(out, (p[2] + p[3]).astype(np.float32), rtol=1e-6)


def test_accumulate_true_adds_to_whatever_is_there():
    with pytest.warns(nkisim.CheckWarning, match=r"another engine wrote.*\[psum-accumulate\]"):  # trn1: undefined
        out, p = _matmul_sequence([True, True], init=1.0)
    assert_same(out, (1.0 + p[0] + p[1]).astype(np.float32), rtol=1e-6)


def test_accumulate_i_greater_than_zero_loop_idiom():
    out, p = _matmul_sequence([False, True, True], init=5.0)
    assert_same(out, (p[0] + p[1] + p[2]).astype(np.float32), rtol=1e-6)


def test_accumulate_true_on_fresh_psum_shows_the_undefined_read():
    with pytest.raises(nkisim.CheckError, match=r"accumulates onto 128 of the 128 elements of PSUM tile"):
        _matmul_sequence([True], check="strict")
    with pytest.warns(nkisim.CheckWarning, match=r"\[uninitialized-read\]"):
        out, _ = _matmul_sequence([True], check="warn")
    assert np.isnan(out).all()  # never-written PSUM is poisoned with NaN


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_inferred_accumulation_belongs_to_the_tile_not_its_bytes(target):
    """Tiles placed at one PSUM address, all allocated up front: each tile's first matmul overwrites.

    The bytes still hold the previous tile's sum; adding to it would mix the two groups.
    """
    rng = np.random.default_rng(5)
    x = values(rng, (32, 16), FP32)
    ys = [values(rng, (32, 8), FP32) for _ in range(4)]

    def kernel(xh, *yh):
        xt = nl.load(xh)
        groups = [nl.ndarray((16, 8), nl.float32, buffer=nl.psum, address=(0, 0)) for _ in range(2)]
        out = nl.ndarray((2, 16, 8), nl.float32, buffer=nl.shared_hbm)
        for g, acc in enumerate(groups):
            for y in yh[2 * g : 2 * g + 2]:
                nisa.nc_matmul(acc[...], xt, nl.load(y))
            nisa.dma_copy(dst=out[g], src=nl.copy(acc))
        return out

    p = [f32(x).T.astype(np.float64) @ f32(y) for y in ys]
    expected = np.stack([p[0] + p[1], p[2] + p[3]]).astype(np.float32)
    assert_same(nkisim.run(kernel, [x, *ys], target=target).outputs, expected, rtol=1e-6)


# -- nl.ndarray(address=) -------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_address_places_the_tile(target):
    def kernel():
        a = nl.ndarray((64, 32), nl.float32, address=(64, 1024))
        b = nl.ndarray((64, 32), nl.float32, address=(0, 1024))  # same bytes, other partitions
        c = nl.ndarray((128, 16), nl.float32, buffer=nl.psum, address=(0, 2048))
        # (first partition, end partition, first byte, end byte) within the partitions
        assert a.row_box == (64, 128, 1024, 1024 + 32 * 4)
        assert b.row_box == (0, 64, 1024, 1024 + 32 * 4)
        assert c.row_box == (0, 128, 2048, 2048 + 16 * 4)
        nisa.memset(dst=a, value=1.0)
        nisa.memset(dst=b, value=2.0)
        d = nl.ndarray((128, 2048), nl.float32)  # the allocator keeps clear of placed tiles
        nisa.memset(dst=d, value=3.0)
        out = nl.ndarray((128, 32), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[0:64], src=b)
        nisa.dma_copy(dst=out[64:128], src=a)
        return out

    expected = np.concatenate([np.full((64, 32), 2.0), np.full((64, 32), 1.0)]).astype(np.float32)
    assert_same(nkisim.run(kernel, target=target).outputs, expected)


def test_address_overlap_is_a_capacity_error_until_the_tile_is_freed():
    def kernel():
        a = nl.ndarray((128, 64), nl.float32)  # placed by the allocator (explicit tiles may alias each other)
        at = a.byte_offset + 104
        with pytest.raises(CapacityError, match=rf"SBUF address \(partition 100, byte {at}\) .* overlaps live"):
            nl.ndarray((8, 4), nl.float32, address=(100, at))
        nl.ndarray((8, 4), nl.float32, address=(100, a.byte_offset + 256))  # just past a: fine
        del a
        nl.ndarray((8, 4), nl.float32, address=(100, at))  # a is gone

    nkisim.run(kernel)


def test_an_address_is_checked_against_every_automatic_tile_its_bytes_meet():
    def kernel():
        a = nl.ndarray((128, 64), nl.float32)  # 256 bytes a partition
        b = nl.ndarray((128, 64), nl.float32)
        assert b.byte_offset == a.byte_offset + 256  # next fit: right after a
        for at, other in [(a.byte_offset + 252, a), (b.byte_offset + 255, b)]:  # the last bytes of a (and b's first)
            with pytest.raises(CapacityError, match=rf"byte {at}\) .* overlaps live {other.name}"):
                nl.ndarray((128, 2), nl.float32, address=(0, at))
        nl.ndarray((128, 2), nl.float32, address=(0, b.byte_offset + 256))  # past both
        nl.ndarray((64, 2), nl.float32, address=(0, b.byte_offset + 4096))  # far from both

    nkisim.run(kernel)


@pytest.mark.parametrize(
    ("shape", "buffer", "address", "error", "message"),
    [
        ((128, 16), "psum", (0, 1024), OperandError, "must be on a 2048-byte bank boundary"),
        ((64, 16), "sbuf", (100, 0), CapacityError, "64 partitions from partition 100 exceed the 128"),
        ((128, 16), "sbuf", (0, 196600), CapacityError, "exceed the 196608 bytes"),
        ((128, 16), "sbuf", (0, -64), OperandError, "must not be negative"),
        ((128, 16), "sbuf", (0,), OperandError, r"must be \(partition_offset, free_offset\)"),
        ((128, 16), "shared_hbm", (0, 0), OperandError, "places SBUF or PSUM tensors"),
    ],
)
def test_bad_addresses(shape, buffer, address, error, message):
    with pytest.raises(error, match=message):
        nkisim.run(lambda: nl.ndarray(shape, nl.float32, buffer=buffer, address=address), target="trn1")


@pytest.mark.parametrize("target", TARGETS)
def test_a_partition_holds_its_bytes_and_no_more_whatever_the_host_pads(target):
    """A tile of a whole SBUF partition fits, at byte 0, and not 512 bytes further on. The host lays partitions
    out a little longer, so that a tile's rows do not all fall in the same sets of the CPU's caches: its
    partition stride is no multiple of 4 KiB (every generation's partition is)."""
    size = load_target(target).sbuf.bytes_per_partition
    assert size % 4096 == 0

    def kernel():
        whole = nl.ndarray((128, size // 4), nl.float32)
        assert whole.row_box == (0, 128, 0, size)
        assert whole.array.strides[0] > size and whole.array.strides[0] % 4096 != 0
        nisa.memset(dst=whole, value=5.0)
        out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=whole[:, size // 4 - 8 :])
        del whole
        with pytest.raises(CapacityError, match=f"{size} bytes per partition from byte 512 exceed the {size} bytes"):
            nl.ndarray((128, size // 4), nl.float32, address=(0, 512))
        return out

    assert_same(nkisim.run(kernel, target=target).outputs, np.full((128, 8), 5.0, np.float32))


# -- nki.simulate ---------------------------------------------------------------------


@nki.jit
def _scaled_add(a, b, scale=2.0):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.multiply(nl.add(nl.load(a), nl.load(b)), scale))
    return out


def _legacy_exp(a, out):
    nl.store(out, nl.exp(nl.load(a)))


def test_simulate_numpy_in_numpy_out_and_profiles():
    a, b = values(np.random.default_rng(14), (64, 32), FP32), np.ones((64, 32), np.float32)
    with nkisim.collect_profiles() as profiles:
        out = nki.simulate(_scaled_add)(a, b, scale=0.5)
    assert isinstance(out, np.ndarray)
    assert_same(out, ref_cast((f32(a) + 1) * 0.5, FP32))
    assert [i.opcode for i in profiles[0].instructions] == [
        "dma_copy",
        "dma_copy",
        "tensor_tensor",
        "tensor_scalar",
        "dma_copy",
    ]


def test_simulate_writes_back_inputs_the_kernel_wrote():
    a = values(np.random.default_rng(15), (16, 8), FP32)
    out = np.zeros((16, 8), np.float32)
    frozen = a.copy()
    assert nki.simulate(_legacy_exp)(a, out) is None
    assert_same(out, np.exp(frozen))
    assert_same(a, frozen)


def test_simulate_target_and_plain_functions():
    x = np.ones((8, 8), np.float32)
    with nkisim.collect_profiles() as profiles:
        nki.simulate(lambda t: _scaled_add(t, t), target="trn2")(x)
    assert profiles[0].target == "trn2"


def test_simulate_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    a = torch.arange(128.0, dtype=torch.float32).reshape(16, 8)
    out = nki.simulate(_scaled_add)(a, a)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert torch.equal(out, 4 * a)
    dst = torch.zeros(16, 8, dtype=torch.bfloat16)
    nki.simulate(_legacy_exp)(a.to(torch.bfloat16) / 64, dst)
    expected = ref_cast(
        np.exp(f32((np.arange(128.0).reshape(16, 8).astype(BF16).astype(np.float32) / 64).astype(BF16))), BF16
    )
    assert torch.equal(dst.float(), torch.from_numpy(expected.astype(np.float32)))


def test_simulate_forwards_a_launch_grid():
    def halves(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        pid, half = nl.program_id(0), a.shape[0] // 2
        rows = slice(pid * half, (pid + 1) * half)
        nl.store(out[rows], nl.multiply(nl.load(a[rows]), float(pid + 1)))
        return out

    out = nki.simulate(halves, target="trn2")[2](np.ones((8, 4), np.float32))
    assert_same(out, np.repeat([[1.0], [2.0]], 4, axis=0).repeat(4, axis=1).astype(np.float32))


def test_bad_dtype_and_expand_dims_axis():
    x = np.ones((4, 4), np.float32)
    with pytest.raises(nkisim.DtypeError, match=r"nl\.exp \[trn1\]: dtype 'float64' is not an NKI data type"):
        run_helper(lambda a: nl.exp(a, dtype="float64"), [x])
    with pytest.raises(ShapeError, match=r"nl\.expand_dims \[trn1\]: axis 0 is not a free position of \[4, 4\]"):
        run_helper(lambda a: nl.expand_dims(a, 0), [x])
    with pytest.raises(OperandError, match="an integer axis"):
        run_helper(lambda a: nl.expand_dims(a, 1.5), [x])


@given(
    n=st.integers(0, 5000),
    chunk=st.sampled_from([1, 7, 64, 1 << 20]),
    flip=st.one_of(st.none(), st.integers(0, 4999)),
    dtype=st.sampled_from([np.float32, np.uint8, ml_dtypes.bfloat16]),
)
@settings(deadline=None)  # 20,000 one-byte chunks take ~200 ms on a loaded 2-core machine
def test_bytes_differ_compares_every_byte_bit_exactly_in_chunks(n, chunk, flip, dtype):
    """Against the bytes themselves: a one-bit change anywhere is a difference; NaN equals its own bits."""
    from nkisim.memory.views import bytes_differ

    rng = np.random.default_rng(n)
    a = rng.integers(0, 256, n * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype)
    b = a.copy()
    if flip is not None and flip < n:
        b.view(np.uint8)[flip * np.dtype(dtype).itemsize] ^= 1
    assert bytes_differ(a, b, chunk) == (a.tobytes() != b.tobytes())
    assert not bytes_differ(a, a.copy(), chunk)
    assert bytes_differ(a, np.concatenate([a, np.zeros(1, dtype)]), chunk)  # another shape
    two = np.stack([a, b])[:, ::2]  # not contiguous: the C-order bytes
    assert bytes_differ(two[0], two[1], chunk) == (two[0].tobytes() != two[1].tobytes())


def test_bytes_differ_tells_signed_zeros_and_nan_payloads_apart():
    from nkisim.memory.views import bytes_differ

    zeros = np.array([0.0, 1.0], np.float32)
    assert bytes_differ(zeros, np.array([-0.0, 1.0], np.float32))
    quiet = np.array([np.nan], np.float32)
    other = np.array([0x7FC00001], np.uint32).view(np.float32)
    assert bytes_differ(quiet, other) and not bytes_differ(quiet, quiet.copy())
    assert bytes_differ(np.zeros(4, np.float32), np.zeros(8, np.float16))  # same bytes, another shape


@pytest.mark.parametrize(
    ("shape", "rule"),
    [
        ((0, 64), r"shape \(0, 64\) must be positive integers"),
        ((128, -1), r"shape \(128, -1\) must be positive integers"),
        ((128, 1.5), r"shape \(128, 1\.5\) must be positive integers"),
        ((128, 4, 0), r"shape \(128, 4, 0\) must be positive integers"),
        ((129, 4), r"partition dim 129 exceeds 128"),
        ((128,), r"sbuf tensors need a partition dim and a free dim, got shape \[128\]"),
    ],
)
def test_a_tile_shape_that_is_not_positive_integers_is_a_shape_error_at_its_line(shape, rule):
    @nki.jit
    def kernel():
        nl.ndarray(shape, nl.float32, buffer=nl.sbuf)

    with pytest.raises(ShapeError, match=r"test_nl_memory\.py:\d+: nl\.ndarray: " + rule):
        nkisim.run(kernel, [])


@pytest.mark.parametrize("name", ["float32", "tfloat32", "bfloat16", "float8_e4m3", "int32"])
def test_a_tile_keeps_the_nl_dtype_it_was_given_metadata_included(name):
    given_dtype = getattr(nl, name)

    @nki.jit
    def kernel():
        t = nl.ndarray((4, 4), given_dtype, buffer=nl.sbuf)
        assert t.dtype == given_dtype and t.dtype.metadata == given_dtype.metadata  # tfloat32 is float32 + a tag

    nkisim.run(kernel, [])
