"""``nki.isa.NkiInstruction`` and ``.depends_on(*producers)``: scheduling edges between instructions.

The times are worked out by hand from the trn2 numbers of ``nkisim/hw/generations/trn2.toml``:
a ``memset`` of N float32 elements per partition costs ``max(MIN_II, N)`` engine cycles
(docs/isa.md); GpSimd runs at 1.2 GHz, Vector at 0.96 GHz, MIN_II is 64 cycles, and a
wait on another engine or queue costs the 50 ns semaphore latency. trn2 has no shared
SBUF port between Vector and GpSimd, so the two engines overlap freely.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.errors import DependencyError, OperandError
from nkisim.hw import load_target

GPSIMD_GHZ, VECTOR_GHZ, SEMAPHORE_NS = 1.2, 0.96, 50.0  # trn2.toml [gpsimd], [vector], [sync]
HERE = r"test_depends_on\.py:\d+: "


def test_the_published_numbers_are_the_ones_used_here():
    hw = load_target("trn2")
    assert (hw.gpsimd.clock_ghz, hw.vector.clock_ghz, hw.sync.semaphore_latency_ns) == (1.2, 0.96, 50.0)
    assert hw.gpsimd.min_ii_cycles == hw.vector.min_ii_cycles == 64
    assert not hw.ports  # NeuronCore-v3: no SBUF port shared by Vector and GpSimd


def sbuf(cols):
    return nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)


def gpsimd_fill(cols):
    """A memset on GpSimd: max(64, cols) cycles at 1.2 GHz."""
    return nisa.memset(dst=sbuf(cols), value=1.0, engine=nisa.gpsimd_engine)


def vector_fill(cols):
    """A memset on Vector: max(64, cols) cycles at 0.96 GHz."""
    return nisa.memset(dst=sbuf(cols), value=2.0, engine=nisa.vector_engine)


def times(kernel, inputs=()):
    profile = nkisim.run(kernel, list(inputs), target="trn2").profile
    return [(r.start_ns, r.end_ns) for r in profile.instructions], profile


A_END = 1200 / GPSIMD_GHZ  # 1000 ns: a GpSimd memset of 1200 elements from time 0
C_BUSY = 96 / VECTOR_GHZ  # 100 ns: a Vector memset of 96 elements


@pytest.mark.parametrize("edge", [False, True])
def test_an_edge_serialises_two_independent_instructions_on_two_engines(edge):
    def kernel():
        a = gpsimd_fill(1200)
        c = vector_fill(96)
        if edge:
            assert c.depends_on(a) is c

    spans, profile = times(kernel)
    assert spans[0] == pytest.approx((0.0, A_END), rel=1e-12)
    start = A_END + SEMAPHORE_NS if edge else 0.0  # 1050 ns with the edge; overlapping at 0 without
    assert spans[1] == pytest.approx((start, start + C_BUSY), rel=1e-12)
    assert profile.total_ns == pytest.approx(max(A_END, start + C_BUSY), rel=1e-12)
    if edge:
        assert profile.timeline.producer[1] == 0  # the edge is what the consumer waited for


def test_a_dma_waits_for_its_producer_plus_the_semaphore():
    def kernel(x):
        a = gpsimd_fill(1200)
        nisa.dma_copy(dst=sbuf(64), src=x).depends_on(a)  # chained on the call

    spans, _ = times(kernel, [np.ones((128, 64), np.float32)])
    assert spans[1][0] == pytest.approx(A_END + SEMAPHORE_NS, rel=1e-12)


@pytest.mark.parametrize("form", ["one call", "chained", "reversed"])
def test_several_producers_the_latest_one_decides(form):
    b_end = 480 / VECTOR_GHZ  # 500 ns, on the consumer's own engine: no semaphore

    def kernel():
        a = gpsimd_fill(1200)
        b = vector_fill(480)
        c = vector_fill(96)
        if form == "one call":
            c.depends_on(b, a)
        elif form == "chained":
            c.depends_on(b).depends_on(a)
        else:
            c.depends_on(a).depends_on(b)

    spans, profile = times(kernel)
    assert spans[1] == pytest.approx((0.0, b_end), rel=1e-12)
    assert spans[2][0] == pytest.approx(A_END + SEMAPHORE_NS, rel=1e-12)
    assert profile.timeline.producer[2] == 0


def test_an_edge_that_already_holds_changes_nothing():
    def kernel(edge):
        a = gpsimd_fill(1200)
        vector_fill(1920)  # 2000 ns on Vector
        c = vector_fill(96)  # starts when Vector is free, at 2000 ns, after a's end + 50 anyway
        if edge:
            c.depends_on(a)

    with_edge, _ = times(lambda: kernel(True))
    without, _ = times(lambda: kernel(False))
    assert with_edge == without
    assert with_edge[2][0] == pytest.approx(1920 / VECTOR_GHZ, rel=1e-12)


def test_an_edge_on_an_older_instruction_is_accepted_when_it_already_holds():
    def kernel():
        x = gpsimd_fill(1200)  # GpSimd 0..1000
        p = vector_fill(96)  # Vector 0..100
        c = gpsimd_fill(96)  # GpSimd from 1000: later than p's end + 50
        vector_fill(96)  # c is placed now
        c.depends_on(p, x)

    spans, _ = times(kernel)
    assert spans[2][0] == pytest.approx(A_END, rel=1e-12)


@pytest.mark.parametrize("latest_first", [True, False])
def test_edges_may_be_added_in_any_order(latest_first):
    # a and b on Vector, in order; c on GpSimd is the latest and waits for b. An edge b -> a already holds;
    # checking it must not place c before c's own edge is added.
    def kernel():
        a = vector_fill(64)  # Vector 0 .. 64 / 0.96
        b = vector_fill(1920)  # Vector after a: .. (64 + 1920) / 0.96
        c = gpsimd_fill(96)  # GpSimd, would start at 0
        if latest_first:
            c.depends_on(b)
            b.depends_on(a)
        else:
            b.depends_on(a)
            c.depends_on(b)

    spans, _ = times(kernel)
    assert spans[2][0] == pytest.approx((64 + 1920) / VECTOR_GHZ + SEMAPHORE_NS, rel=1e-12)


def test_an_edge_on_an_older_instruction_that_would_move_it_is_an_error():
    def kernel():
        c = vector_fill(96)  # Vector 0..100
        p = gpsimd_fill(1200)  # GpSimd 0..1000; c was placed when p was issued
        c.depends_on(p)

    with pytest.raises(DependencyError) as err:
        nkisim.run(kernel, [], target="trn2")
    message = str(err.value)
    assert re.search(HERE + r"nisa\.memset\(\.\.\.\)\.depends_on: producers\[0\] ", message)
    assert "ends at 1000.0 ns" in message and "would start at 1050.0 ns" in message
    assert "already placed at 0.0 ns" in message and "before issuing another instruction" in message


def test_nisa_calls_return_handles():
    seen = []

    def kernel(x):
        t = sbuf(64)
        seen.append(nisa.dma_copy(dst=t, src=x))
        seen.append(nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0))

    nkisim.run(kernel, [np.ones((128, 64), np.float32)])
    assert all(isinstance(h, nisa.NkiInstruction) for h in seen)
    assert re.fullmatch(r"<NkiInstruction nisa\.tensor_scalar #1 at test_depends_on\.py:\d+>", repr(seen[1]))


# -- errors -----------------------------------------------------------------------------------


def _fails(kernel, error, pattern, target="trn2"):
    with pytest.raises(error) as err:
        nkisim.run(kernel, [], target=target)
    assert re.search(pattern, str(err.value)), str(err.value)


@pytest.mark.parametrize("producer", [None, 3, "a"])
def test_a_producer_must_be_an_instruction_handle(producer):
    def kernel():
        vector_fill(96).depends_on(gpsimd_fill(96), producer)

    _fails(kernel, OperandError, HERE + r"nisa\.memset\(\.\.\.\)\.depends_on: producers\[1\] must be an NkiInstruction")


def test_a_tensor_is_not_a_producer():
    def kernel():
        t = sbuf(96)
        nisa.memset(dst=t, value=0.0).depends_on(t)

    _fails(kernel, OperandError, r"producers\[0\] must be an NkiInstruction .*got Tensor")


def test_an_instruction_cannot_wait_for_itself():
    def kernel():
        c = vector_fill(96)
        c.depends_on(c)

    _fails(kernel, DependencyError, HERE + r".*producers\[0\] is the consumer itself")


def test_a_producer_from_another_run_is_rejected():
    kept = []

    def first():
        kept.append(gpsimd_fill(96))

    nkisim.run(first, [], target="trn2")

    def second():
        vector_fill(96).depends_on(kept[0])

    _fails(second, DependencyError, HERE + r".*producers\[0\] <NkiInstruction nisa\.memset #0 .*another kernel run")


def test_a_producer_from_the_other_program_of_an_lnc2_launch_is_rejected():
    kept = []

    @nkisim.jit
    def kernel():
        kept.append(gpsimd_fill(96))  # each program issues one, then the turn passes to the other
        vector_fill(96)
        if nl.program_id(0) == 1:
            vector_fill(96).depends_on(kept[0])  # program 0's

    with pytest.raises(DependencyError, match=HERE + r".*another kernel run \(or the other program of a kernel\[2\]"):
        nkisim.run(kernel[2], [], target="trn2")
    assert len(kept) == 2


def test_a_handle_is_dead_after_its_run():
    kept = []
    nkisim.run(lambda: kept.append(gpsimd_fill(96)), [], target="trn2")

    def kernel():
        kept[0].depends_on(vector_fill(96))

    _fails(kernel, DependencyError, r"kernel run that has ended or to another program")


# -- dynamic loops ------------------------------------------------------------------------


def test_a_producer_before_a_dynamic_loop_may_feed_its_body():
    def kernel():
        a = gpsimd_fill(1200)

        def body(i):
            vector_fill(96).depends_on(a)

        nl.fori_loop(0, 2, body)

    spans, _ = times(kernel)
    assert spans[1][0] == pytest.approx(A_END + SEMAPHORE_NS, rel=1e-12)  # the first pass waits
    assert spans[2][0] == pytest.approx(A_END + SEMAPHORE_NS + C_BUSY, rel=1e-12)  # the second runs after it


def test_an_edge_out_of_a_fori_loop_body_is_rejected():
    def kernel():
        made = []
        nl.fori_loop(0, 2, lambda i: made.append(gpsimd_fill(96)))
        vector_fill(96).depends_on(made[-1])

    _fails(kernel, DependencyError, HERE + r".*producers\[0\] .* is inside a dynamic loop .*same dynamic-loop nesting")


def test_an_edge_between_iterations_of_a_dynamic_range_is_rejected():
    def kernel():
        made = []
        for _ in nl.dynamic_range(3):
            c = vector_fill(96)
            if made:
                c.depends_on(made[-1])
            made.append(c)

    _fails(kernel, DependencyError, r"another iteration of it")


def test_an_edge_out_of_a_while_loop_body_is_rejected():
    def kernel():
        made = []
        reg = nisa.register_alloc(1)

        def body(r):
            made.append(gpsimd_fill(96))
            nisa.register_move(r, 0)
            return r

        nl.while_loop(reg, body)
        vector_fill(96).depends_on(made[0])

    _fails(kernel, DependencyError, r"is inside a dynamic loop")


def test_edges_within_one_iteration_and_in_unrolled_loops_are_fine():
    def kernel():
        for _ in nl.affine_range(2):  # unrolled at trace time: no dynamic scope
            a = gpsimd_fill(1200)

        def body(i):
            b = gpsimd_fill(96)
            for _ in range(2):
                vector_fill(96).depends_on(b, a)

        nl.fori_loop(0, 1, body)

    spans, _ = times(kernel)
    b_end = 2 * A_END + 96 / GPSIMD_GHZ  # GpSimd: a, a, then b
    assert spans[3][0] == pytest.approx(b_end + SEMAPHORE_NS, rel=1e-12)
