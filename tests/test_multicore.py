"""LNC=2 launches: ``kernel[2]`` runs two programs that share HBM, with sendrecv and core_barrier.

Expected values are numpy references; expected times are built from the hw constants
and the times of the instructions each synchronisation waits for: a barrier or
sendrecv starts when the later core arrives.
"""

from __future__ import annotations

import json
import threading

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nkisim
import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.errors import DtypeError, KernelError, MemoryKindError, OperandError, ShapeError, TargetError
from nkisim.hw import load_target

LNC_TARGETS = ("trn2", "trn3")
FAST = settings(max_examples=15, deadline=None)


def tile(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


@nki.jit
def add_halves(a, b):
    """Each program adds its half of the rows (``num_programs`` parts)."""
    pid = nl.program_id(0)
    rows = a.shape[0] // nl.num_programs()
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x, y = tile((rows, a.shape[1]), a.dtype), tile((rows, a.shape[1]), a.dtype)
    nisa.dma_copy(dst=x, src=a[pid * rows : (pid + 1) * rows])
    nisa.dma_copy(dst=y, src=b[pid * rows : (pid + 1) * rows])
    nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.add)
    nisa.dma_copy(dst=out[pid * rows : (pid + 1) * rows], src=x)
    return out


@FAST
@given(
    rows=st.integers(1, 128),
    cols=st.integers(1, 256),
    dtype=st.sampled_from([np.float32, ml_dtypes.bfloat16, np.int32]),
    target=st.sampled_from(LNC_TARGETS),
    seed=st.integers(0, 2**32 - 1),
)
def test_each_program_computes_its_half(rows, cols, dtype, target, seed):
    rng = np.random.default_rng(seed)
    a = (rng.integers(-50, 50, size=(2 * rows, cols))).astype(dtype)
    b = (rng.integers(-50, 50, size=(2 * rows, cols))).astype(dtype)
    result = nkisim.run(add_halves[2], [a, b], target=target)
    expected = (a.astype(np.float32) + b.astype(np.float32)).astype(dtype)
    np.testing.assert_array_equal(result.outputs, expected)
    assert result.target == target


@pytest.mark.parametrize("target", LNC_TARGETS)
def test_the_profile_shows_both_cores_and_lasts_as_long_as_the_slower(target):
    a = np.ones((256, 64), np.float32)
    two = nkisim.run(add_halves[2], [a, a], target=target).profile
    one = nkisim.run(add_halves, [a[:128], a[:128]], target=target).profile
    tracks = {rec.engine for rec in two.instructions}
    assert {t.split(" ")[0] for t in tracks} == {"core0", "core1"}
    assert "core0 Vector" in tracks and "core1 Vector" in tracks
    assert two.instruction_count == 2 * one.instruction_count
    ends = {core: max(r.end_ns for r in two.instructions if r.engine.startswith(core)) for core in ("core0", "core1")}
    assert two.total_ns == max(ends.values())
    assert two.total_ns == pytest.approx(one.total_ns)  # same work per core, run side by side
    assert two.engine_busy_ns["core0 Vector"] == pytest.approx(one.engine_busy_ns["Vector"])
    assert two.engine_busy_ns["core1 DMA"] == pytest.approx(one.engine_busy_ns["DMA"])
    assert "core1 Vector" in two.summary()


def test_uneven_work_the_total_is_the_busier_core():
    hw = load_target("trn2")

    @nki.jit
    def kernel():
        t = nl.zeros((128, 512), nl.float32)
        for _ in range(1 + 3 * nl.program_id(0)):
            nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)

    prof = nkisim.run(kernel[2], [], target="trn2").profile
    per_op = max(hw.vector.min_ii_cycles, 512) / hw.vector.clock_ghz
    # each add reads the one before it: access latency and dependent-instruction overhead between them
    gap = (hw.vector.access_latency_cycles + hw.vector.dependent_overhead_cycles) / hw.vector.clock_ghz
    core1 = [r for r in prof.instructions if r.engine == "core1 Vector"]
    assert len(core1) == 5  # memset and 4 adds
    assert prof.total_ns == pytest.approx(core1[-1].end_ns)
    assert core1[-1].end_ns - core1[1].start_ns == pytest.approx(4 * per_op + 3 * gap)


def test_program_ids_and_grid_queries():
    seen = []

    def kernel():
        seen.append((nl.program_id(0), nl.program_id(), nl.num_programs(), nl.num_programs(0), nl.program_ndim()))

    for target in LNC_TARGETS:
        seen.clear()
        nkisim.run(nki.jit(kernel)[2], [], target=target)
        assert sorted(seen) == [(0, 0, 2, 2, 1), (1, 1, 2, 2, 1)]
    for target in ("trn1", "trn2", "trn3"):
        seen.clear()
        nkisim.run(nki.jit(kernel)[1], [], target=target)
        nkisim.run(kernel, [], target=target)
        assert seen == [(0, 0, 1, 1, 1), (0, 0, 1, 1, 0)]


def test_lnc2_needs_trn2_or_newer():
    a = np.ones((2, 4), np.float32)
    with pytest.raises(
        TargetError, match=r"kernel\[2\].*needs lnc2_collectives, which trn2 .* and trn3 .* have; trn1 has one"
    ):
        nkisim.run(add_halves[2], [a, a], target="trn1")
    with pytest.raises(TargetError, match="trn1"):
        add_halves[2](a, a)  # the default target is trn1
    np.testing.assert_array_equal(add_halves[1](a, a), a + a)


@pytest.mark.parametrize("grid", [3, 0, (2, 1), "2", True])
def test_the_grid_is_one_or_two_cores(grid):
    with pytest.raises(OperandError, match="kernel"):
        add_halves[grid]


def test_program_id_axis_must_exist():
    def kernel():
        nl.program_id(1)

    with pytest.raises(OperandError, match="axis 1"):
        nkisim.run(nki.jit(kernel)[2], [], target="trn2")


# -- shared HBM -----------------------------------------------------------------------


def test_shared_tensors_made_in_the_kernel_are_one_tensor_for_both_programs():
    @nki.jit
    def kernel(a):
        pid = nl.program_id(0)
        out = nl.zeros((4, 8), nl.float32, buffer=nl.shared_hbm)  # zeroed once, before either program writes
        private = nl.ndarray((1, 8), nl.float32, buffer=nl.hbm)
        t = tile((2, 8))
        nisa.dma_copy(dst=t, src=a[2 * pid : 2 * pid + 2])
        nisa.dma_copy(dst=private, src=t[0:1])
        nisa.dma_copy(dst=out[2 * pid : 2 * pid + 1], src=private)
        return out

    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    expected = np.zeros((4, 8), np.float32)
    expected[[0, 2]] = a[[0, 2]]
    np.testing.assert_array_equal(nkisim.run(kernel[2], [a], target="trn2").outputs, expected)


def test_programs_must_allocate_the_same_shared_tensors():
    @nki.jit
    def kernel():
        nl.ndarray((4, 4 + nl.program_id(0)), nl.float32, buffer=nl.shared_hbm)

    with pytest.raises(ShapeError, match="shared_hbm tensor number 0"):
        nkisim.run(kernel[2], [], target="trn2")


# -- sendrecv -------------------------------------------------------------------------


@FAST
@given(
    p=st.integers(1, 128),
    f=st.integers(1, 64),
    dtype=st.sampled_from([np.float32, np.int8, ml_dtypes.bfloat16]),
    target=st.sampled_from(LNC_TARGETS),
    seed=st.integers(0, 2**32 - 1),
)
def test_sendrecv_swaps_the_tiles_of_the_two_cores(p, f, dtype, target, seed):
    a = np.random.default_rng(seed).integers(-100, 100, size=(2, p, f)).astype(dtype)

    @nki.jit
    def kernel(x):
        pid = nl.program_id(0)
        mine, theirs = tile((p, f), x.dtype), tile((p, f), x.dtype)
        nisa.dma_copy(dst=mine, src=x[pid])
        nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
        out = nl.ndarray((2, p, f), x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[pid], src=theirs)
        return out

    np.testing.assert_array_equal(nkisim.run(kernel[2], [a], target=target).outputs, a[::-1])


@pytest.mark.parametrize("target", LNC_TARGETS)
def test_sendrecv_starts_when_the_later_core_is_ready(target):
    hw = load_target(target)
    p, f = 128, 256

    @nki.jit
    def kernel():
        pid = nl.program_id(0)
        mine, theirs = nl.zeros((p, f), nl.float32), tile((p, f))
        if pid == 1:  # core 1 has more work before its tile is ready
            for _ in range(3):
                nisa.tensor_scalar(dst=mine, data=mine, op0=nl.add, operand0=1.0)
        nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=7)

    prof = nkisim.run(kernel[2], [], target=target).profile
    recs = {r.engine.split(" ")[0]: [] for r in prof.instructions}
    for r in prof.instructions:
        recs[r.engine.split(" ")[0]].append(r)
    # the last add on Vector, visible an access latency after its end, then a semaphore
    access = hw.vector.access_latency_cycles / hw.vector.clock_ghz
    core1_ready = recs["core1"][-2].end_ns + access + hw.sync.semaphore_latency_ns
    nbytes = p * f * 4
    for core in ("core0", "core1"):
        send = recs[core][-1]
        assert (send.opcode, send.engine.split(" ")[1][:3]) == ("sendrecv", "DMA")
        assert send.start_ns == pytest.approx(core1_ready)
        assert send.end_ns == pytest.approx(core1_ready + hw.dma.fixed_latency_ns + nbytes / hw.dma.bytes_per_ns)
    core0_send = recs["core0"][-1]
    assert core0_send.start_ns > recs["core0"][0].end_ns + hw.sync.semaphore_latency_ns  # core 0 waited


def test_pipes_pair_in_order():
    @nki.jit
    def kernel(x):
        pid = nl.program_id(0)
        a, b = tile((1, 4)), tile((1, 4))
        nisa.dma_copy(dst=a, src=x[pid : pid + 1])
        for pipe in (3, 5):
            nisa.tensor_scalar(dst=a, data=a, op0=nl.multiply, operand0=2.0)
            nisa.sendrecv(src=a, dst=b, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=pipe)
            nisa.tensor_copy(dst=a, src=b)
        out = nl.ndarray((2, 4), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[pid : pid + 1], src=a)
        return out

    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(nkisim.run(kernel[2], [x], target="trn3").outputs, 4 * x)  # swapped twice


# -- core_barrier ---------------------------------------------------------------------


@pytest.mark.parametrize("target", LNC_TARGETS)
@pytest.mark.parametrize("engine", [None, nisa.engine.sync, nisa.engine.vector])
def test_barrier_orders_writes_of_both_cores_before_reads(target, engine):
    hw = load_target(target)
    rows, cols = 64, 32

    @nki.jit
    def kernel(a):
        pid = nl.program_id(0)
        shared = nl.ndarray((2 * rows, cols), nl.float32, buffer=nl.shared_hbm)
        t = tile((rows, cols))
        nisa.dma_copy(dst=t, src=a[pid * rows : (pid + 1) * rows])
        if pid == 0:
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=3.0)
        nisa.dma_copy(dst=shared[pid * rows : (pid + 1) * rows], src=t)
        extra = {} if engine is None else {"engine": engine}
        nisa.core_barrier(data=shared, cores=(0, 1), **extra)
        other = tile((rows, cols))
        nisa.dma_copy(dst=other, src=shared[(1 - pid) * rows : (2 - pid) * rows])  # the other core's half
        out = nl.ndarray((2 * rows, cols), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[pid * rows : (pid + 1) * rows], src=other)
        return out

    a = np.random.default_rng(0).standard_normal((2 * rows, cols)).astype(np.float32)
    result = nkisim.run(kernel[2], [a], target=target)
    expected = np.concatenate([a[rows:], (a[:rows] * np.float32(3)).astype(np.float32)])
    np.testing.assert_array_equal(result.outputs, expected)

    by_core = {c: [r for r in result.profile.instructions if r.engine.startswith(c)] for c in ("core0", "core1")}
    # each core's write into ``shared`` is the instruction just before its barrier
    writes = [recs[[r.opcode for r in recs].index("core_barrier") - 1] for recs in by_core.values()]
    arrival = max(w.end_ns for w in writes) + hw.sync.semaphore_latency_ns  # the later write, then a semaphore
    engine_name = "GpSimd" if engine is None else engine.title
    # the barrier is done an engine access latency after it ends (none on the Sync engine)
    cfg = {"GpSimd": hw.gpsimd, "Sync": hw.sync_engine, "Vector": hw.vector}[engine_name]
    done = cfg.access_latency_cycles / cfg.clock_ghz
    assert (done == 0) == (engine_name == "Sync")
    for core, recs in by_core.items():
        barrier = next(r for r in recs if r.opcode == "core_barrier")
        assert barrier.engine == f"{core} {engine_name}"
        assert barrier.start_ns == pytest.approx(arrival)
        assert barrier.end_ns == pytest.approx(arrival + hw.sync.remote_semaphore_latency_ns)
        read = recs[recs.index(barrier) + 1]
        assert read.start_ns == pytest.approx(barrier.end_ns + done + hw.sync.semaphore_latency_ns)


def test_barrier_on_an_on_chip_tile_waits_for_the_later_core():
    """NKI 0.3 kernels pass an SBUF tile as ``data``: the barrier still meets the other core."""

    @nki.jit
    def kernel():
        pid = nl.program_id(0)
        t = tile((128, 512))
        nisa.memset(t, value=1.0)
        if pid == 1:  # core 1 arrives late
            for _ in range(4):
                nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
        nisa.core_barrier(t, (0, 1))

    result = nkisim.run(kernel[2], [], target="trn2")
    barriers = [r for r in result.profile.instructions if r.opcode == "core_barrier"]
    assert len(barriers) == 2
    late_write = max(r.end_ns for r in result.profile.instructions if r.opcode == "tensor_scalar")
    assert barriers[0].start_ns == pytest.approx(barriers[1].start_ns)
    assert barriers[0].start_ns >= late_write


def test_a_one_core_barrier_written_as_an_int_needs_no_other_core():
    """``cores=(0)`` is the int 0 in Python; a one-core barrier waits for nobody."""

    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a)
        nisa.core_barrier(out, (0))
        return out

    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    result = nkisim.run(kernel, [a], target="trn2")
    np.testing.assert_array_equal(result.outputs, a)
    assert [r.opcode for r in result.profile.instructions] == ["dma_copy", "core_barrier"]


# -- rules and failures ---------------------------------------------------------------


def lnc2(body, target="trn2"):
    """Run ``body(pid)`` as both programs of an LNC=2 kernel."""

    @nki.jit
    def kernel():
        body(nl.program_id(0))

    return nkisim.run(kernel[2], [], target=target)


def swap(pid, **overrides):
    args = {
        "src": nl.zeros((4, 4), nl.float32),
        "dst": tile((4, 4)),
        "send_to_rank": 1 - pid,
        "recv_from_rank": 1 - pid,
        "pipe_id": 0,
    }
    args.update(overrides)
    nisa.sendrecv(**args)


@pytest.mark.parametrize(
    ("body", "error", "match"),
    [
        (lambda pid: swap(pid, src=nl.ndarray((4, 4), nl.float32, buffer=nl.shared_hbm)), MemoryKindError, "src"),
        (lambda pid: swap(pid, dst=tile((4, 4), nl.bfloat16)), DtypeError, "dst dtype bfloat16"),
        (lambda pid: swap(pid, dst=tile((4, 2))), ShapeError, "dst shape"),
        (lambda pid: swap(pid, send_to_rank=2), OperandError, "send_to_rank 2 must be 0 or 1"),
        (lambda pid: swap(pid, recv_from_rank=pid), OperandError, "recv_from_rank is"),
        (lambda pid: swap(pid, dst=tile((4 + pid, 4)), src=nl.zeros((4 + pid, 4), nl.float32)), ShapeError, "sends"),
        (
            lambda pid: nisa.core_barrier(nl.ndarray((2,), nl.float32, buffer=nl.shared_hbm), (0, 2)),
            OperandError,
            "cores",
        ),
        (
            lambda pid: nisa.core_barrier(
                nl.ndarray((2,), nl.float32, buffer=nl.shared_hbm), (0, 1), engine=nisa.engine.dma
            ),
            OperandError,
            "engine",
        ),
    ],
)
def test_collective_rules(body, error, match):
    with pytest.raises(error, match=match):
        lnc2(body)


def test_collectives_need_an_lnc2_launch_and_a_new_core():
    def kernel():
        swap(0)

    with pytest.raises(TargetError, match=r"needs a kernel launched on two NeuronCores \(kernel\[2\]"):
        nkisim.run(kernel, [], target="trn2")
    with pytest.raises(
        TargetError, match=r"nisa\.sendrecv \[DMA, trn1\]: needs lnc2_collectives, which trn2 \(NeuronCore-v3\)"
    ):
        nkisim.run(kernel, [], target="trn1")


def test_programs_reaching_different_synchronisation_points_fail_instead_of_deadlocking():
    def body(pid):
        shared = nl.ndarray((2, 2), nl.float32, buffer=nl.shared_hbm)
        if pid == 0:
            nisa.core_barrier(shared, (0, 1))
        else:
            swap(pid)

    with pytest.raises(KernelError, match="would deadlock"):
        lnc2(body)


def test_a_program_that_returns_while_the_other_waits_fails():
    def body(pid):
        shared = nl.ndarray((2, 2), nl.float32, buffer=nl.shared_hbm)
        if pid == 1:
            nisa.core_barrier(shared, (0, 1))

    with pytest.raises(KernelError, match="returned without reaching it"):
        lnc2(body)


def test_an_error_in_one_program_is_raised_with_its_line():
    def body(pid):
        t = tile((4, 4))
        if pid == 1:
            nisa.tensor_tensor(dst=t, data1=t, data2=tile((4, 5)), op=nl.add)
        shared = nl.ndarray((2, 2), nl.float32, buffer=nl.shared_hbm)
        nisa.core_barrier(shared, (0, 1))

    with pytest.raises(ShapeError, match=r"test_multicore\.py:\d+: nisa\.tensor_tensor \[Vector, trn2\]"):
        lnc2(body)


def test_barriers_must_name_the_same_shared_tensor():
    def body(pid):
        first = nl.ndarray((2, 2), nl.float32, buffer=nl.shared_hbm)
        second = nl.ndarray((2, 2), nl.float32, buffer=nl.shared_hbm)
        nisa.core_barrier((first, second)[pid], (0, 1))

    with pytest.raises(OperandError, match="same shared HBM tensor"):
        lnc2(body)


# -- reports and timing-only runs -----------------------------------------------------


def test_profile_from_shapes_matches_the_run(tmp_path):
    a = np.ones((64, 32), np.float32)
    ran = nkisim.run(add_halves[2], [a, a], target="trn3").profile
    timed = nkisim.profile(add_halves[2], [((64, 32), np.float32)] * 2, target="trn3")
    assert [(r.engine, r.start_ns, r.end_ns) for r in timed.instructions] == [
        (r.engine, r.start_ns, r.end_ns) for r in ran.instructions
    ]
    specs = nkisim.output_specs(add_halves[2], [a, a], target="trn3")
    assert tuple(specs.shape) == (64, 32)
    ran.to_perfetto(tmp_path / "trace.json")
    names = {
        e["args"]["name"]
        for e in json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
        if e["name"] == "thread_name"
    }
    assert {"core0 Vector", "core1 Vector"} <= names
    ran.to_html(tmp_path / "trace.html")
    assert ran.table()


# -- how the programs take turns ----------------------------------------------------------


def test_programs_take_turns_after_every_instruction_in_the_callers_thread():
    """Program 0 starts; the turn passes after each instruction, round robin; no thread is started."""
    seen = []

    def body(pid):
        t = tile((4, 4))
        for step in range(3):
            seen.append((pid, step, threading.get_ident()))
            nisa.memset(dst=t, value=float(step))

    threads_before = threading.active_count()
    lnc2(body)
    assert [(pid, step) for pid, step, _ in seen] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    assert {ident for *_, ident in seen} == {threading.get_ident()}
    assert threading.active_count() == threads_before


@pytest.mark.parametrize("waits_at_barrier", [False, True])
def test_the_other_program_is_unwound_when_one_fails(waits_at_barrier):
    """Program 0 is paused after an instruction, or waits at a barrier program 1 never reaches; its finally runs."""
    unwound = []

    def body(pid):
        shared = nl.ndarray((2, 2), nl.float32, buffer=nl.shared_hbm)
        t = tile((4, 4))
        try:
            nisa.memset(dst=t, value=0.0)
            if pid == 1:
                nisa.tensor_tensor(dst=t, data1=t, data2=tile((4, 5)), op=nl.add)
            elif waits_at_barrier:
                nisa.core_barrier(shared, (0, 1))
            nisa.memset(dst=t, value=1.0)
        finally:
            unwound.append(pid)

    with pytest.raises(ShapeError):
        lnc2(body)
    assert sorted(unwound) == [0, 1]


def test_launches_from_several_threads_at_once_match_one_alone():
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(11)
    cases = [(rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32))]
    cases *= 6
    alone = nkisim.run(add_halves[2], list(cases[0]), target="trn2")
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda ab: nkisim.run(add_halves[2], list(ab), target="trn2"), cases))
    for result in results:
        np.testing.assert_array_equal(result.outputs, cases[0][0] + cases[0][1])
        assert result.profile.total_ns == alone.profile.total_ns
        assert list(result.profile.timeline.end_ns) == list(alone.profile.timeline.end_ns)


def test_a_program_that_returns_while_program_0_waits_for_it_fails():
    """Program 0 reaches the barrier first and waits; program 1 returns without it."""

    def body(pid):
        shared = nl.ndarray((2, 2), nl.float32, buffer=nl.shared_hbm)
        if pid == 0:
            nisa.core_barrier(shared, (0, 1))
        else:
            nisa.memset(dst=tile((2, 2)), value=0.0)

    with pytest.raises(KernelError, match=r"nisa\.core_barrier in program 0 waits for program 1, which returned"):
        lnc2(body)


def test_the_runs_affine_order_applies_to_both_programs():
    seen = []

    @nki.jit
    def kernel():
        t = tile((2, 2))
        for i in nl.affine_range(3):
            seen.append((nl.program_id(0), i))
            nisa.memset(dst=t, value=float(i))

    nkisim.run(kernel[2], [], target="trn2", affine_order="reversed")
    assert seen == [(0, 2), (1, 2), (0, 1), (1, 1), (0, 0), (1, 0)]
