"""A new HBM tensor's poison, made late around the blocks instructions set whole (nkisim.memory.hbm_poison).

The bytes must be those of a poison made first: all-ones (NaN) wherever nothing wrote, the written values
elsewhere. Expected values come from numpy masks written here.
"""

from __future__ import annotations

import gc
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.memory import hbm_poison
from nkisim.memory.hbm_poison import PendingPoison

ROWS, ROW_BYTES = 12, 40


@st.composite
def boxes(draw: st.DrawFn) -> tuple[int, int, int, int]:
    r0 = draw(st.integers(0, ROWS - 1))
    b0 = draw(st.integers(0, ROW_BYTES - 1))
    return r0, draw(st.integers(r0 + 1, ROWS)), b0, draw(st.integers(b0 + 1, ROW_BYTES))


def _grid_of(box: tuple[int, int, int, int]) -> list[tuple[int, int, int, int]]:
    """``box`` cut into blocks a kernel's loop would write one after the other (rows, then bytes)."""
    r0, r1, b0, b1 = box
    mid_r, mid_b = (r0 + r1) // 2, (b0 + b1) // 2
    rows = [(r0, mid_r), (mid_r, r1)] if mid_r > r0 else [(r0, r1)]
    cols = [(b0, mid_b), (mid_b, b1)] if mid_b > b0 else [(b0, b1)]
    return [(a, b, c, d) for a, b in rows for c, d in cols]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(boxes(), boxes().map(_grid_of)), max_size=12),
    st.integers(1, 6),
)
def test_the_poison_is_made_in_exactly_the_bytes_no_box_covers(writes, cap):
    flat = [b for w in writes for b in (w if isinstance(w, list) else [w])]
    data = np.random.default_rng(len(flat)).integers(0, 255, (ROWS, ROW_BYTES), dtype=np.uint8)  # never 0xFF
    covered = np.zeros((ROWS, ROW_BYTES), dtype=bool)
    pending, made = PendingPoison(data), False
    views = []
    with mock.patch.object(hbm_poison, "MAX_BOXES", cap):
        for box in flat:
            if made:
                break
            if not pending.wrote(box):  # too many boxes: the caller makes the poison now
                pending.make(views.append)
                made = True
                break
            r0, r1, b0, b1 = box
            covered[r0:r1, b0:b1] = True
    expected = np.where(covered, data, 0xFF)
    if not made:
        pending.make(views.append)
    np.testing.assert_array_equal(data, expected)
    assert sum(v.size for v in views) == np.count_nonzero(~covered)  # each poisoned byte filled once


def test_boxes_that_continue_the_latest_one_merge_into_it():
    pending = PendingPoison(np.zeros((256, 64), np.uint8))
    for r in range(0, 256, 128):
        for b in range(0, 64, 16):
            assert pending.wrote((r, r + 128, b, b + 16))
    assert pending.boxes == {(0, 128, 0, 64), (128, 256, 0, 64)}  # a row block's columns merge, not the next rows
    pending = PendingPoison(np.zeros((256, 64), np.uint8))
    for r in range(0, 256, 64):
        assert pending.wrote((r, r + 64, 0, 64))
    assert pending.boxes == {(0, 256, 0, 64)}


def _nan_where(shape, unwritten):
    mask = np.zeros(shape, dtype=bool)
    for index in unwritten:
        mask[index] = True
    return mask


def _check_poison(out, x, unwritten):
    """``out`` holds ``x`` where written and the all-ones bit pattern (the poison) elsewhere."""
    mask = _nan_where(out.shape, unwritten)
    assert (out.view(np.uint32)[mask] == 0xFFFFFFFF).all()
    np.testing.assert_array_equal(out[~mask], x[~mask])


def test_an_output_written_in_part_by_blocks_keeps_the_poison_elsewhere():
    def kernel(x):
        out = nl.ndarray((256, 1024), nl.float32, buffer=nl.shared_hbm)
        for r, c in ((0, 0), (1, 1), (1, 0)):  # three of the four [128, 512] blocks
            block = (slice(r * 128, r * 128 + 128), slice(c * 512, c * 512 + 512))
            tile = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=x[block])
            nisa.dma_copy(dst=out[block], src=tile)
        return out

    x = np.random.default_rng(0).standard_normal((256, 1024)).astype(np.float32)
    _check_poison(nkisim.run(kernel, [x]).outputs, x, [np.s_[0:128, 512:1024]])


def test_an_output_read_before_it_is_written_reads_poison():
    def kernel(x):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        early = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[:, 0:32], src=x[:, 0:32])
        tile = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=out)  # half of it was never written
        nisa.dma_copy(dst=early, src=tile)
        nisa.dma_copy(dst=out[:, 32:64], src=x[:, 32:64])
        return out, early

    x = np.random.default_rng(1).standard_normal((128, 64)).astype(np.float32)
    out, early = nkisim.run(kernel, [x], check="off").outputs
    np.testing.assert_array_equal(out, x)
    _check_poison(early, x, [np.s_[:, 32:64]])


def test_an_accumulating_write_meets_the_poison_or_the_values_before_it():
    def kernel(x):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[:, 0:32], src=x[:, 0:32])
        nisa.dma_copy(dst=out, src=x, dst_rmw_op=nl.add)  # adds to written values and to poison
        return out

    x = np.random.default_rng(2).standard_normal((128, 64)).astype(np.float32)
    out = nkisim.run(kernel, [x], check="off").outputs
    np.testing.assert_array_equal(out[:, 0:32], x[:, 0:32] * 2)
    assert np.isnan(out[:, 32:64]).all()


def test_a_strided_write_makes_the_poison_around_the_blocks_before_it():
    def kernel(x):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        tile = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        nisa.dma_copy(dst=out[:, 0:16], src=tile[:, 0:16])
        # every other element of columns 32..63: not a box of bytes
        nisa.dma_copy(dst=out.ap([[64, 128], [2, 16]], offset=32), src=tile[:, 32:48])
        return out

    x = np.random.default_rng(3).standard_normal((128, 64)).astype(np.float32)
    out = nkisim.run(kernel, [x], check="off").outputs
    np.testing.assert_array_equal(out[:, 0:16], x[:, 0:16])
    np.testing.assert_array_equal(out[:, 32:64:2], x[:, 32:48])
    unwritten = np.ones((128, 64), dtype=bool)
    unwritten[:, 0:16] = unwritten[:, 32:64:2] = False
    assert (out.view(np.uint32)[unwritten] == 0xFFFFFFFF).all()


@pytest.mark.parametrize("runs", [1, 3])
def test_a_replay_makes_the_same_poison_around_new_values(runs):
    def kernel(x):
        out = nl.ndarray((256, 64), nl.float32, buffer=nl.shared_hbm)
        tile = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[128:256])
        nisa.dma_copy(dst=out[128:256], src=tile)
        return out

    prog = nkisim.compile(kernel, [np.zeros((256, 64), np.float32)])
    for seed in range(runs):
        x = np.random.default_rng(seed).standard_normal((256, 64)).astype(np.float32)
        _check_poison(prog([x]).outputs, x, [np.s_[0:128]])


def test_nl_zeros_in_hbm_stays_zero_where_nothing_writes():
    def kernel(x):
        out = nl.zeros((128, 64), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[:, 0:32], src=x[:, 0:32])
        return out

    x = np.random.default_rng(4).standard_normal((128, 64)).astype(np.float32)
    out = nkisim.run(kernel, [x]).outputs
    np.testing.assert_array_equal(out, np.concatenate([x[:, 0:32], np.zeros((128, 32), np.float32)], axis=1))


def test_two_cores_poison_their_shared_output_at_once():
    """The cores of a launch share HBM: each core's writes are its own, so nothing waits there."""

    def kernel(x):
        out = nl.ndarray((256, 64), nl.float32, buffer=nl.shared_hbm)
        rows = slice(nl.program_id(0) * 128, nl.program_id(0) * 128 + 128)
        tile = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[rows, 0:32])
        nisa.dma_copy(dst=out[rows, 0:32], src=tile)
        return out

    x = np.random.default_rng(5).standard_normal((256, 64)).astype(np.float32)
    out = nkisim.run(nkisim.nki.jit(kernel)[2], [x], target="trn2").outputs
    _check_poison(out, x, [np.s_[:, 32:64]])


def test_a_dropped_hbm_tensor_never_has_its_poison_made(monkeypatch):
    """Nothing can read a dropped tensor's bytes: its poison is not made at the end of the run."""
    made = []
    original = PendingPoison.make
    monkeypatch.setattr(
        PendingPoison, "make", lambda self, filled: made.append(self.data.shape) or original(self, filled)
    )

    def kernel(x):
        for _ in range(3):
            scratch = nl.ndarray((256, 1024), nl.float32, buffer=nl.private_hbm)
            tile = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=x)
            nisa.dma_copy(dst=scratch[0:128, 0:64], src=tile)
            del scratch
            gc.collect()
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tile)
        return out

    x = np.random.default_rng(6).standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_array_equal(nkisim.run(kernel, [x]).outputs, x)
    assert made == [(128, 256)]  # the output's, which its one write covers
