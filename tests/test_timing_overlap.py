"""Timing of dependent and overlapping instructions and of whole kernels.

Every expected time is written in the test from the hardware numbers and the cost rules
of docs/timing.md, never read from nkisim's own output.
"""

from __future__ import annotations

import numpy as np
import pytest
from dma_reference import payload_efficiency
from timing_helpers import (
    REL,
    TARGETS,
    P,
    access_ns,
    dependent_ns,
    dma_bandwidth,
    dma_busy,
    dma_ns,
    load_stationary_ns,
    profile_of,
    psum,
    sbuf,
)

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.examples.tensor_add import nki_tensor_add
from nkisim.hw import load_target

# -- dependencies ---------------------------------------------------------------------


def test_same_engine_chain_has_no_semaphore():
    """No semaphore, but the access latency and the dependent-instruction overhead of the engine."""
    hw = load_target("trn1")
    n = 512

    def kernel():
        x, y = sbuf((P, n)), sbuf((P, n))
        nisa.memset(dst=x, value=1.0)
        nisa.tensor_scalar(dst=y, data=x, op0=nl.multiply, operand0=2.0)

    a, b = profile_of(kernel).instructions
    vec = hw.vector
    cost_a = max(vec.min_ii_cycles, n) / vec.clock_ghz
    cost_b = max(vec.min_ii_cycles, n) / vec.clock_ghz
    start_b = cost_a + access_ns(hw, "vector") + dependent_ns(hw, "vector")
    assert a.end_ns == pytest.approx(cost_a, rel=REL)
    assert b.start_ns == pytest.approx(start_b, rel=REL)
    assert b.end_ns == pytest.approx(start_b + cost_b, rel=REL)
    assert b.producer == a.index


@pytest.mark.parametrize("target", TARGETS)
def test_cross_engine_chain_pays_semaphore_latency(target):
    hw = load_target(target)
    n = 512

    def kernel():
        x, y, z = sbuf((P, n)), sbuf((P, n)), sbuf((P, n))
        nisa.memset(dst=x, value=1.0)  # Vector
        nisa.activation(dst=y, op=nl.exp, data=x)  # Scalar, reads x
        nisa.tensor_scalar(dst=z, data=y, op0=nl.add, operand0=1.0)  # Vector, reads y

    a, b, c = profile_of(kernel, target=target).instructions
    sem = hw.sync.semaphore_latency_ns
    cost_a = max(hw.vector.min_ii_cycles, n) / hw.vector.clock_ghz
    cost_b = hw.scalar.table_load_ns + max(hw.scalar.min_ii_cycles, n) / hw.scalar.clock_ghz  # exp's table first
    cost_c = max(hw.vector.min_ii_cycles, n) / hw.vector.clock_ghz
    lat_v, lat_s = access_ns(hw, "vector"), access_ns(hw, "scalar")
    assert (a.engine, b.engine, c.engine) == ("Vector", "Scalar", "Vector")
    assert b.start_ns == pytest.approx(cost_a + lat_v + sem, rel=REL)
    assert b.end_ns == pytest.approx(cost_a + lat_v + sem + cost_b, rel=REL)
    # c's producer is b, not the instruction before it on Vector: no dependent overhead
    assert c.start_ns == pytest.approx(b.end_ns + lat_s + sem, rel=REL)
    assert c.end_ns == pytest.approx(cost_a + lat_v + sem + cost_b + lat_s + sem + cost_c, rel=REL)


def test_compute_waits_for_dma_plus_semaphore():
    hw = load_target("trn1")
    n = 512

    def kernel(a):
        x, y = sbuf((P, n)), sbuf((P, n))
        nisa.dma_copy(dst=x, src=a)
        nisa.tensor_scalar(dst=y, data=x, op0=nl.multiply, operand0=3.0)

    load, op = profile_of(kernel, [np.zeros((P, n), np.float32)]).instructions
    dma_end = hw.dma.fixed_latency_ns + P * n * 4 / (dma_bandwidth(hw) * payload_efficiency(hw, n * 4))
    cost = max(hw.vector.min_ii_cycles, n) / hw.vector.clock_ghz
    assert load.end_ns == pytest.approx(dma_end, rel=REL)
    assert op.start_ns == pytest.approx(dma_end + hw.sync.semaphore_latency_ns, rel=REL)
    assert op.end_ns == pytest.approx(dma_end + hw.sync.semaphore_latency_ns + cost, rel=REL)


def test_dma_waits_for_compute_plus_semaphore():
    hw = load_target("trn1")
    n = 256

    def kernel():
        out = nl.ndarray((P, n), dtype=nl.float32, buffer=nl.shared_hbm)
        x = sbuf((P, n))
        nisa.memset(dst=x, value=2.0)
        nisa.dma_copy(dst=out, src=x)
        return out

    fill, store = profile_of(kernel).instructions
    fill_end = max(hw.vector.min_ii_cycles, n) / hw.vector.clock_ghz
    assert fill.end_ns == pytest.approx(fill_end, rel=REL)
    start = fill_end + access_ns(hw, "vector") + hw.sync.semaphore_latency_ns
    assert store.start_ns == pytest.approx(start, rel=REL)
    assert store.end_ns == pytest.approx(start + dma_ns(hw, P * n * 4, run=n * 4), rel=REL)


def test_dma_waits_for_dma_on_another_queue():
    """Load a tile, then store it: the store's queue waits for the load's queue by semaphore."""
    hw = load_target("trn1")
    n = 512
    nbytes = P * n * 4

    def kernel(a):
        out = nl.ndarray((P, n), dtype=nl.float32, buffer=nl.shared_hbm)
        x = sbuf((P, n))
        nisa.dma_copy(dst=x, src=a)
        nisa.dma_copy(dst=out, src=x)
        return out

    load, store = profile_of(kernel, [np.zeros((P, n), np.float32)]).instructions
    assert load.engine != store.engine
    # a DMA's result is visible at its end: no access latency
    start = dma_ns(hw, nbytes, run=n * 4) + hw.sync.semaphore_latency_ns
    assert store.start_ns == pytest.approx(start, rel=REL)
    assert store.end_ns == pytest.approx(start + dma_ns(hw, nbytes, run=n * 4), rel=REL)


def test_semaphore_latency_applies_to_each_cross_engine_producer():
    """C reads x (loaded by DMA) and y (set by Vector, visible just after the DMA ends).

    C runs on Vector, so y costs no semaphore, but x does: C may start only at
    ``max(end(y) + access latency, end(x) + semaphore)``. Its latest producer is the DMA,
    not the memset just before it on Vector, so it pays no dependent-instruction overhead.
    """
    hw = load_target("trn1")
    n = 512
    dma_end = dma_ns(hw, P * n * 4, run=n * 4)
    sem, lat = hw.sync.semaphore_latency_ns, access_ns(hw, "vector")
    # y becomes visible half a semaphore after the DMA: later than the DMA, earlier than DMA + semaphore.
    n_y = round((dma_end + sem / 2 - lat) * hw.vector.clock_ghz)
    y_end = max(hw.vector.min_ii_cycles, n_y) / hw.vector.clock_ghz
    assert dma_end < y_end + lat < dma_end + sem

    def kernel(a):
        x, y, z = sbuf((P, n)), sbuf((P, n_y)), sbuf((P, n))
        nisa.dma_copy(dst=x, src=a)
        nisa.memset(dst=y, value=1.0)
        nisa.tensor_tensor(dst=z, data1=x, data2=y[:, 0:n], op=nl.add)

    load, fill, add = profile_of(kernel, [np.zeros((P, n), np.float32)]).instructions
    assert load.end_ns == pytest.approx(dma_end, rel=REL)
    assert fill.end_ns == pytest.approx(y_end, rel=REL)
    assert add.start_ns == pytest.approx(max(y_end + lat, dma_end + sem), rel=REL)
    assert add.producer == load.index


def test_war_compute_write_waits_for_earlier_reader():
    """memset overwrites x, which activation (another engine) is still reading."""
    hw = load_target("trn1")
    n_read, n = 4096, 512

    def kernel():
        x, y, other = sbuf((P, n_read)), sbuf((P, n_read)), sbuf((P, n))
        nisa.activation(dst=y, op=nl.exp, data=x)  # Scalar reads x
        nisa.memset(dst=other, value=0.0)  # Vector, independent: starts at once
        nisa.memset(dst=x[:, 0:n], value=0.0)  # Vector writes x: waits for the reader

    act, free_fill, war_fill = profile_of(kernel).instructions
    act_end = hw.scalar.table_load_ns + max(hw.scalar.min_ii_cycles, n_read) / hw.scalar.clock_ghz  # exp's table first
    fill = max(hw.vector.min_ii_cycles, n) / hw.vector.clock_ghz
    assert act.end_ns == pytest.approx(act_end, rel=REL)
    assert free_fill.start_ns == 0.0
    assert free_fill.end_ns == pytest.approx(fill, rel=REL)
    # the reader is done reading at its end; the writer waits for that, plus a semaphore
    start = act_end + hw.sync.semaphore_latency_ns
    assert war_fill.start_ns == pytest.approx(start, rel=REL)
    assert war_fill.end_ns == pytest.approx(start + fill, rel=REL)
    assert war_fill.producer == act.index


def test_war_dma_write_waits_for_earlier_reader():
    """A DMA load into x must not start before the Vector instruction reading x is done."""
    hw = load_target("trn1")
    n = 2048

    def kernel(a):
        x, y = sbuf((P, n)), sbuf((P, n))
        nisa.tensor_scalar(dst=y, data=x, op0=nl.add, operand0=1.0)
        nisa.dma_copy(dst=x, src=a)

    read, load = profile_of(kernel, [np.zeros((P, n), np.float32)]).instructions
    read_end = max(hw.vector.min_ii_cycles, n) / hw.vector.clock_ghz
    assert read.end_ns == pytest.approx(read_end, rel=REL)
    start = read_end + hw.sync.semaphore_latency_ns  # a write waits for the reader's end, not its latency
    assert load.start_ns == pytest.approx(start, rel=REL)
    assert load.end_ns == pytest.approx(start + dma_ns(hw, P * n * 4, run=n * 4), rel=REL)


def test_waw_second_writer_waits_for_first():
    hw = load_target("trn1")
    n = 1024

    def kernel():
        x, src = sbuf((P, n)), sbuf((P, n))
        nisa.memset(dst=x, value=1.0)  # Vector
        nisa.activation(dst=x, op=nl.exp, data=src)  # Scalar, overwrites x

    first, second = profile_of(kernel).instructions
    first_end = max(hw.vector.min_ii_cycles, n) / hw.vector.clock_ghz
    assert first.end_ns == pytest.approx(first_end, rel=REL)
    start = first_end + access_ns(hw, "vector") + hw.sync.semaphore_latency_ns
    assert second.start_ns == pytest.approx(start, rel=REL)


def test_independent_instructions_on_one_engine_run_in_program_order():
    hw = load_target("trn1")
    sizes = (512, 100, 2048)

    def kernel():
        tiles = [sbuf((P, n)) for n in sizes]
        for tile in tiles:
            nisa.memset(dst=tile, value=1.0)

    recs = profile_of(kernel).instructions
    t = 0.0
    for rec, n in zip(recs, sizes):
        assert rec.start_ns == pytest.approx(t, rel=REL, abs=1e-9)
        t += max(hw.vector.min_ii_cycles, n) / hw.vector.clock_ghz
        assert rec.end_ns == pytest.approx(t, rel=REL)


@pytest.mark.parametrize("target", TARGETS)
def test_independent_instructions_on_different_engines_run_in_parallel(target):
    """Each engine starts at once, except the matmul after its LoadStationary and, on
    NeuronCore-v2, GpSimd after Vector: they share an SBUF port."""
    hw = load_target(target)
    n = 1024

    def kernel():
        # Every tile stays referenced, so none is freed and reused (which would order them).
        v, s_in, s_out, g = sbuf((P, n)), sbuf((P, n)), sbuf((P, n)), sbuf((P, n), nl.int32)
        st, mv, acc = sbuf((P, P), nl.bfloat16), sbuf((P, 512), nl.bfloat16), psum((P, 512))
        nisa.memset(dst=v, value=1.0)  # Vector
        nisa.activation(dst=s_out, op=nl.exp, data=s_in)  # Scalar
        nisa.iota(dst=g, pattern=[[1, n]], offset=0)  # GpSimd
        nisa.nc_matmul(dst=acc, stationary=st, moving=mv)  # Tensor

    prof = profile_of(kernel, target=target)
    memset_ns = max(hw.vector.min_ii_cycles, n) / hw.vector.clock_ghz
    shared_sbuf_port = any({"vector", "gpsimd"} <= set(p.engines) and p.memory == "sbuf" for p in hw.ports)
    assert shared_sbuf_port == (target == "trn1")
    starts = [0.0, 0.0, memset_ns if shared_sbuf_port else 0.0, load_stationary_ns(hw, P)]
    costs = [
        memset_ns,
        hw.scalar.table_load_ns + max(hw.scalar.min_ii_cycles, n) / hw.scalar.clock_ghz,  # exp's table first
        (hw.gpsimd.startup_cycles + n) / hw.gpsimd.clock_ghz,
        max(min(hw.tensor.matmul_min_ii_cycles, P), 512) / hw.tensor.clock_ghz,
    ]
    for rec, start, cost in zip(prof.instructions, starts, costs, strict=True):
        assert rec.start_ns == pytest.approx(start, rel=REL, abs=1e-9)
        assert rec.duration_ns == pytest.approx(cost, rel=REL)
    assert prof.total_ns == pytest.approx(max(s + c for s, c in zip(starts, costs)), rel=REL)


# -- overlap and shared bandwidth -----------------------------------------------------


def test_independent_dma_and_compute_overlap():
    hw = load_target("trn1")
    n_dma, n_vec, k = 512, 2048, 3

    def kernel(a):
        t, x, y = sbuf((P, n_dma)), sbuf((P, n_vec)), sbuf((P, n_vec))
        nisa.dma_copy(dst=t, src=a)
        for _ in range(k):
            nisa.tensor_tensor(dst=y, data1=x, data2=x, op=nl.multiply)

    prof = profile_of(kernel, [np.zeros((P, n_dma), np.float32)])
    dma_end = dma_ns(hw, P * n_dma * 4, run=n_dma * 4)
    # each multiply overwrites the previous one's y (WAW, no read of it): only the access latency between them
    gap = access_ns(hw, "vector")
    vec_end = k * max(hw.vector.min_ii_cycles, 2 * n_vec) / hw.vector.clock_ghz + (k - 1) * gap
    assert [rec.start_ns for rec in prof.instructions[:2]] == [0.0, 0.0]
    assert prof.total_ns == pytest.approx(max(dma_end, vec_end), rel=REL)
    assert prof.total_ns < dma_end + vec_end


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("n1", "n2"), [(512, 512), (2048, 256)])
def test_two_independent_dmas_share_bandwidth(target, n1, n2):
    """Both start at once on two queues and overlap their fixed latency, but their bytes share the engines."""
    hw = load_target(target)
    b1, b2 = P * n1 * 4, P * n2 * 4
    lat = hw.dma.fixed_latency_ns
    busy1, busy2 = dma_busy(hw, b1, run=n1 * 4), dma_busy(hw, b2, run=n2 * 4)

    def kernel(a, b):
        x, y = sbuf((P, n1)), sbuf((P, n2))
        nisa.dma_copy(dst=x, src=a)
        nisa.dma_copy(dst=y, src=b)

    prof = profile_of(kernel, [np.zeros((P, n1), np.float32), np.zeros((P, n2), np.float32)], target=target)
    first, second = prof.instructions
    assert first.engine != second.engine
    assert first.start_ns == second.start_ns == 0.0
    # both use all 16 engines (128 partitions): the second waits on every engine for the first
    assert first.end_ns == pytest.approx(lat + busy1, rel=REL)
    assert second.end_ns == pytest.approx(lat + busy1 + busy2, rel=REL)
    assert prof.total_ns == pytest.approx(lat + busy1 + busy2, rel=REL)
    # Cheaper than two DMAs back to back (shared latency), dearer than one alone (shared bandwidth).
    assert prof.total_ns < dma_ns(hw, b1, n1 * 4) + dma_ns(hw, b2, n2 * 4)
    assert prof.total_ns > max(dma_ns(hw, b1, n1 * 4), dma_ns(hw, b2, n2 * 4))
    assert prof.engine_busy_ns["DMA"] == pytest.approx(busy1 + busy2, rel=REL)


def test_many_independent_dmas_are_bandwidth_bound():
    hw = load_target("trn1")
    k, n = 6, 512
    nbytes = P * n * 4

    def kernel(a):
        tiles = [sbuf((P, n)) for _ in range(k)]
        for i, tile in enumerate(tiles):
            nisa.dma_copy(dst=tile, src=a[:, i * n : (i + 1) * n])

    prof = profile_of(kernel, [np.zeros((P, k * n), np.float32)])
    assert len({rec.engine for rec in prof.instructions}) == k
    busy = dma_busy(hw, nbytes, run=n * 4)  # the HBM slices are rows of n elements too
    for i, rec in enumerate(prof.instructions):
        assert rec.end_ns == pytest.approx(hw.dma.fixed_latency_ns + (i + 1) * busy, rel=REL)


def test_dma_beyond_the_queue_count_waits_for_a_free_queue():
    """With every queue busy, one more DMA waits for the queue that frees first, then pays its own latency."""
    hw = load_target("trn1")
    q, n = hw.dma.queues, 1
    nbytes = P * n * 4
    lat, busy = hw.dma.fixed_latency_ns, dma_busy(hw, nbytes, run=n * 4)
    # Tiny transfers: the 17th DMA is limited by its queue and latency, not by the engines.
    assert lat + busy + lat > lat + q * busy

    def kernel(a):
        tiles = [sbuf((P, n)) for _ in range(q + 1)]
        for i, tile in enumerate(tiles):
            nisa.dma_copy(dst=tile, src=a[:, i * n : (i + 1) * n])

    recs = profile_of(kernel, [np.zeros((P, (q + 1) * n), np.float32)]).instructions
    assert len({rec.engine for rec in recs[:q]}) == q
    for i, rec in enumerate(recs[:q]):
        assert rec.start_ns == 0.0
        assert rec.end_ns == pytest.approx(lat + (i + 1) * busy, rel=REL)
    last = recs[q]
    assert last.engine == recs[0].engine  # the queue that frees first
    assert last.start_ns == pytest.approx(lat + busy, rel=REL)
    assert last.end_ns == pytest.approx(last.start_ns + lat + busy, rel=REL)


def test_dma_bandwidth_booking_fills_the_first_gap_that_fits():
    """A store waits for long Vector work; a later small load fits in the engines' gap before it, a big one not."""
    hw = load_target("trn1")
    lat, sem = hw.dma.fixed_latency_ns, hw.sync.semaphore_latency_ns
    n_a, n_z, n_s, n_y, n_w = 512, 4096, 512, 512, 2048
    busy_a, busy_s, busy_y, busy_w = (dma_busy(hw, P * n * 4, run=n * 4) for n in (n_a, n_s, n_y, n_w))
    z_end = max(hw.vector.min_ii_cycles, n_z) / hw.vector.clock_ghz
    store_data = z_end + access_ns(hw, "vector") + sem + lat
    gap = (lat + busy_a, store_data)
    assert busy_y <= gap[1] - gap[0] < busy_y + busy_w

    def kernel(a, y, w):
        out = nl.ndarray((P, n_s), dtype=nl.float32, buffer=nl.shared_hbm)
        ta, tz, ty, tw = sbuf((P, n_a)), sbuf((P, n_z)), sbuf((P, n_y)), sbuf((P, n_w))
        nisa.dma_copy(dst=ta, src=a)
        nisa.memset(dst=tz, value=1.0)
        nisa.dma_copy(dst=out, src=tz[:, 0:n_s])
        nisa.dma_copy(dst=ty, src=y)
        nisa.dma_copy(dst=tw, src=w)
        return out

    inputs = [np.zeros((P, n), np.float32) for n in (n_a, n_y, n_w)]
    load_a, fill, store, load_y, load_w = profile_of(kernel, inputs).instructions
    assert load_a.end_ns == pytest.approx(lat + busy_a, rel=REL)
    assert fill.end_ns == pytest.approx(z_end, rel=REL)
    assert store.start_ns == pytest.approx(store_data - lat, rel=REL)
    assert store.end_ns == pytest.approx(store_data + busy_s, rel=REL)
    assert load_y.start_ns == 0.0
    assert load_y.end_ns == pytest.approx(lat + busy_a + busy_y, rel=REL)  # in the gap
    assert load_w.start_ns == 0.0
    assert load_w.end_ns == pytest.approx(store_data + busy_s + busy_w, rel=REL)  # after the store


# -- whole kernels --------------------------------------------------------------------


@pytest.fixture
def tensor_add():
    """The tiled add of the tensor_add example: per [128, 512] block, load a and b, add on Vector, store."""
    return nki_tensor_add


def test_single_tile_tensor_add_timeline(tensor_add):
    """load a, load b (sharing bandwidth), add on Vector, store c: every time from the formulas."""
    hw = load_target("trn1")
    a = np.ones((P, 512), np.float32)
    prof = nkisim.run(tensor_add, [a, a]).profile
    load_a, load_b, add, store = prof.instructions
    lat, sem = hw.dma.fixed_latency_ns, hw.sync.semaphore_latency_ns
    busy = dma_busy(hw, P * 512 * 4, run=512 * 4)
    add_cost = max(hw.vector.min_ii_cycles, 2 * 512) / hw.vector.clock_ghz

    assert load_a.end_ns == pytest.approx(lat + busy, rel=REL)
    assert load_b.end_ns == pytest.approx(lat + 2 * busy, rel=REL)
    assert add.start_ns == pytest.approx(lat + 2 * busy + sem, rel=REL)
    assert add.end_ns == pytest.approx(lat + 2 * busy + sem + add_cost, rel=REL)
    assert store.start_ns == pytest.approx(add.end_ns + access_ns(hw, "vector") + sem, rel=REL)
    expected_total = (lat + 2 * busy) + sem + add_cost + access_ns(hw, "vector") + sem + (lat + busy)
    assert prof.total_ns == pytest.approx(expected_total, rel=REL)


def test_doubling_streaming_data_roughly_doubles_time(tensor_add):
    small = np.ones((256, 1024), np.float32)
    large = np.ones((512, 1024), np.float32)
    t_small = nkisim.run(tensor_add, [small, small]).profile.total_ns
    t_large = nkisim.run(tensor_add, [large, large]).profile.total_ns
    assert 1.7 < t_large / t_small < 2.3


def test_streaming_kernel_is_dma_bound(tensor_add):
    """The add moves 3 tiles per 2N-cycle Vector op: total time is at least the bytes over the bandwidth."""
    hw = load_target("trn1")
    a = np.ones((512, 1024), np.float32)
    prof = nkisim.run(tensor_add, [a, a]).profile
    tiles = (512 // 128) * (1024 // 512)
    bytes_moved = 3 * tiles * P * 512 * 4
    # every transfer spans the 128 partitions (all 16 engines) in rows of 512 fp32
    dma_time = dma_busy(hw, bytes_moved, run=512 * 4)
    assert prof.total_ns >= hw.dma.fixed_latency_ns + dma_time
    assert prof.engine_busy_ns["DMA"] == pytest.approx(dma_time, rel=REL)
    vec = tiles * max(hw.vector.min_ii_cycles, 2 * 512) / hw.vector.clock_ghz
    assert prof.engine_busy_ns["Vector"] == pytest.approx(vec, rel=REL)


def test_runs_are_deterministic(tensor_add):
    a = np.arange(256 * 1024, dtype=np.float32).reshape(256, 1024)
    first = nkisim.run(tensor_add, [a, a]).profile
    second = nkisim.run(tensor_add, [a, a]).profile
    assert first.instructions == second.instructions
    assert first.total_ns == second.total_ns
    assert first.total_cycles == second.total_cycles
    assert first.engine_busy_ns == second.engine_busy_ns
    assert first.summary() == second.summary()


def _vector_bound(k, n):
    def kernel():
        a, b, c = sbuf((P, n)), sbuf((P, n)), sbuf((P, n))
        for _ in range(k):
            nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.subtract)

    return kernel


@pytest.mark.parametrize("target", TARGETS)
def test_vector_bound_kernel_time_per_generation(target):
    hw = load_target(target)
    k, n = 8, 1024
    prof = profile_of(_vector_bound(k, n), target=target)
    # each subtract overwrites the c of the one before (WAW, no read of it): only the access latency between them
    gap = access_ns(hw, "vector")
    expected = k * max(hw.vector.min_ii_cycles, 2 * n) / hw.vector.clock_ghz + (k - 1) * gap
    assert prof.total_ns == pytest.approx(expected, rel=REL)


def test_generations_differ_as_their_vector_clocks_say():
    k, n = 8, 1024
    totals = {t: profile_of(_vector_bound(k, n), target=t).total_ns for t in TARGETS}
    clocks = {t: load_target(t).vector.clock_ghz for t in TARGETS}
    assert totals["trn1"] / totals["trn2"] == pytest.approx(clocks["trn2"] / clocks["trn1"], rel=REL)
    assert totals["trn1"] / totals["trn3"] == pytest.approx(clocks["trn3"] / clocks["trn1"], rel=REL)
    assert totals["trn2"] / totals["trn3"] == pytest.approx(clocks["trn3"] / clocks["trn2"], rel=REL)
    # trn2's Vector Engine (0.96 GHz) is the slowest, trn3's (1.2 GHz) the fastest.
    assert totals["trn3"] < totals["trn1"] < totals["trn2"]


@pytest.mark.parametrize("target", TARGETS)
def test_load_then_vector_chain_per_generation(target):
    """A Vector-bound kernel fed by one DMA: the DMA formula, a semaphore, then the dependent Vector chain."""
    hw = load_target(target)
    k, n = 6, 1024

    def kernel(a):
        x, y = sbuf((P, n)), sbuf((P, n))
        nisa.dma_copy(dst=x, src=a)
        for _ in range(k):
            nisa.tensor_tensor(dst=y, data1=x, data2=y, op=nl.add)

    prof = profile_of(kernel, [np.zeros((P, n), np.float32)], target=target)
    expected = (
        dma_ns(hw, P * n * 4, run=n * 4)
        + hw.sync.semaphore_latency_ns
        + k * max(hw.vector.min_ii_cycles, 2 * n) / hw.vector.clock_ghz
        + (k - 1) * (access_ns(hw, "vector") + dependent_ns(hw, "vector"))
    )
    assert prof.total_ns == pytest.approx(expected, rel=REL)
