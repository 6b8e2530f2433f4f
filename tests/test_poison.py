"""Fresh memory is poisoned: never-written SBUF and PSUM bytes read as NaN (all-ones bytes), however the
memory was used before, and a tile's first write leaves the rest of it poisoned.

Every expected value is computed here with numpy or by hand, never by nkisim.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_frontend import store

import nkisim
import nkisim.memory.system
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.errors import SourceLoc
from nkisim.hw import load_target
from nkisim.memory import Buffer
from nkisim.sim import Instruction, Machine


def rand(*shape, dtype=np.float32):
    return np.random.default_rng(7).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "tfloat32", "float8_e4m3", "float8_e5m2"])
def test_unwritten_sbuf_reads_as_nan(dtype):
    def kernel(x):
        tile = nl.ndarray((128, 16), dtype, buffer=nl.sbuf)
        return store(tile, nl.float32)

    with pytest.warns(nkisim.CheckWarning, match=r"never written.*\[uninitialized-read\]"):
        out = nkisim.run(kernel, [rand(1, 1)], check="warn").outputs
    assert np.isnan(out).all()


def test_unwritten_psum_reads_as_nan():
    def kernel(x):
        acc = nl.ndarray((128, 16), nl.float32, buffer=nl.psum)
        staged = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=staged, src=acc)
        return store(staged)

    with pytest.warns(nkisim.CheckWarning, match=r"PSUM tile .* never written"):
        assert np.isnan(nkisim.run(kernel, [rand(1, 1)], check="warn").outputs).all()


def test_reused_memory_is_poisoned_again():
    def kernel(x):
        # 30 tiles of 8 KiB per partition cycle through trn1's 192 KiB: some land on old bytes.
        results, offsets = [], []
        for _ in range(30):
            tile = nl.ndarray((128, 2048), nl.float32, buffer=nl.sbuf)
            results.append(store(tile[:, 0:8]))
            offsets.append(tile.byte_offset)
            nisa.memset(tile, 1.0)  # a later tile reuses these bytes once this one is dropped
        return results, offsets

    with pytest.warns(nkisim.CheckWarning, match=r"\[uninitialized-read\]"):
        results, offsets = nkisim.run(kernel, [rand(1, 1)], check="warn").outputs
    assert len(set(offsets)) < len(offsets), "no tile reused the bytes of an earlier one"
    for out in results:
        assert np.isnan(out).all()


def test_a_partly_written_fresh_tile_reads_nan_in_the_rest():
    # a first write that covers part of the tile leaves the rest as poisoned as at allocation,
    # even on bytes an earlier tile filled with 1.0
    def kernel(x):
        old = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf, address=(0, 0))
        nisa.memset(old, 1.0)
        del old
        tile = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf, address=(0, 0))
        nisa.memset(tile[:, 0:4], 2.0)
        return store(tile)

    out = nkisim.run(kernel, [rand(1, 1)], check="off").outputs
    assert (out[:, 0:4] == 2.0).all()
    assert np.isnan(out[:, 4:]).all()


def test_a_fresh_tile_overwritten_whole_keeps_only_the_new_values():
    def kernel(x):
        old = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf, address=(0, 0))
        nisa.memset(old, 1.0)
        del old
        tile = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf, address=(0, 0))
        nisa.dma_copy(dst=tile, src=x)
        return store(tile)

    x = rand(128, 16)
    np.testing.assert_array_equal(nkisim.run(kernel, [x]).outputs, x)


def test_device_print_of_a_fresh_tile_shows_its_poison(capsys):
    def kernel(x):
        old = nl.ndarray((2, 3), nl.float32, buffer=nl.sbuf, address=(0, 0))
        nisa.memset(old, 1.0)
        del old
        tile = nl.ndarray((2, 3), nl.float32, buffer=nl.sbuf, address=(0, 0))
        nl.device_print("fresh", tile)
        nisa.memset(tile, 0.0)
        return store(tile)

    nkisim.run(kernel, [rand(1, 1)])
    printed = capsys.readouterr().out
    assert "nan" in printed and "1." not in printed


def test_an_earlier_runs_sbuf_bytes_are_never_seen():
    """SBUF starts as whatever bytes the host gives (often the last run's); every tile is poisoned before use."""

    def fill(x):
        for _ in range(30):  # 30 x 8 KiB per partition: all of trn1's 192 KiB, set to 3.0
            tile = nl.ndarray((128, 2048), nl.float32, buffer=nl.sbuf)
            nisa.memset(tile, 3.0)
        return store(tile[:, 0:8])

    def read_fresh(x):
        outs = []
        for _ in range(24):
            tile = nl.ndarray((128, 2048), nl.float32, buffer=nl.sbuf)
            outs.append(store(tile[:, 2040:2048]))
        placed = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf, address=(0, 100 * 1024))
        outs.append(store(placed))
        return outs

    for _ in range(3):
        assert (nkisim.run(fill, [rand(1, 1)]).outputs == 3.0).all()
        with pytest.warns(nkisim.CheckWarning, match=r"\[uninitialized-read\]"):
            outs = nkisim.run(read_fresh, [rand(1, 1)], check="warn").outputs
        for out in outs:
            assert (out.view(np.uint32) == 0xFFFFFFFF).all()


# -- the poison of automatic tiles is made at their first use ---------------------------------------------


def _cover_sbuf_with(value):
    """Set every byte of trn1's SBUF that automatic tiles reach to ``value`` (30 x 8 KiB per partition)."""
    for _ in range(30):
        nisa.memset(nl.ndarray((128, 2048), nl.float32, buffer=nl.sbuf), value)


def test_a_fresh_automatic_tile_read_or_written_in_part_shows_its_poison_over_old_values():
    def kernel(x, idx):
        _cover_sbuf_with(3.0)
        partly = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        nisa.memset(partly[:, 4:8], 2.0)
        unread = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        gathered = nl.ndarray((4, 3), nl.float32, buffer=nl.sbuf)  # rows whose index is outside are skipped
        where = nl.ndarray((4, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=where, src=idx)
        view = x.ap([[3, 4], [1, 3]], vector_offset=where, indirect_dim=0)
        nisa.dma_copy(dst=gathered, src=view, oob_mode=nisa.oob_mode.skip)
        return store(partly), store(unread), store(gathered)

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    idx = np.array([[1], [5], [0], [-1]], dtype=np.int32)
    partly, unread, gathered = nkisim.run(kernel, [x, idx], target="trn1", check="off").outputs
    assert (partly[:, 4:8] == 2.0).all() and np.isnan(partly[:, :4]).all() and np.isnan(partly[:, 8:]).all()
    assert np.isnan(unread).all()
    np.testing.assert_array_equal(gathered[[0, 2]], x[[1, 0]])
    assert np.isnan(gathered[[1, 3]]).all()


def test_fresh_automatic_tiles_before_a_print_a_store_and_a_matmul_hold_poison_not_old_values(capsys):
    def kernel(x):
        _cover_sbuf_with(3.0)
        printed = nl.ndarray((2, 3), nl.float32, buffer=nl.sbuf)
        nl.device_print("fresh", printed)
        before_zeros = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        zeros = nl.zeros((128, 8), nl.float32, buffer=nl.sbuf)  # set outside any instruction
        old = nl.ndarray((128, 8), nl.float32, buffer=nl.psum)
        nisa.memset(old, 5.0)
        del old
        acc = nl.ndarray((128, 8), nl.float32, buffer=nl.psum)  # on the bytes old held: a new tile overwrites
        stationary = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        nisa.memset(stationary, 1.0)
        moving = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=moving, src=x)
        nisa.nc_matmul(dst=acc, stationary=stationary, moving=moving)
        return store(before_zeros), store(zeros), store(acc)

    x = rand(128, 8)
    before_zeros, zeros, acc = nkisim.run(kernel, [x], target="trn1", check="off").outputs
    assert "nan" in capsys.readouterr().out
    assert np.isnan(before_zeros).all() and (zeros == 0.0).all()
    expected = np.ones((128, 128)).T @ x.astype(np.float64)
    np.testing.assert_allclose(acc, expected, rtol=1e-5)


def test_fresh_tiles_set_whole_by_a_transpose_a_reduction_an_iota_and_an_activation_reduce_hold_their_values():
    def kernel(x):
        _cover_sbuf_with(3.0)  # what a tile left unfilled and not set would show
        data = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=data, src=x)
        transposed = nl.ndarray((32, 128), nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=transposed, data=data)
        sums = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=sums, op=nl.add, data=data, axis=1)
        ramp = nl.ndarray((128, 32), nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=ramp, pattern=[[1, 32]], offset=0, channel_multiplier=32)
        exps = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
        exp_sums = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(dst=exps, op=nl.exp, data=data, reduce_op=nl.add, reduce_res=exp_sums)
        return store(transposed), store(sums), store(ramp), store(exps), store(exp_sums)

    x = rand(128, 32)
    transposed, sums, ramp, exps, exp_sums = nkisim.run(kernel, [x], target="trn1", check="off").outputs
    np.testing.assert_array_equal(transposed, x.T)
    np.testing.assert_allclose(sums, x.astype(np.float64).sum(axis=1, keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(ramp, np.arange(128 * 32, dtype=np.int32).reshape(128, 32))
    np.testing.assert_allclose(exps, np.exp(x.astype(np.float64)), rtol=1e-5)
    np.testing.assert_allclose(exp_sums, np.exp(x.astype(np.float64)).sum(axis=1, keepdims=True), rtol=1e-5)


def test_a_tile_its_first_instruction_sets_whole_is_never_filled(monkeypatch):
    """The poison under a tile written whole first (a DMA load, an element-wise result) could never be read:
    it is not made. One written in part first is."""
    fills = []
    original = nkisim.memory.system.MemorySystem._fill_box
    monkeypatch.setattr(
        nkisim.memory.system.MemorySystem, "_fill_box", lambda self, box: fills.append(box) or original(self, box)
    )

    def whole(x):
        loaded = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=loaded, src=x)
        doubled = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=doubled, data1=loaded, data2=loaded, op=nl.add)
        return store(doubled)

    def part(x):
        loaded = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=loaded[:, 0:8], src=x[:, 0:8])
        nisa.dma_copy(dst=loaded[:, 8:16], src=x[:, 8:16])
        return store(loaded)

    x = rand(128, 16)
    np.testing.assert_array_equal(nkisim.run(whole, [x]).outputs, x + x)
    assert fills == []
    np.testing.assert_array_equal(nkisim.run(part, [x]).outputs, x)
    assert len(fills) == 1


def test_a_tile_freed_with_its_poison_due_never_has_it_made_over_the_next_tile():
    def kernel(x):
        tiles = [nl.ndarray((128, 12288), nl.float32, buffer=nl.sbuf) for _ in range(4)]  # all of trn1's SBUF
        for t in tiles[1:]:
            nisa.memset(t, 1.0)
        first = tiles[0].byte_offset
        tiles[0] = None  # freed before any instruction used it
        fresh = nl.ndarray((128, 12288), nl.float32, buffer=nl.sbuf)
        assert fresh.byte_offset == first  # the only free bytes
        nisa.memset(fresh, 7.0)
        nl.device_print("fresh", fresh[0:1, 0:2])  # makes every poison still due
        return store(fresh[:, 0:8])

    assert (nkisim.run(kernel, [rand(1, 1)], target="trn1", check="off").outputs == 7.0).all()


def test_a_value_stored_outside_an_instruction_is_not_covered_by_a_later_poison():
    """``Machine.store`` (immediate values the front end sets) makes the poison still due first."""
    machine = Machine(load_target("trn2"))
    machine.memory.defer_poison = True  # as in a kernel's run on one core
    tile = machine.memory.new_tensor((128, 8), np.dtype(np.float32), Buffer.sbuf)
    copy = machine.memory.new_tensor((128, 8), np.dtype(np.float32), Buffer.sbuf)
    assert machine.memory.unpoisoned  # neither is filled yet
    machine.store(tile.array, 5.0)
    machine.issue(Instruction("tensor_copy", {"dst": copy, "src": tile}, SourceLoc("kernel.py", 3, "k")))
    assert (copy.array == 5.0).all()


_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["new", "memset_part", "memset", "copy", "add", "zeros", "print", "out"]),
        st.integers(0, 3),
        st.integers(0, 3),
    ),
    min_size=1,
    max_size=24,
)


@settings(max_examples=40, deadline=None)
@given(steps=_STEPS)
def test_automatic_tiles_hold_what_a_numpy_model_with_nan_for_unwritten_bytes_holds(steps):
    """Random programs over four tile slots of 48 KiB per partition (four fill trn1's SBUF, so new tiles land on
    old values): new tiles, partial and whole writes, in-place adds, copies, ``nl.zeros``, prints (which make
    every poison still due) and reads, against a model in which every new tile is NaN."""
    shape = (128, 12288)

    def kernel(x):
        slots, outs = [None] * 4, []
        for op, i, j in steps:
            if slots[i] is None or op in ("new", "zeros"):
                slots[i] = None  # freed first, so the allocator may give its bytes to the new one
                slots[i] = (
                    nl.ndarray(shape, nl.float32, buffer=nl.sbuf) if op != "zeros" else nl.zeros(shape, nl.float32)
                )
            if op == "memset_part":
                nisa.memset(slots[i][:, j * 1000 : j * 1000 + 2000], float(j + 1))
            elif op == "memset":
                nisa.memset(slots[i], float(j + 10))
            elif op in ("copy", "add") and slots[j] is not None and j != i:
                if op == "copy":
                    nisa.tensor_copy(dst=slots[i], src=slots[j])
                else:
                    nisa.tensor_tensor(dst=slots[i], data1=slots[i], data2=slots[j], op=nl.add)
            elif op == "print":  # makes every poison not made yet, first
                nl.device_print("slot", slots[i][0:1, 0:4])
            elif op == "out":
                outs.append(store(slots[i][:, ::512]))
        return outs

    model, expected = [None] * 4, []
    for op, i, j in steps:
        if model[i] is None or op in ("new", "zeros"):
            model[i] = np.full(shape, np.nan if op != "zeros" else 0.0, np.float32)
        if op == "memset_part":
            model[i][:, j * 1000 : j * 1000 + 2000] = j + 1
        elif op == "memset":
            model[i][...] = j + 10
        elif op in ("copy", "add") and model[j] is not None and j != i:
            model[i] = model[j].copy() if op == "copy" else model[i] + model[j]
        elif op == "out":
            expected.append(model[i][:, ::512].copy())
    got = nkisim.run(kernel, [rand(1, 1)], target="trn1", check="off").outputs
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)


def test_a_print_of_a_view_at_a_never_written_offset_reads_the_offsets_poison(capsys):
    """The offset tile's poison (-1 as int32) is made before the view's address is worked out."""

    def kernel(x):
        _cover_sbuf_with(0.0)
        values = nl.ndarray((1, 8), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=values, src=x)
        where = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)  # never written
        nl.device_print("at", values.ap([[8, 1], [1, 4]], 4, scalar_offset=where, indirect_dim=1))
        return store(values)

    nkisim.run(kernel, [np.arange(8, dtype=np.float32).reshape(1, 8)], target="trn1", check="off")
    assert "[[3. 4. 5. 6.]]" in capsys.readouterr().out  # elements 4 - 1 to 4 - 1 + 3


def test_a_legacy_print_of_a_fresh_tile_shows_its_poison(capsys):
    import nkisim.nki.legacy as legacy
    import nkisim.nki.legacy.language as lnl

    @legacy.jit
    def kernel(x):
        out = lnl.ndarray((2, 3), dtype=lnl.float32, buffer=lnl.shared_hbm)
        for _ in range(30):  # all of trn1's SBUF set to 3.0
            tile = lnl.ndarray((128, 2048), dtype=lnl.float32, buffer=lnl.sbuf)
            tile[...] = 3.0
        fresh = lnl.ndarray((2, 3), dtype=lnl.float32, buffer=lnl.sbuf)
        lnl.device_print("fresh", fresh)
        lnl.store(out, lnl.load(x))
        return out

    kernel(np.ones((2, 3), np.float32))
    printed = capsys.readouterr().out
    assert "nan" in printed and "3." not in printed


class _Holder:
    """A tile in a reference cycle: freed when the cyclic garbage collector runs, at any allocation."""

    def __init__(self):
        self.tile = nl.ndarray((1, 4), nl.float32, buffer=nl.sbuf)
        self.me = self


def test_tiles_the_garbage_collector_frees_while_pending_fills_are_made_drop_theirs(monkeypatch):
    original = nkisim.memory.system.MemorySystem._fill_box

    def collect_then_fill(self, box):
        gc.collect()  # as the cyclic collector may, at any allocation
        original(self, box)

    monkeypatch.setattr(nkisim.memory.system.MemorySystem, "_fill_box", collect_then_fill)

    def kernel(x):
        waiting = [nl.ndarray((1, 4), nl.float32, buffer=nl.sbuf) for _ in range(20)]  # fills still due
        for _ in range(5):
            _Holder()  # garbage, with fills due, until the collector runs
        zeros = nl.zeros((1, 4), nl.float32, buffer=nl.shared_hbm)  # set outside an instruction: fills first
        nisa.dma_copy(dst=waiting[0], src=zeros)
        return store(waiting[0])

    enabled = gc.isenabled()
    gc.disable()  # so that the holders wait for the collection made inside the fills
    try:
        assert (nkisim.run(kernel, [rand(1, 4)], check="off").outputs == 0.0).all()
    finally:
        if enabled:
            gc.enable()
