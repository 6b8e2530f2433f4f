"""The on-chip next-fit allocator against a brute-force search over every aligned byte offset."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nkisim.errors import CapacityError
from nkisim.hw import load_target
from nkisim.memory import space
from nkisim.memory.space import OnChipMemory
from nkisim.memory.system import MemorySystem

UINT8 = np.dtype(np.uint8)
ROW_BYTES = 4096  # small partitions, so that the allocator soon wraps round and reuses freed bytes


def _memory(kind: str) -> OnChipMemory:
    hw = load_target("trn2")
    config = getattr(hw, kind).model_copy(update={"bytes_per_partition": ROW_BYTES})
    return OnChipMemory(kind, config)


def _first_fit(start: int, size: int, obstacles: list[tuple[int, int]], align: int, bank: int | None) -> int | None:
    """The first aligned offset from ``start`` where ``size`` bytes meet no obstacle and keep the bank rule."""
    for p in range(start, ROW_BYTES - size + 1, align):
        if bank is not None and (p // bank != (p + size - 1) // bank if size <= bank else p % bank):
            continue
        if all(p + size <= lo or hi <= p for lo, hi in obstacles):
            return p
    return None


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(["sbuf", "psum"]),
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("alloc"), st.integers(1, 1500), st.integers(1, 128)),
            st.tuples(st.just("free"), st.integers(0, 30), st.just(0)),
            st.tuples(st.just("place"), st.integers(0, ROW_BYTES - 1), st.integers(0, 127)),
        ),
        max_size=40,
    ),
)
# a wrap-around that leaves a low tile listed after higher ones, then a tile that fits nowhere
@example(
    kind="sbuf",
    steps=[
        ("alloc", 2048, 1),
        ("alloc", 1024, 1),
        ("free", 0, 0),
        ("alloc", 512, 1),
        ("alloc", 1024, 1),
        ("alloc", 2000, 1),
    ],
)
def test_next_fit_takes_the_first_free_aligned_offset_from_the_last_tile_on(kind, steps):
    """Each automatic tile starts at the first aligned offset at or after the end of the previous one
    (else from the start) whose bytes no live tile uses in its partitions, never straddling a PSUM bank
    (larger tiles start on one); placed tiles count only where their partitions meet the new tile's."""
    memory = _memory(kind)
    align = memory.config.alignment_bytes
    bank = memory.config.bank_bytes if memory.config.banks > 1 else None
    live: dict[int, tuple[int, int, int, int, bool]] = {}  # handle: (offset, end, first partition, partitions, placed)
    cursor = 0
    for op, a, b in steps:
        if op == "free":
            if live:
                handle = sorted(live)[a % len(live)]
                memory.free(handle)
                del live[handle]
            continue
        if op == "place":
            nbytes = min(256, ROW_BYTES - a)
            try:
                alloc = memory.place(a, b, nbytes, 1, ("placed", (1, nbytes), UINT8), None)
            except CapacityError:
                assert any(
                    not placed and lo < a + nbytes and a < hi and p0 <= b for lo, hi, p0, _, placed in live.values()
                )
                continue
            live[alloc.handle] = (a, a + nbytes, b, 1, True)
            continue
        nbytes, partitions = a, b
        size = -(-nbytes // align) * align
        obstacles = [(lo, hi) for lo, hi, p0, _, placed in live.values() if not placed or p0 < partitions]
        expected = _first_fit(cursor, size, obstacles, align, bank)
        if expected is None:
            expected = _first_fit(0, size, obstacles, align, bank)
        try:
            alloc = memory.allocate(nbytes, partitions, ("tile", (partitions, nbytes), UINT8), None)
        except CapacityError:
            assert expected is None
            continue
        assert alloc.offset == expected
        live[alloc.handle] = (alloc.offset, alloc.offset + size, 0, partitions, False)
        cursor = alloc.offset + size


@settings(max_examples=40, deadline=None)
@given(
    shapes=st.lists(
        st.tuples(st.integers(1, 128), st.lists(st.integers(1, 6), min_size=0, max_size=3)), min_size=1, max_size=8
    ),
    dtype=st.sampled_from([np.float32, np.float16, np.int8, np.int64]),
    memo=st.integers(1, 3),
)
def test_tiles_are_row_major_in_their_partitions_whatever_the_layout_memo_holds(shapes, dtype, memo):
    """Each new tile's element (p, i, j, ...) sits at partition p, at its row-major byte offset within the tile's
    bytes of that partition, however small the layout memo (its restarts included)."""
    from nkisim.memory import system

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(system, "MAX_LAYOUTS", memo)
        _check_tile_layouts(system, shapes, np.dtype(dtype), memo)


def _check_tile_layouts(system, shapes, dt, memo) -> None:
    memory = system.MemorySystem(load_target("trn2"), poison=False)
    for partitions, free in shapes * 2:  # each shape twice: the second from the memo, unless it restarted
        shape = (partitions, *free)
        tile = memory.new_tensor(shape, dt, system.Buffer.sbuf)
        row_bytes = tile.storage.row_bytes
        free_bytes = int(np.prod(free, dtype=np.int64)) * dt.itemsize
        expected = [row_bytes, *(int(np.prod(free[k + 1 :], dtype=np.int64)) * dt.itemsize for k in range(len(free)))]
        assert tile.array.strides == tuple(expected)
        assert tile.region.r1 - tile.region.r0 == partitions
        assert tile.region.b1 - tile.region.b0 == free_bytes
        assert len(memory._layouts) <= memo


@pytest.mark.parametrize("shape", [(128, 64), (128, 196_608), (4, 1 << 20)])
@pytest.mark.parametrize("dtype", [np.uint8, np.int32])
def test_storage_zeros_are_zero_writable_and_private(shape, dtype):
    a, b = space.lazy_zeros(shape, dtype), space.lazy_zeros(shape, dtype)
    assert a.shape == shape and a.dtype == dtype and a.flags.writeable and a.flags.c_contiguous
    assert not a.any()
    a[-1, -1] = 7
    a[0, :3] = 1
    assert int(a.sum()) == 10 and not b.any() and not np.shares_memory(a, b)


def test_a_memory_without_poison_starts_zeroed():
    hw = load_target("trn2")
    quiet = MemorySystem(hw, poison=False)
    assert not quiet.sbuf.storage.bytes.any() and not quiet.psum.storage.acc_flags.any()
    assert quiet.sbuf.storage.bytes.shape[0] == hw.sbuf.partitions


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_lazy_zeros_are_copied_on_write_in_a_forked_process_as_numpys_are():
    lazy = space.lazy_zeros((128, 1 << 14), np.uint8)
    assert lazy.nbytes >= space.LAZY_ZEROS_BYTES
    child = os.fork()
    if child == 0:  # the child writes its own copy of the page, then leaves at once
        lazy[0, 0] = 7
        os._exit(0)
    os.waitpid(child, 0)
    assert lazy[0, 0] == 0
