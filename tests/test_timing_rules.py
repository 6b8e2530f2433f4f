"""The timing rules of docs/timing.md, one small hand-computed case each.

1. A compute result is visible ``access_latency_cycles`` (engine clock) after the
   instruction ends; Tensor and Sync results at once. ``end_ns`` is start + busy.
2. An instruction whose latest producer is the instruction just before it on the same
   engine pays ``dependent_overhead_cycles`` first (not on the Tensor Engine).
3. LoadStationary (``M * load_stationary_cycles_per_column``, x4 for fp32) runs on its
   own stage from max(data ready, previous load's end, previous matmul's start); the
   matmul starts at max(ready, engine free, load end). The same stationary tile as the
   previous matmul's is not loaded again.
4. The Scalar Engine pays ``table_load_ns`` when an activation other than the identity
   needs another table than the one loaded (none is loaded when the kernel starts).
5. NeuronCore-v2: Vector and GpSimd instructions touching SBUF never overlap, nor Vector
   and Scalar instructions touching PSUM.
6. DMA: the on-chip side's partitions choose the engines (8 partitions each; HBM to HBM:
   all 16); rate = engines x bytes_per_ns_per_engine, capped by HBM bandwidth when HBM
   is involved, times the payload efficiency of the shortest contiguous run (in elements,
   counted in the bytes of the wider dtype when the copy casts); each engine
   is booked on its own calendar after the fixed latency; the transfer ends with its
   last engine.
7. Performance modes and wide strides: tests/test_timing_modes.py.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from dma_reference import payload_efficiency

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.hw import load_target

REL = 1e-9
P = 128
#: trn2's payload efficiency at 1 KiB, fitted on the calibration half of the nki-library oracle.
TRN2_AT_1K = 0.34
TARGETS = ("trn1", "trn2", "trn3")
TITLES = {"vector": "Vector", "scalar": "Scalar", "gpsimd": "GpSimd"}


def sbuf(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


def psum(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.psum)


def records(kernel, inputs=(), target="trn1"):
    return nkisim.run(kernel, list(inputs), target=target).profile.instructions


def ns(cfg, cycles):
    """``cycles`` of an engine at its clock."""
    return cycles / cfg.clock_ghz


def element_ns(cfg, n):
    """``max(MIN_II, N)`` cycles: one element per lane per cycle."""
    return ns(cfg, max(cfg.min_ii_cycles, n))


def access_ns(cfg):
    return ns(cfg, cfg.access_latency_cycles)


def dependent_ns(cfg):
    return ns(cfg, cfg.dependent_overhead_cycles)


def load_stationary_ns(hw, m, fp32=False):
    factor = hw.tensor.fp32_cycle_factor if fp32 else 1
    return ns(hw.tensor, m * hw.tensor.load_stationary_cycles_per_column * factor)


def matmul_ns(hw, m, n, fp32=False):
    factor = hw.tensor.fp32_cycle_factor if fp32 else 1
    return ns(hw.tensor, max(min(hw.tensor.matmul_min_ii_cycles, m), n) * factor)


# -- 1. access latency ----------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_a_compute_result_is_visible_an_access_latency_after_its_end(target):
    hw = load_target(target)
    n, sem = 512, hw.sync.semaphore_latency_ns

    def kernel():
        x, y, z = sbuf((P, n)), sbuf((P, n)), sbuf((P, n))
        nisa.memset(dst=x, value=1.0)  # Vector
        nisa.activation(dst=y, op=nl.exp, data=x)  # Scalar reads x
        nisa.tensor_copy(dst=z, src=y, engine=nisa.gpsimd_engine)  # GpSimd reads y

    fill, act, copy = records(kernel, target=target)
    assert hw.vector.access_latency_cycles == hw.scalar.access_latency_cycles == hw.gpsimd.access_latency_cycles == 60
    # the records keep start + busy; only consumers see the latency
    assert fill.start_ns == 0.0
    assert fill.end_ns == pytest.approx(element_ns(hw.vector, n), rel=REL)
    assert act.start_ns == pytest.approx(fill.end_ns + access_ns(hw.vector) + sem, rel=REL)
    assert act.duration_ns == pytest.approx(hw.scalar.table_load_ns + element_ns(hw.scalar, n), rel=REL)  # table first
    assert copy.start_ns == pytest.approx(act.end_ns + access_ns(hw.scalar) + sem, rel=REL)
    assert copy.duration_ns == pytest.approx(element_ns(hw.gpsimd, n), rel=REL)


def test_the_kernel_ends_with_its_last_instruction_not_its_access_latency():
    hw = load_target("trn1")

    def kernel():
        nisa.memset(dst=sbuf((P, 512)), value=1.0)

    prof = nkisim.run(kernel, [], target="trn1").profile
    assert prof.total_ns == pytest.approx(element_ns(hw.vector, 512), rel=REL)


@pytest.mark.parametrize("target", TARGETS)
def test_tensor_and_sync_results_are_visible_at_their_end(target):
    hw = load_target(target)
    sem = hw.sync.semaphore_latency_ns
    assert hw.sync_engine.access_latency_cycles == 0
    assert not hasattr(hw.tensor, "access_latency_cycles")

    def kernel():
        acc = psum((P, 64))
        nisa.nc_matmul(dst=acc, stationary=sbuf((P, P), nl.bfloat16), moving=sbuf((P, 64), nl.bfloat16))
        nisa.tensor_copy(dst=sbuf((P, 64)), src=acc)  # Vector reads the matmul's PSUM
        reg = nisa.register_alloc(7)
        word = sbuf((1, 1), nl.int32)
        nisa.register_store(dst=word, src=reg)  # Sync writes SBUF
        nisa.activation(dst=sbuf((1, 1)), op=nl.exp, data=word)  # Scalar reads it

    matmul, copy, store, act = records(kernel, target=target)
    assert (matmul.engine, store.engine) == ("Tensor", "Sync")
    assert copy.start_ns == pytest.approx(matmul.end_ns + sem, rel=REL)
    assert act.start_ns == pytest.approx(store.end_ns + sem, rel=REL)


# -- 2. dependent back-to-back overhead ------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("engine", ["vector", "scalar", "gpsimd"])
def test_reading_the_instruction_just_before_costs_the_dependent_overhead(target, engine):
    """A -> B (B reads A, just before it): B waits access latency + overhead after A's end.
    C is independent: it follows B at once. D reads B, but C came between: no overhead."""
    hw = load_target(target)
    cfg = getattr(hw, engine)
    n = 512

    def copy(dst, src):
        if engine == "scalar":  # tensor_copy needs v3 on Scalar; the identity activation is the same cost
            nisa.activation(dst=dst, op=nl.copy, data=src)
        else:
            nisa.tensor_copy(dst=dst, src=src, engine=getattr(nisa, f"{engine}_engine"))

    def kernel():
        x, y, z, w = sbuf((P, n)), sbuf((P, n)), sbuf((P, n)), sbuf((P, n))
        copy(x, sbuf((P, n)))  # A
        copy(y, x)  # B reads A
        copy(z, sbuf((P, n)))  # C, independent
        copy(w, y)  # D reads B

    a, b, c, d = records(kernel, target=target)
    cost = element_ns(cfg, n)
    assert cfg.dependent_overhead_cycles == 100
    assert {r.engine for r in (a, b, c, d)} == {TITLES[engine]}
    assert a.end_ns == pytest.approx(cost, rel=REL)
    assert b.start_ns == pytest.approx(a.end_ns + access_ns(cfg) + dependent_ns(cfg), rel=REL)
    assert c.start_ns == pytest.approx(b.end_ns, rel=REL)
    # B's result was visible long before: D starts when C frees the engine
    assert b.end_ns + access_ns(cfg) < c.end_ns
    assert d.start_ns == pytest.approx(c.end_ns, rel=REL)
    assert d.producer == b.index


@pytest.mark.parametrize("target", TARGETS)
def test_overwriting_without_reading_pays_no_dependent_overhead(target):
    """B overwrites A's dst without reading it (WAW): it waits for A's result, with no overhead."""
    hw = load_target(target)
    n = 512

    def kernel():
        x = sbuf((P, n))
        nisa.tensor_copy(dst=x, src=sbuf((P, n)))  # A
        nisa.tensor_copy(dst=x, src=sbuf((P, n)))  # B overwrites x

    a, b = records(kernel, target=target)
    assert b.producer == a.index
    assert b.start_ns == pytest.approx(a.end_ns + access_ns(hw.vector), rel=REL)


def test_the_tensor_engine_pays_no_dependent_overhead():
    """Two matmuls accumulating into one PSUM tile with the same stationary: back to back."""
    hw = load_target("trn1")

    def kernel():
        acc, st = psum((P, 512)), sbuf((P, P), nl.bfloat16)
        nisa.nc_matmul(dst=acc, stationary=st, moving=sbuf((P, 512), nl.bfloat16))
        nisa.nc_matmul(dst=acc, stationary=st, moving=sbuf((P, 512), nl.bfloat16), accumulate=True)

    first, second = records(kernel)
    assert second.producer == first.index
    assert first.start_ns == pytest.approx(load_stationary_ns(hw, P), rel=REL)
    assert second.start_ns == pytest.approx(first.end_ns, rel=REL)
    assert second.duration_ns == pytest.approx(matmul_ns(hw, P, 512), rel=REL)


# -- 3. LoadStationary ---------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("m", "dtype"), [(128, "bfloat16"), (32, "bfloat16"), (128, "float32")])
def test_a_lone_matmul_loads_its_stationary_first(target, m, dtype):
    hw = load_target(target)
    fp32 = dtype == "float32"
    assert hw.tensor.load_stationary_cycles_per_column == 0.25  # 128 columns in ~32 cycles

    def kernel():
        dt = getattr(nl, dtype)
        nisa.nc_matmul(dst=psum((m, 256)), stationary=sbuf((P, m), dt), moving=sbuf((P, 256), dt))

    (rec,) = records(kernel, target=target)
    assert rec.start_ns == pytest.approx(m * 0.25 * (4 if fp32 else 1) / hw.tensor.clock_ghz, rel=REL)
    assert rec.duration_ns == pytest.approx(matmul_ns(hw, m, 256, fp32), rel=REL)


def test_the_next_stationary_loads_while_the_previous_matmul_runs():
    hw = load_target("trn1")

    def kernel():
        bf = nl.bfloat16
        nisa.nc_matmul(dst=psum((P, 512)), stationary=sbuf((P, P), bf), moving=sbuf((P, 512), bf))
        nisa.nc_matmul(dst=psum((P, 512)), stationary=sbuf((P, P), bf), moving=sbuf((P, 512), bf))

    first, second = records(kernel)
    ls = load_stationary_ns(hw, P)
    assert first.start_ns == pytest.approx(ls, rel=REL)
    # the second load runs from ls to 2 ls, well inside the first matmul
    assert 2 * ls < first.end_ns
    assert second.start_ns == pytest.approx(first.end_ns, rel=REL)


@pytest.mark.parametrize("same_stationary", [True, False])
def test_a_repeated_stationary_is_not_loaded_again(same_stationary):
    """The second matmul waits for a moving tile made on Vector; then it needs a load only for a new stationary."""
    hw = load_target("trn1")
    n = 512

    def kernel():
        bf = nl.bfloat16
        st, late = sbuf((P, P), bf), sbuf((P, n), bf)
        nisa.nc_matmul(dst=psum((P, n)), stationary=st, moving=sbuf((P, n), bf))
        nisa.memset(dst=late, value=1.0)
        second_st = st if same_stationary else sbuf((P, P), bf)
        nisa.nc_matmul(dst=psum((P, n)), stationary=second_st, moving=late)

    first, fill, second = records(kernel)
    ready = element_ns(hw.vector, n) + access_ns(hw.vector) + hw.sync.semaphore_latency_ns
    assert fill.end_ns == pytest.approx(element_ns(hw.vector, n), rel=REL)
    assert first.end_ns < ready
    expected = ready if same_stationary else ready + load_stationary_ns(hw, P)
    assert second.start_ns == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("between", ["rewrite", "transpose"])
def test_the_stationary_is_loaded_again_after_a_rewrite_or_a_transpose(between):
    """Same stationary region, but rewritten (or replaced by a Tensor Engine transpose) in between: a new load."""
    hw = load_target("trn1")
    n = 512

    def kernel():
        bf = nl.bfloat16
        st = sbuf((P, P), bf)
        nisa.nc_matmul(dst=psum((P, n)), stationary=st, moving=sbuf((P, n), bf))
        if between == "rewrite":
            nisa.memset(dst=st, value=2.0)
        else:
            nisa.nc_transpose(dst=psum((P, P), bf), data=sbuf((P, P), bf))
        nisa.nc_matmul(dst=psum((P, n)), stationary=st, moving=sbuf((P, n), bf))

    first, middle, second = records(kernel)
    ls = load_stationary_ns(hw, P)
    if between == "rewrite":  # the load waits for the memset's result to be readable, plus a semaphore
        ready = middle.end_ns + access_ns(hw.vector) + hw.sync.semaphore_latency_ns
        assert second.start_ns == pytest.approx(max(ready + ls, first.end_ns), rel=REL)
    else:  # the load overlaps the transpose, which holds the engine until its end
        assert second.start_ns == pytest.approx(max(middle.end_ns, middle.start_ns + ls), rel=REL)
    assert second.duration_ns == pytest.approx(matmul_ns(hw, P, n), rel=REL)


def test_a_load_never_starts_before_the_previous_matmul():
    """The first matmul waits for late data; the second's long fp32 load cannot run ahead of it."""
    hw = load_target("trn1")

    def kernel():
        bf, f32 = nl.bfloat16, nl.float32
        late = sbuf((P, 1), bf)
        nisa.memset(dst=late, value=1.0)
        nisa.nc_matmul(dst=psum((1, 1)), stationary=sbuf((P, 1), bf), moving=late)  # 1 column, 1 cycle
        nisa.nc_matmul(dst=psum((P, 1)), stationary=sbuf((P, P), f32), moving=sbuf((P, 1), f32))

    fill, first, second = records(kernel)
    assert fill.end_ns == pytest.approx(element_ns(hw.vector, 1), rel=REL)
    ready = fill.end_ns + access_ns(hw.vector) + hw.sync.semaphore_latency_ns
    first_load, second_load = load_stationary_ns(hw, 1), load_stationary_ns(hw, P, fp32=True)
    assert first.start_ns == pytest.approx(ready + first_load, rel=REL)
    assert first.duration_ns == pytest.approx(ns(hw.tensor, 1), rel=REL)
    # the second load starts with the first matmul and outlasts it
    assert second_load > first.duration_ns
    assert second.start_ns == pytest.approx(first.start_ns + second_load, rel=REL)
    assert second.duration_ns == pytest.approx(matmul_ns(hw, P, 1, fp32=True), rel=REL)


# -- 4. Scalar activation tables ------------------------------------------------------


def test_the_activation_table_load_is_the_published_profiles_act_table_load():
    # https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/get-started/about/nki-dma-overview.html
    # trn2 profiles of load -> exp -> store: ScalarE loads the exp table before the exp, from
    # 25,057 to 26,340 ns in Example 1 (A[4,4096]) and from 34,843 to 36,127 ns in Example 2 (A[128,128]).
    readings = [26_340 - 25_057, 36_127 - 34_843]
    for target in TARGETS:
        assert load_target(target).scalar.table_load_ns == pytest.approx(sum(readings) / len(readings), abs=1)


@pytest.mark.parametrize("target", TARGETS)
def test_loading_an_activation_table_costs_time(target):
    hw = load_target(target)
    n = 256
    ops = [nl.exp, nl.exp, nl.tanh, nl.copy, nl.tanh, nl.exp]
    # no table is loaded when the kernel starts; copy needs none and leaves tanh's loaded
    loads = [True, False, True, False, False, True]

    def kernel():
        for op in ops:
            nisa.activation(dst=sbuf((P, n)), op=op, data=sbuf((P, n)))

    recs = records(kernel, target=target)
    t = 0.0
    for rec, load in zip(recs, loads, strict=True):
        busy = ns(hw.scalar, max(hw.scalar.min_ii_cycles, n)) + (hw.scalar.table_load_ns if load else 0.0)
        assert rec.start_ns == pytest.approx(t, rel=REL, abs=1e-9)
        assert rec.duration_ns == pytest.approx(busy, rel=REL)
        t += busy


# -- 5. shared ports on NeuronCore-v2 --------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_vector_and_gpsimd_share_the_sbuf_port_on_trn1(target):
    hw = load_target(target)
    n = 1024
    shared = target == "trn1"
    assert bool(hw.ports) == shared

    def kernel():
        nisa.memset(dst=sbuf((P, n)), value=1.0)  # Vector, SBUF
        nisa.iota(dst=sbuf((P, n), nl.int32), pattern=[[1, n]], offset=0)  # GpSimd, SBUF, independent
        nisa.activation(dst=sbuf((P, n)), op=nl.exp, data=sbuf((P, n)))  # Scalar, SBUF: no shared port

    fill, iota, act = records(kernel, target=target)
    assert fill.start_ns == 0.0
    assert iota.start_ns == pytest.approx(fill.end_ns if shared else 0.0, rel=REL, abs=1e-9)
    assert act.start_ns == 0.0
    assert iota.duration_ns == pytest.approx(ns(hw.gpsimd, hw.gpsimd.startup_cycles + n), rel=REL)


@pytest.mark.parametrize("target", TARGETS)
def test_vector_and_scalar_share_the_psum_port_on_trn1(target):
    hw = load_target(target)
    n = 512  # fp32: one PSUM bank
    shared = target == "trn1"

    def kernel():
        nisa.memset(dst=psum((P, n)), value=0.0)  # Vector, PSUM
        nisa.activation(dst=sbuf((P, 64)), op=nl.copy, data=sbuf((P, 64)))  # Scalar, SBUF only, no table
        nisa.activation(dst=sbuf((P, n)), op=nl.exp, data=psum((P, n)))  # Scalar, reads PSUM

    fill, sbuf_act, psum_act = records(kernel, target=target)
    assert fill.end_ns == pytest.approx(element_ns(hw.vector, n), rel=REL)
    assert sbuf_act.start_ns == 0.0
    # Scalar is free after its first activation; on trn1 the PSUM port only once the memset is done
    assert sbuf_act.end_ns < fill.end_ns
    expected = fill.end_ns if shared else sbuf_act.end_ns
    assert psum_act.start_ns == pytest.approx(expected, rel=REL)


# -- 6. DMA engines, rate and payload efficiency --------------------------------------


def dma_rate(hw, engines, hbm=True):
    rate = engines * hw.dma.bytes_per_ns_per_engine
    return min(rate, hw.hbm.bandwidth_bytes_per_ns) if hbm else rate


def busy(rec, hw):
    """A transfer's time on its engines: its duration less the fixed latency (when it waited for nothing)."""
    return rec.duration_ns - hw.dma.fixed_latency_ns


@pytest.mark.parametrize("target", TARGETS)
def test_a_dma_over_16_partitions_uses_2_engines_and_takes_8x_longer(target):
    hw = load_target(target)
    nbytes = 512 * 1024  # 4 KiB (full efficiency) per partition over 128, 32 KiB over 16

    def copy(rows, cols):
        def kernel(a):
            nisa.dma_copy(dst=sbuf((rows, cols)), src=a)

        (rec,) = records(kernel, [np.zeros((rows, cols), np.float32)], target=target)
        return rec

    wide, narrow = copy(P, 1024), copy(16, 8192)
    assert payload_efficiency(hw, 4096) == payload_efficiency(hw, 32768) == 1.0
    assert busy(wide, hw) == pytest.approx(nbytes / dma_rate(hw, 16), rel=REL)
    assert busy(narrow, hw) == pytest.approx(nbytes / (2 * hw.dma.bytes_per_ns_per_engine), rel=REL)
    ratio = busy(narrow, hw) / busy(wide, hw)
    if target in ("trn1", "trn3"):  # 16 engines below the HBM share: exactly 8x
        assert ratio == pytest.approx(8.0, rel=REL)
    else:  # trn2's 16 engines (368 B/ns) exceed its HBM share (362.5 B/ns)
        assert ratio == pytest.approx(hw.hbm.bandwidth_bytes_per_ns / (2 * hw.dma.bytes_per_ns_per_engine), rel=REL)


def test_dma_engines_are_those_of_the_partitions_each_booked_on_its_own():
    """Engines p0 // 8 to ceil(p1 / 8) - 1: transfers on disjoint engines overlap, others queue per engine."""
    hw = load_target("trn1")
    f = 1024  # 4 KiB rows: full efficiency
    lat, per = hw.dma.fixed_latency_ns, hw.dma.bytes_per_ns_per_engine

    def kernel(a):
        x, y, z, w = sbuf((P, f)), sbuf((P, f)), sbuf((P, f)), sbuf((P, f))
        nisa.dma_copy(dst=x[0:16], src=a[0:16])  # engines 0, 1
        nisa.dma_copy(dst=y[16:32], src=a[16:32])  # engines 2, 3: alongside
        nisa.dma_copy(dst=z[8:24], src=a[8:24])  # engines 1, 2: after both
        nisa.dma_copy(dst=w[36:44], src=a[36:44])  # 8 partitions astride engines 4 and 5: both

    first, second, third, fourth = records(kernel, [np.zeros((P, f), np.float32)])
    sixteen = 16 * f * 4 / (2 * per)
    assert first.end_ns == pytest.approx(lat + sixteen, rel=REL)
    assert second.end_ns == pytest.approx(lat + sixteen, rel=REL)
    assert third.end_ns == pytest.approx(lat + 2 * sixteen, rel=REL)
    assert fourth.end_ns == pytest.approx(lat + 8 * f * 4 / (2 * per), rel=REL)


def test_a_dma_ends_when_its_last_engine_does():
    """B spans engines 0 and 1; engine 0 is busy with A, engine 1 free: B's halves run at different times."""
    hw = load_target("trn1")
    lat, per = hw.dma.fixed_latency_ns, hw.dma.bytes_per_ns_per_engine

    def kernel(a, b, c):
        nisa.dma_copy(dst=sbuf((8, 8192)), src=a)  # A: engine 0
        nisa.dma_copy(dst=sbuf((16, 1024)), src=b)  # B: engines 0 and 1
        nisa.dma_copy(dst=sbuf((P, 1024))[8:16], src=c)  # C: engine 1 only

    inputs = [np.zeros((8, 8192), np.float32), np.zeros((16, 1024), np.float32), np.zeros((8, 1024), np.float32)]
    a, b, c = records(kernel, inputs)
    busy_a, busy_b, busy_c = 8 * 8192 * 4 / per, 16 * 1024 * 4 / (2 * per), 8 * 1024 * 4 / per
    assert a.end_ns == pytest.approx(lat + busy_a, rel=REL)
    assert b.end_ns == pytest.approx(lat + busy_a + busy_b, rel=REL)  # engine 0, after A
    assert c.end_ns == pytest.approx(lat + busy_b + busy_c, rel=REL)  # engine 1, after B's half there


@pytest.mark.parametrize("target", TARGETS)
def test_hbm_to_hbm_uses_every_engine_and_only_hbm_transfers_are_capped(target):
    hw = load_target(target)
    rows, cols = 64, 1024  # 4 KiB rows: full efficiency

    def kernel(a):
        out = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a)  # HBM -> HBM: 16 engines although 64 rows
        t, u = sbuf((rows, cols)), sbuf((rows, cols))
        nisa.dma_copy(dst=u, src=t)  # SBUF -> SBUF over 64 partitions: 8 engines, no HBM cap
        return out

    hbm_copy, sbuf_copy = records(kernel, [np.zeros((rows, cols), np.float32)], target=target)
    nbytes = rows * cols * 4
    uncapped = hw.dma.engines * hw.dma.bytes_per_ns_per_engine
    assert (uncapped > hw.hbm.bandwidth_bytes_per_ns) == (target == "trn2")
    hbm_busy = nbytes / min(uncapped, hw.hbm.bandwidth_bytes_per_ns)
    assert busy(hbm_copy, hw) == pytest.approx(hbm_busy, rel=REL)
    # the SBUF copy's engines 0-7 are busy with the HBM copy first
    expected = hw.dma.fixed_latency_ns + hbm_busy + nbytes / dma_rate(hw, 8, hbm=False)
    assert sbuf_copy.end_ns == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("target", TARGETS)
def test_payload_efficiency_uses_the_shortest_contiguous_run_of_either_side(target):
    hw = load_target(target)

    def kernel(wide, narrow, whole):
        # HBM rows of 256 fp32 taken from rows of 512: 1 KiB runs; the SBUF side is 4 KiB per partition
        nisa.dma_copy(dst=sbuf((P, 4, 256)), src=wide[:, :, 0:256])
        # contiguous HBM, but an SBUF packet never crosses a partition: 64 fp32 = 256 B runs
        nisa.dma_copy(dst=sbuf((P, 64)), src=narrow)
        # both sides contiguous over 4 KiB per partition
        nisa.dma_copy(dst=sbuf((P, 4, 256)), src=whole)

    inputs = [np.zeros((P, 4, 512), np.float32), np.zeros((P, 64), np.float32), np.zeros((P, 4, 256), np.float32)]
    strided, short, whole = records(kernel, inputs, target=target)
    rate = dma_rate(hw, 16)
    at_1k = PAYLOAD_CURVES[target][2][1]
    assert (1024, at_1k) in hw.dma.payload_efficiency and (256, 0.30) in hw.dma.payload_efficiency
    # the three share the engines, one after the other: compare their durations less the queueing
    assert strided.end_ns - strided.start_ns - hw.dma.fixed_latency_ns == pytest.approx(
        P * 1024 * 4 / (rate * at_1k), rel=REL
    )
    assert short.end_ns - strided.end_ns == pytest.approx(P * 256 / (rate * 0.30), rel=REL)
    assert whole.end_ns - short.end_ns == pytest.approx(P * 4096 / (rate * 1.0), rel=REL)


@pytest.mark.parametrize("target", TARGETS)
def test_a_casting_copy_counts_its_packets_in_the_bytes_it_is_paced_on(target):
    hw = load_target(target)

    def kernel(w8, x32):
        # fp8 HBM rows of 896 elements, 8 of them (114688 B apart) per partition -> bf16 SBUF,
        # contiguous over 8 x 896 x 2 = 14336 B per partition: 896 elements per packet on both
        # sides, 896 x 2 = 1792 bf16 bytes each; paced on the bf16 side's 128 x 14336 bytes
        nisa.dma_copy(dst=sbuf((P, 8, 896), nl.bfloat16), src=w8.ap(pattern=[[896, P], [896 * P, 8], [1, 896]]))
        # fp32 HBM [128, 512] -> bf16 SBUF: 512 elements per packet, 512 x 4 = 2048 fp32 bytes
        nisa.dma_copy(dst=sbuf((P, 512), nl.bfloat16), src=x32)

    w8 = np.zeros((8 * P, 896), nl.float8_e4m3)
    x32 = np.zeros((P, 512), np.float32)
    widening, narrowing = records(kernel, [w8, x32], target=target)
    rate = dma_rate(hw, 16)
    assert widening.bytes == P * 8 * 896 * 2 and narrowing.bytes == P * 512 * 4
    assert busy(widening, hw) == pytest.approx(P * 8 * 896 * 2 / (rate * payload_efficiency(hw, 1792)), rel=REL)
    # the second waits for the first on the same 16 engines
    assert narrowing.end_ns - widening.end_ns == pytest.approx(
        P * 512 * 4 / (rate * payload_efficiency(hw, 2048)), rel=REL
    )


#: The payload curves (docs/timing.md, "Calibration"): the DMA bandwidth guide's shape (<256 B
#: overhead-bound, improving to 2 KiB, saturated at 4 KiB) with values fitted to the trn1 matrix
#: multiplication tutorial's four published times; trn2's 1 KiB point fitted to the calibration half
#: of nki-library's trn2 hardware times (benchmarks/nkilib_timing.py); trn3 has no measurement of its own.
TUTORIAL_CURVE = ((64, 0.08), (256, 0.30), (1024, 0.38), (2048, 0.80), (4096, 1.0))
PAYLOAD_CURVES = {
    "trn1": TUTORIAL_CURVE,
    "trn2": ((64, 0.08), (256, 0.30), (1024, TRN2_AT_1K), (2048, 0.80), (4096, 1.0)),
    "trn3": TUTORIAL_CURVE,
}


@pytest.mark.parametrize("target", TARGETS)
def test_payload_efficiency_is_monotonic_and_equal_to_its_table_points(target):
    hw = load_target(target)
    dma = hw.dma
    points = dma.payload_efficiency
    assert points == PAYLOAD_CURVES[target]
    for run, eff in points:
        assert dma.efficiency(run) == pytest.approx(eff, rel=REL)
    runs = [2**k for k in range(0, 17)] + [3, 100, 200, 300, 700, 1500, 3000, 5000, 100_000]
    runs.sort()
    effs = [dma.efficiency(r) for r in runs]
    assert all(a <= b for a, b in itertools.pairwise(effs))
    assert all(0 < e <= 1 for e in effs)
    assert dma.efficiency(1) == dma.efficiency(63) == points[0][1]  # flat below the first point
    assert dma.efficiency(4097) == dma.efficiency(1 << 20) == points[-1][1]  # flat beyond the last
    # between points: the log2 interpolation, e.g. halfway (in log2) from 256 B to 1 KiB
    assert dma.efficiency(512) == pytest.approx((0.30 + points[2][1]) / 2, rel=REL)
    for run in (100, 300, 1500, 3000):
        assert dma.efficiency(run) == pytest.approx(payload_efficiency(hw, run), rel=REL)


# -- the published dependent-chain figure ----------------------------------------------


def test_a_dependent_1_element_scalar_chain_is_near_the_published_189_ns():
    """The performance guide measures 189 ns (264 cycles at 1.4 GHz) per dependent 1-element ScalarE instruction."""
    hw = load_target("trn1")
    k = 8

    def kernel():
        tiles = [sbuf((1, 1)) for _ in range(k + 1)]
        for src, dst in itertools.pairwise(tiles):
            nisa.activation(dst=dst, op=nl.exp, data=src)

    recs = records(kernel)
    intervals = [b.start_ns - a.start_ns for a, b in itertools.pairwise(recs)]
    sc = hw.scalar
    expected = ns(sc, sc.min_ii_cycles + sc.access_latency_cycles + sc.dependent_overhead_cycles)  # 224 cycles
    assert expected == pytest.approx(160.0, rel=REL)
    published = 264 / 1.4
    assert published == pytest.approx(188.57, abs=0.01)
    # the first exp loads the table; the chain's interval is the steady state after it
    assert intervals[0] == pytest.approx(sc.table_load_ns + expected, rel=REL)
    for ii in intervals[1:]:
        assert ii == pytest.approx(expected, rel=REL)
        assert abs(ii - published) <= 0.2 * published
