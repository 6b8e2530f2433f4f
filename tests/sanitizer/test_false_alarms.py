"""Legal kernels the sanitizer must accept: ``check="strict"`` runs them with no finding.

Each kernel here does something NKI and the hardware allow that a too-eager check
would report. The outputs are compared with numpy references computed from the inputs,
so a kernel that silently stopped working would fail too.

Carrying never-written values: reading on-chip memory nothing wrote is only a bug if
the values are used. Copies, transposes, on-chip DMAs, sendrecv and nonzero_with_count
move (or compute per partition on) whatever is there; a kernel may move a whole tile
and use only the part it filled. The finding comes when the carried values are used,
at the line that first read them (the negative tests below check that).
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import nkisim
import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim import CheckError, CheckWarning

P = 128


def _strict(kernel, inputs, target):
    """Run under strict with warnings turned into errors; the result must have no finding."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckWarning)
        result = nkisim.run(kernel, inputs, target=target, check="strict")
    assert result.profile.diagnostics == ()
    return result


def _line(kernel, marker: str) -> int:
    import inspect

    lines, start = inspect.getsourcelines(kernel)
    hits = [start + i for i, text in enumerate(lines) if text.rstrip().endswith(f"# {marker}")]
    assert len(hits) == 1
    return hits[0]


# -- a transpose of a partly filled tile, of which only the filled part is used --------


def transpose_then_use_filled_rows(a):
    """``a`` [P, 2]: columns 0 and 32 of a [P, P] tile are filled, the whole tile transposed."""
    wide = nl.ndarray((P, P), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=wide[:, 0:1], src=a[:, 0:1])
    nisa.dma_copy(dst=wide[:, 32:33], src=a[:, 1:2])
    flipped = nl.ndarray((P, P), nl.float32, buffer=nl.psum)
    nisa.nc_transpose(dst=flipped, data=wide)
    rows = nl.ndarray((P, P), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=rows, src=flipped)
    doubled = nl.ndarray((1, P), nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=doubled, data=rows[32:33, :], op0=nl.multiply, operand0=2.0)
    out = nl.ndarray((2, P), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[0:1], src=rows[0:1, :])
    nisa.dma_copy(dst=out[1:2], src=doubled)
    return out


def matmul_transpose_then_use_filled_rows(a):
    """The same with a Tensor Engine transpose through an identity matrix (``is_transpose``)."""
    wide = nl.ndarray((P, P), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=wide[:, 0:1], src=a[:, 0:1])
    nisa.dma_copy(dst=wide[:, 32:33], src=a[:, 1:2])
    identity = nl.shared_identity_matrix(P, dtype=nl.float32)
    flipped = nl.ndarray((P, P), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=flipped, stationary=wide, moving=identity, is_transpose=True)
    rows = nl.ndarray((P, P), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=rows, src=flipped)
    doubled = nl.ndarray((1, P), nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=doubled, data=rows[32:33, :], op0=nl.multiply, operand0=2.0)
    out = nl.ndarray((2, P), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[0:1], src=rows[0:1, :])
    nisa.dma_copy(dst=out[1:2], src=doubled)
    return out


@pytest.mark.parametrize("kernel", [transpose_then_use_filled_rows, matmul_transpose_then_use_filled_rows])
@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_a_transposed_partly_filled_tile_is_fine_when_only_filled_rows_are_used(kernel, target):
    a = np.random.default_rng(3).uniform(-2, 2, (P, 2)).astype(np.float32)
    out = _strict(kernel, [a], target).outputs
    np.testing.assert_allclose(out[0], a[:, 0], rtol=1e-6)
    np.testing.assert_allclose(out[1], 2 * a[:, 1], rtol=1e-6)


def transpose_then_use_every_row(a):
    wide = nl.ndarray((P, P), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=wide[:, 0:1], src=a[:, 0:1])
    flipped = nl.ndarray((P, P), nl.float32, buffer=nl.psum)
    nisa.nc_transpose(dst=flipped, data=wide)  # first read
    rows = nl.ndarray((P, P), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=rows, src=flipped)
    top = nl.ndarray((P, 8), nl.float32, buffer=nl.sbuf)
    nisa.max8(dst=top, src=rows)  # use
    out = nl.ndarray((P, 8), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=top)
    return out


def test_carried_values_that_are_used_are_reported_at_the_first_read_naming_the_use():
    a = np.ones((P, 4), np.float32)
    first, use = _line(transpose_then_use_every_row, "first read"), _line(transpose_then_use_every_row, "use")
    with pytest.raises(CheckError) as info:
        nkisim.run(transpose_then_use_every_row, [a], target="trn2", check="strict")
    message = str(info.value)
    assert info.value.check == "uninitialized-read"
    assert message.startswith(f"test_false_alarms.py:{first}: nisa.nc_transpose [trn2]: data reads 16256 of the 16384")
    assert re.search(rf"nisa\.max8 at test_false_alarms\.py:{use} uses them \(src\)", message)


def copy_half_then_store_all(a):
    half = nl.ndarray((P, 8), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=half[:, 0:4], src=a)
    moved = nl.ndarray((P, 8), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=moved, src=half)  # first read
    out = nl.ndarray((P, 8), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=moved)  # use
    return out


def test_carried_values_stored_to_hbm_are_reported_in_warn_mode_too():
    a = np.ones((P, 4), np.float32)
    first = _line(copy_half_then_store_all, "first read")
    use = _line(copy_half_then_store_all, "use")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        profile = nkisim.run(copy_half_then_store_all, [a], target="trn2", check="warn").profile
    (finding,) = profile.diagnostics
    assert (finding.check, finding.loc.line) == ("uninitialized-read", first)
    assert f"nisa.dma_copy at test_false_alarms.py:{use} uses them (src)" in finding.message


def reread_a_view_after_carrying_into_it(a):
    x = nl.ndarray((P, 8), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x[:, 0:4], src=a)
    early = nl.ndarray((P, 4), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=early, src=x[:, 0:4])  # the view is all written here
    blank = nl.ndarray((P, 4), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=x[:, 0:4], src=blank)  # first read
    late = nl.ndarray((P, 4), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=late, data1=x[:, 0:4], data2=early, op=nl.add)  # carries them on
    out = nl.ndarray((P, 4), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=late)  # use
    return out


def reread_a_stepped_view_after_carrying_into_it(a):
    x = nl.ndarray((P, 8), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x[:, 0:8:2], src=a)
    early = nl.ndarray((P, 4), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=early, src=x[:, 0:8:2])  # the view is all written here
    blank = nl.ndarray((P, 4), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=x[:, 0:8:2], src=blank)  # first read
    late = nl.ndarray((P, 4), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=late, data1=x[:, 0:8:2], data2=early, op=nl.add)  # carries them on
    out = nl.ndarray((P, 4), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=late)  # use
    return out


@pytest.mark.parametrize("kernel", [reread_a_view_after_carrying_into_it, reread_a_stepped_view_after_carrying_into_it])
def test_a_view_found_written_is_checked_again_after_never_written_values_are_carried_into_it(kernel):
    a = np.ones((P, 4), np.float32)
    first, use = _line(kernel, "first read"), _line(kernel, "use")
    with pytest.raises(CheckError) as info:
        nkisim.run(kernel, [a], target="trn2", check="strict")
    message = str(info.value)
    assert message.startswith(f"test_false_alarms.py:{first}: nisa.tensor_copy [trn2]: src reads 512 of the 512")
    assert f"nisa.dma_copy at test_false_alarms.py:{use} uses them (src)" in message


# -- elementwise work on a whole tile whose unfilled half is overwritten before use -----------


def round_whole_tile_then_mirror(a):
    """``a`` [64, 8]: partitions 0..63 of a [P, 8] tile are filled; the whole tile is rounded through
    int32 and scaled, then partitions 64..127 are overwritten with a copy of 0..63 and all are stored."""
    x = nl.ndarray((P, 8), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x[0:64], src=a)
    shifted = nl.ndarray((P, 8), nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=shifted, data=x, op0=nl.add, operand0=0.25)
    whole = nl.ndarray((P, 8), nl.int32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=whole, src=shifted)
    scaled = nl.ndarray((P, 8), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=scaled, data1=whole, data2=x, op=nl.multiply)
    nisa.tensor_copy(dst=scaled[64:128], src=scaled[0:64])
    out = nl.ndarray((P, 8), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=scaled)
    return out


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_elementwise_work_on_unfilled_partitions_is_fine_when_they_are_overwritten_before_use(target):
    a = np.random.default_rng(11).integers(-40, 40, (64, 8)).astype(np.float32)
    half = np.rint(a + 0.25).astype(np.int32).astype(np.float32) * a
    expected = np.concatenate([half, half])
    np.testing.assert_array_equal(_strict(round_whole_tile_then_mirror, [a], target).outputs, expected)


def scale_whole_tile_then_store(a):
    x = nl.ndarray((P, 8), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x[0:64], src=a)
    y = nl.ndarray((P, 8), nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=y, data=x, op0=nl.multiply, operand0=3.0)  # first read
    out = nl.ndarray((P, 8), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=y)  # use
    return out


def test_elementwise_results_of_unfilled_partitions_are_reported_when_stored():
    first, use = _line(scale_whole_tile_then_store, "first read"), _line(scale_whole_tile_then_store, "use")
    with pytest.raises(
        CheckError,
        match=f"^test_false_alarms.py:{first}: nisa.tensor_scalar .*data reads 512 of the "
        f"1024 elements.*nisa.dma_copy at test_false_alarms.py:{use} uses them",
    ):
        nkisim.run(scale_whole_tile_then_store, [np.ones((64, 8), np.float32)], target="trn2", check="strict")


def reduce_every_partition_store_filled(a):
    """``a`` [64, 8] fills partitions 0..63; all 128 partitions are reduced, the filled ones stored."""
    x = nl.ndarray((P, 8), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x[0:64], src=a)
    peak = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=peak, data=x, op=nl.maximum, axis=1, negate=True)
    out = nl.ndarray((64, 1), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=peak[0:64])
    return out


def test_a_per_partition_reduction_over_unfilled_partitions_is_fine_when_their_results_are_unused():
    a = np.random.default_rng(2).uniform(-3, 3, (64, 8)).astype(np.float32)
    expected = -a.max(axis=1, keepdims=True)
    np.testing.assert_array_equal(_strict(reduce_every_partition_store_filled, [a], "trn2").outputs, expected)


def shuffle_from_filled_partitions(a):
    """``a`` [2, 8] fills partitions 16 and 48; a shuffle moves partition 16 of each quadrant to 0."""
    x = nl.ndarray((P, 8), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x[16:17], src=a[0:1])
    nisa.dma_copy(dst=x[48:49], src=a[1:2])
    nisa.nc_stream_shuffle(dst=x, src=x, shuffle_mask=[16] + [255] * 31)
    out = nl.ndarray((2, 8), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[0:1], src=x[0:1])
    nisa.dma_copy(dst=out[1:2], src=x[32:33])
    return out


def test_a_shuffle_that_moves_unfilled_partitions_is_fine_when_only_filled_ones_are_used():
    a = np.arange(16, dtype=np.float32).reshape(2, 8)
    np.testing.assert_array_equal(_strict(shuffle_from_filled_partitions, [a], "trn2").outputs, a)


def matmul_with_unfilled_columns(a, b):
    """``a`` [P, 32] fills columns 0..31 of a [P, 64] stationary tile: output rows 0..31 are defined."""
    stationary = nl.ndarray((P, 64), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=stationary[:, 0:32], src=a)
    moving = nl.ndarray((P, 16), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=moving, src=b)
    acc = nl.ndarray((64, 16), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=stationary, moving=moving)
    res = nl.ndarray((64, 16), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    out = nl.ndarray((32, 16), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res[0:32])
    return out


def test_a_matmul_whose_unfilled_stationary_columns_feed_unused_rows_is_fine():
    rng = np.random.default_rng(4)
    a, b = rng.integers(-3, 3, (P, 32)).astype(np.float32), rng.integers(-3, 3, (P, 16)).astype(np.float32)
    np.testing.assert_array_equal(_strict(matmul_with_unfilled_columns, [a, b], "trn2").outputs, a.T @ b)


# -- a float tile copied to integers: poison in the unfilled part is not a saturation ------


def cast_whole_tile_use_filled_part(a):
    """``a`` [P, 4] float: the first 4 of 16 columns are filled, the whole tile is cast to int32."""
    floats = nl.ndarray((P, 16), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=floats[:, 0:4], src=a)
    ints = nl.ndarray((P, 16), nl.int32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=ints, src=floats)
    out = nl.ndarray((P, 4), nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=ints[:, 0:4])
    return out


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_casting_a_partly_filled_tile_reports_no_saturation(target):
    a = np.random.default_rng(5).integers(-50, 50, (P, 4)).astype(np.float32)
    np.testing.assert_array_equal(_strict(cast_whole_tile_use_filled_part, [a], target).outputs, a.astype(np.int32))


def test_a_real_nan_in_the_filled_part_is_still_a_saturation_warning():
    a = np.ones((P, 4), np.float32)
    a[5, 1] = np.nan
    with pytest.warns(CheckWarning, match=r"1 NaN values became 0 .*\[saturation\]"):
        nkisim.run(cast_whole_tile_use_filled_part, [a], target="trn2", check="strict")


# -- nonzero_with_count on a tile whose unused partitions hold nothing ------------------------


def nonzero_on_two_cores(a):
    """``a`` [2, 32]: partitions 0 and 16 (GpSimd cores 0 and 1) are filled, 2..7's partitions are not."""
    src = nl.ndarray((P, 32), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=src[0:1, :], src=a[0:1, :])
    nisa.dma_copy(dst=src[16:17, :], src=a[1:2, :])
    found = nl.ndarray((P, 33), nl.int32, buffer=nl.sbuf)
    nisa.nonzero_with_count(dst=found, src=src, index_offset=0, padding_val=-1)
    out = nl.ndarray((2, 33), nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[0:1], src=found[0:1, :])
    nisa.dma_copy(dst=out[1:2], src=found[16:17, :])
    return out


def test_nonzero_with_count_on_unfilled_gpsimd_partitions_is_fine_when_their_results_are_unused():
    a = np.zeros((2, 32), np.float32)
    a[0, [3, 9]] = 1.0
    a[1, [0, 31, 7]] = -2.0
    expected = np.full((2, 33), -1, np.int32)
    expected[0, :3] = [3, 9, -1]
    expected[0, 32] = 2
    expected[1, :3] = [0, 7, 31]
    expected[1, 32] = 3
    np.testing.assert_array_equal(_strict(nonzero_on_two_cores, [a], "trn2").outputs, expected)


# -- sendrecv of a fixed-size tile that one core fills only in part ----------------------------


@nki.jit
def uneven_exchange(a):
    """Program 0 owns 3 rows of ``a`` [5, 8], program 1 owns 2; both send a 3-row tile."""
    pid = nl.program_id(0)
    mine = 3 - pid
    send = nl.ndarray((3, 8), nl.float32, buffer=nl.sbuf)
    recv = nl.ndarray((3, 8), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=send[0:mine], src=a[3 * pid : 3 * pid + mine])
    nisa.sendrecv(src=send, dst=recv, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
    theirs = 2 + pid
    out = nl.ndarray((5, 8), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[3 * (1 - pid) : 3 * (1 - pid) + theirs], src=recv[0:theirs])
    return out


def test_sendrecv_of_a_partly_filled_tile_is_fine_when_the_receiver_uses_the_filled_rows():
    a = np.arange(40, dtype=np.float32).reshape(5, 8)
    np.testing.assert_array_equal(_strict(uneven_exchange[2], [a], "trn2").outputs, a)


# -- stores at a run-time row offset to columns each iteration owns -----------------------------


@nki.jit
def runtime_row_offset_stores(a, start):
    """``a`` [P, 2F] stored by two iterations, each to its own F columns of ``out`` [2P, 2F] at the
    rows ``start`` (a register read at run time) names: the offsets differ by iteration only in columns."""
    f = a.shape[1] // 2
    out = nl.ndarray((2 * P, 2 * f), a.dtype, buffer=nl.shared_hbm)
    row = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=row, src=start)
    for i in nl.affine_range(2):
        t = nl.ndarray((P, f), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[:, i * f : (i + 1) * f])
        where = out.ap(pattern=[[2 * f, P], [1, f]], offset=i * f, scalar_offset=row, indirect_dim=0)
        nisa.dma_copy(dst=where, src=t)  # @runtime_row_offset_stores
    return out


@pytest.mark.parametrize("first_row", [0, 64, 128])
def test_iterations_storing_disjoint_columns_at_one_runtime_offset_do_not_race(first_row):
    a = np.arange(P * 64, dtype=np.float32).reshape(P, 64)
    out = _strict(runtime_row_offset_stores, [a, np.array([[first_row]], np.int32)], "trn2").outputs
    np.testing.assert_array_equal(out[first_row : first_row + P], a)


def test_a_shapes_only_profile_counts_a_runtime_offset_store_as_its_whole_tensor():
    """Without values the offset is unknown: both iterations may write any row, which is reported."""
    shapes = [((P, 64), np.float32), ((1, 1), np.int32)]
    with pytest.warns(CheckWarning, match="iterations may run in any order"):
        profile = nkisim.profile(runtime_row_offset_stores, shapes, target="trn2", check="warn")
    [finding] = [d for d in profile.diagnostics if d.check == "race"]
    assert finding.loc.line == _line(runtime_row_offset_stores, "@runtime_row_offset_stores")


def max8_over_bytes_written_through_an_aliasing_uint8_tile(a):
    x = nl.ndarray((P, 16), nl.float32, buffer=nl.sbuf, address=(0, 0))
    b = nl.ndarray((P, 64), nl.uint8, buffer=nl.sbuf, address=(0, 0))
    nisa.dma_copy(dst=b[:, 0:64:4], src=a)  # the first byte of each float32 of x
    top = nl.ndarray((P, 8), nl.float32, buffer=nl.sbuf)
    nisa.max8(dst=top, src=x[:, 0:8])
    out = nl.ndarray((P, 8), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=top)
    return out


def test_a_view_whose_elements_are_partly_written_byte_by_byte_is_judged_by_its_first_bytes():
    # every byte of the view's box is not written, but the first byte of each element is: the check reads an
    # element's mark from its first byte, as for any view
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckWarning)
        result = nkisim.run(max8_over_bytes_written_through_an_aliasing_uint8_tile, [np.ones((P, 16), np.uint8)],
                            target="trn2", check="warn")  # fmt: skip
    assert result.outputs.shape == (P, 8)
    assert not [d for d in result.profile.diagnostics if d.check == "uninitialized-read"]


def read_bytes_of_floats_whose_first_byte_alone_was_written(a):
    x = nl.ndarray((P, 4), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x.ap(pattern=[[16, P], [4, 4]], offset=0, dtype=nl.uint8), src=a)  # byte 0 of each float
    y = nl.ndarray((P, 4), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=y, src=x[:, 0:4])  # judged by the floats' first bytes: written
    z = nl.ndarray((P, 16), nl.uint8, buffer=nl.sbuf)
    nisa.tensor_copy(dst=z, src=x.ap(pattern=[[16, P], [1, 16]], offset=0, dtype=nl.uint8))  # first read
    out = nl.ndarray((P, 16), nl.uint8, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=z)  # use
    return out


def carry_into_a_tile_placed_over_another(a):
    x = nl.ndarray((P, 8), nl.float32, buffer=nl.sbuf, address=(0, 0))
    b = nl.ndarray((P, 8), nl.float32, buffer=nl.sbuf, address=(0, 0))
    nisa.dma_copy(dst=x, src=a)
    y = nl.ndarray((P, 4), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=y, src=x[:, 0:4])  # all written here
    blank = nl.ndarray((P, 4), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=b[:, 0:4], src=blank)  # first read
    out = nl.ndarray((P, 4), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x[:, 0:4])  # use
    return out


@pytest.mark.parametrize(
    ("kernel", "inputs", "count"),
    [
        (read_bytes_of_floats_whose_first_byte_alone_was_written, [np.ones((P, 4), np.uint8)], "1536 of the 2048"),
        (carry_into_a_tile_placed_over_another, [np.ones((P, 8), np.float32)], "512 of the 512"),
    ],
)
def test_what_the_check_remembers_of_written_views_never_hides_a_later_never_written_read(kernel, inputs, count):
    # a view of other element size over the same bytes, and bytes shared with a tile placed at the same address
    first, use = _line(kernel, "first read"), _line(kernel, "use")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckWarning)
        (finding,) = nkisim.run(kernel, inputs, target="trn2", check="warn").profile.diagnostics
    assert (finding.check, finding.loc.line) == ("uninitialized-read", first)
    assert f"src reads {count} elements" in finding.message
    assert f"nisa.dma_copy at test_false_alarms.py:{use} uses them (src)" in finding.message


# -- a PSUM tile rewritten whole by matmuls after another engine wrote part of it -----------


def _matmul_twice_around(between, address=None):
    """A kernel: a matmul writes ``acc`` whole, ``between(acc, rhs, alias)`` writes PSUM with another engine, a
    matmul writes ``acc`` whole again and a third accumulates onto it. Every value it accumulates onto is a
    matmul's, which every generation allows: the result is ``2 * a.T @ b``. With an ``address``, ``acc`` and
    ``alias`` are placed there, both before the first matmul."""

    def kernel(a, b):
        lhs = nl.ndarray((P, P), nl.float32, buffer=nl.sbuf)
        rhs = nl.ndarray((P, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=lhs, src=a)
        nisa.dma_copy(dst=rhs, src=b)
        acc = nl.ndarray((P, 64), nl.float32, buffer=nl.psum, address=address)
        alias = None if address is None else nl.ndarray((P, 64), nl.float32, buffer=nl.psum, address=address)
        nisa.nc_matmul(dst=acc, stationary=lhs, moving=rhs, accumulate=False)
        between(acc, rhs, alias)
        nisa.nc_matmul(dst=acc, stationary=lhs, moving=rhs, accumulate=False)
        nisa.nc_matmul(dst=acc, stationary=lhs, moving=rhs, accumulate=True)
        res = nl.ndarray((P, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        out = nl.ndarray((P, 64), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=res)
        return out

    return kernel


def _copy_into_half(acc, rhs, alias):
    nisa.tensor_copy(dst=acc[:, 0:32], src=rhs[:, 0:32])


def _copy_into_the_tile_at_the_same_address(acc, rhs, alias):
    nisa.tensor_copy(dst=alias, src=rhs)


@pytest.mark.parametrize(
    ("target", "between", "address"),
    [
        ("trn1", _copy_into_half, None),  # a partial write ends what the sanitizer knew of the whole tile
        ("trn2", _copy_into_half, None),
        ("trn2", _copy_into_the_tile_at_the_same_address, (0, 0)),  # placed tiles share bytes
    ],
)
def test_matmuls_that_rewrite_a_tile_whole_clear_another_engines_marks(target, between, address):
    rng = np.random.default_rng(3)
    a = rng.integers(-3, 4, (P, P)).astype(np.float32)
    b = rng.integers(-3, 4, (P, 64)).astype(np.float32)
    result = _strict(_matmul_twice_around(between, address), [a, b], target)
    np.testing.assert_array_equal(result.outputs, 2 * (a.T @ b))
