"""The compiled placement loop: its DMA calendars, batches of any size, and the dependency pool growing mid-batch."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.examples.matmul import matmul_tiled
from nkisim.sim import deps, placement
from nkisim.sim import scheduler as scheduler_module
from nkisim.sim import tracker as tracker_module


def first_fit(busy: list[tuple[float, float]], earliest: float, duration: float) -> float:
    """The first start at or after ``earliest`` where ``duration`` overlaps no busy interval (a fixed point)."""
    start = earliest
    moved = True
    while moved:
        moved = False
        for s, e in busy:
            if s < start + duration and e > start:
                start, moved = e, True
    return start


#: Positive durations: the calendar keeps intervals that touch as one, so a zero-length booking at the point
#: where two meet goes after both (where the reference, which keeps them apart, would put it between).
bookings = st.lists(st.tuples(st.integers(0, 200).map(float), st.integers(1, 30).map(float)), min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(bookings)
def test_calendar_books_the_first_gap_that_fits(requests):
    starts, ends = np.zeros((1, 128)), np.zeros((1, 128))
    counts = np.zeros(1, dtype=np.int64)
    busy: list[tuple[float, float]] = []
    for earliest, duration in requests:
        got = placement._book(starts, ends, counts, 0, earliest, duration)
        expected = first_fit(busy, earliest, duration)
        assert got == expected
        busy.append((expected, expected + duration))
    n = counts[0]
    assert np.all(np.diff(starts[0, :n]) > 0)  # sorted, and intervals that touch are one
    assert np.all(starts[0, 1:n] > ends[0, : n - 1])


def mixed(a, w):
    """DMA queues, Tensor (LoadStationary), Vector, Scalar (two tables), GpSimd, depends_on and a partial DMA."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    weights = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=weights, src=w)
    for i in range(a.shape[0] // 128):
        rows = slice(i * 128, (i + 1) * 128)
        tile = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=a[rows])
        acc = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=weights if i % 2 else tile, moving=tile)
        summed = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=summed, data1=acc, data2=tile, op=nl.add)
        nisa.activation(dst=summed, op=nl.exp if i % 3 else nl.tanh, data=summed)
        nisa.memset(dst=tile[0:32, :], value=0.0, engine=nisa.gpsimd_engine)
        scratch = nl.ndarray((128, 4096), dtype=nl.float32, buffer=nl.sbuf)
        zeroed = nisa.memset(dst=scratch, value=0.0, engine=nisa.gpsimd_engine)  # long: the edge decides
        nisa.dma_copy(dst=out[rows], src=summed).depends_on(zeroed)  # an edge, in or across batches
        nisa.dma_copy(dst=out[i * 128 : i * 128 + 1], src=tile[0:1, :])
    return out


def timeline_columns(profile) -> tuple:
    tl = profile.timeline
    return (
        tl.start_ns.tolist(), tl.end_ns.tolist(), tl.busy_ns.tolist(), tl.wait_ns.tolist(),
        tl.producer.tolist(), tl.pred.tolist(), tl.track_id.tolist(), tl.site_id.tolist(), list(tl.tracks),
    )  # fmt: skip


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_the_timeline_does_not_depend_on_the_batch_size(monkeypatch, target):
    """Placing one instruction at a time (the rules as stated) and in batches of 7 or 1024 give the same timeline."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((1024, 128), dtype=np.float32)
    w = rng.standard_normal((128, 128), dtype=np.float32)
    lhs, rhs = (rng.standard_normal((512, 512), dtype=np.float32) for _ in range(2))
    results = []
    for batch in (1, 7, 1024):
        monkeypatch.setattr(scheduler_module, "BATCH", batch)
        results.append(
            (
                timeline_columns(nkisim.run(mixed, [a, w], target=target).profile),
                timeline_columns(nkisim.profile(matmul_tiled, [lhs, rhs], target=target)),
            )
        )
    assert results[0] == results[1] == results[2]


def test_dependency_pool_grows_in_the_middle_of_a_batch():
    """4-byte columns of one tile written by separate instructions split every 64-byte cell into 16 segments
    on 128 rows: more segments per cell and more split cells than the pool starts with. Each later read of a
    column must wait for exactly the instruction that wrote it."""
    columns = 32

    def kernel(x):
        out = nl.ndarray((128, columns), dtype=nl.float32, buffer=nl.shared_hbm)
        tile = nl.ndarray((128, columns), dtype=nl.float32, buffer=nl.sbuf)
        for c in range(columns):
            nisa.memset(dst=tile[:, c : c + 1], value=float(c))
        for c in reversed(range(columns)):
            nisa.dma_copy(dst=out[:, c : c + 1], src=tile[:, c : c + 1])
        return out

    result = nkisim.run(kernel, [np.zeros(1, np.float32)])
    assert np.array_equal(result.outputs, np.tile(np.arange(columns, dtype=np.float32), (128, 1)))
    records = result.profile.instructions
    memsets = {r.index: c for c, r in enumerate(r for r in records if r.opcode == "memset")}
    copies = [r for r in records if r.opcode == "dma_copy"]
    assert [memsets[r.producer] for r in copies] == list(reversed(range(columns)))


@pytest.mark.parametrize("batch", [1, 7, 1024])
def test_arrays_that_start_with_room_for_one_grow_to_the_same_timeline(monkeypatch, batch):
    """Lanes, instruction tracks and calendars that must grow at nearly every instruction place as those with room."""
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal((1024, 128), dtype=np.float32), rng.standard_normal((128, 128), dtype=np.float32)]
    monkeypatch.setattr(scheduler_module, "BATCH", batch)
    roomy = timeline_columns(nkisim.run(mixed, inputs, target="trn2").profile)
    monkeypatch.setattr(scheduler_module, "FIRST_COMPUTE_LANES", 1)
    monkeypatch.setattr(scheduler_module, "FIRST_CALENDAR", 1)
    monkeypatch.setattr(tracker_module, "FIRST_INSTRUCTIONS", 1)
    assert timeline_columns(nkisim.run(mixed, inputs, target="trn2").profile) == roomy


def test_placement_names_the_deps_module_it_was_last_changed_with():
    """numba invalidates place_batch's cache only when placement.py changes, yet the cache holds deps.py's compiled
    scans: a change to deps.py must come with a change to placement.py (its DEPS_SHA256), or a stale cache could
    run the old scans on the new arrays."""
    source = Path(deps.__file__).read_text(encoding="utf-8").replace("\r\n", "\n")
    assert hashlib.sha256(source.encode()).hexdigest() == placement.DEPS_SHA256, (
        "nkisim/sim/deps.py changed: set placement.DEPS_SHA256 to its new SHA-256"
    )


def test_a_run_after_others_in_the_process_places_as_the_first_did():
    """Runs take the dependency arena a finished run left (stale cells, other grids): the timeline is the same."""
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((1024, 128), dtype=np.float32), rng.standard_normal((128, 128), dtype=np.float32)]
    first = timeline_columns(nkisim.run(mixed, inputs, target="trn2").profile)
    square = [rng.standard_normal((512, 512), dtype=np.float32) for _ in range(2)]
    nkisim.run(matmul_tiled, square, target="trn2")  # writes records all over the arena it leaves
    assert timeline_columns(nkisim.run(mixed, inputs, target="trn2").profile) == first
