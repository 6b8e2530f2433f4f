"""``nki.collectives`` on N simulated ranks: ``nkisim.run(kernel, [inputs per rank], ranks=N)``.

Expected values are numpy references written here (concatenate, sum, split per rank list);
expected times are the ring formula of docs/collectives.md worked out by hand from the
published link figures; error tests check the message.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nkisim
import nkisim.nki as nki
import nkisim.nki.collectives as ncc
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.errors import KernelError, MemoryKindError, OperandError, ShapeError, TargetError, UnsupportedError
from nkisim.hw import load_target
from nkisim.nki.collectives import ReplicaGroup, rg_partition_op

FAST = settings(max_examples=10, deadline=None)
OPS = {"add": (nl.add, np.add), "maximum": (nl.maximum, np.maximum), "minimum": (nl.minimum, np.minimum)}


def world(n):
    return ReplicaGroup([list(range(n))])


def hbm(shape, dtype):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.shared_hbm)


@nki.jit
def gather_rows(x, group, n):
    src, dst = hbm(x.shape, x.dtype), hbm((x.shape[0] * n, *x.shape[1:]), x.dtype)
    nisa.dma_copy(dst=src, src=x)
    ncc.all_gather(srcs=[src], dsts=[dst], replica_group=group, collective_dim=0)
    return dst


@nki.jit
def reduce_all(x, group, op):
    src, dst = hbm(x.shape, x.dtype), hbm(x.shape, x.dtype)
    nisa.dma_copy(dst=src, src=x)
    ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=group, op=op)
    return dst


@nki.jit
def reduce_scatter_rows(x, group, n):
    src, dst = hbm(x.shape, x.dtype), hbm((x.shape[0] // n, *x.shape[1:]), x.dtype)
    nisa.dma_copy(dst=src, src=x)
    ncc.reduce_scatter(srcs=[src], dsts=[dst], replica_group=group, collective_dim=0, op=nl.add)
    return dst


@nki.jit
def exchange_rows(x, group):
    src, dst = hbm(x.shape, x.dtype), hbm(x.shape, x.dtype)
    nisa.dma_copy(dst=src, src=x)
    ncc.all_to_all(srcs=[src], dsts=[dst], replica_group=group, collective_dim=0)
    return dst


@nki.jit
def gather_sbuf(x, group, n, dim):
    rows, cols = x.shape
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    dst = nl.ndarray((rows * n, cols) if dim == 0 else (rows, cols * n), dtype=x.dtype, buffer=nl.sbuf)
    out = hbm(dst.shape, x.dtype)
    nisa.dma_copy(dst=src, src=x)
    ncc.all_gather(srcs=[src], dsts=[dst], replica_group=group, collective_dim=dim)
    nisa.dma_copy(dst=out, src=dst)
    return out


def inputs(rng, n, shape, dtype=np.float32):
    return [rng.integers(-8, 8, size=shape).astype(dtype) for _ in range(n)]


@FAST
@given(n=st.sampled_from([2, 4, 8]), rows=st.integers(1, 6), cols=st.integers(1, 40), seed=st.integers(0, 2**31))
def test_all_gather_concatenates_the_ranks_in_order(n, rows, cols, seed):
    xs = inputs(np.random.default_rng(seed), n, (rows, cols))
    result = nkisim.run(gather_rows, [[x, world(n), n] for x in xs], ranks=n, target="trn2")
    for out in result.outputs:
        np.testing.assert_array_equal(out, np.concatenate(xs, axis=0))


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("op", sorted(OPS))
def test_all_reduce_gives_every_rank_the_reduction(n, op):
    xs = inputs(np.random.default_rng(n), n, (3, 17))
    result = nkisim.run(reduce_all, [[x, world(n), OPS[op][0]] for x in xs], ranks=n, target="trn2")
    expected = OPS[op][1].reduce(np.stack(xs), axis=0)
    for out in result.outputs:
        np.testing.assert_array_equal(out, expected)


def test_all_reduce_in_bfloat16_rounds_the_float32_sum_once():
    xs = [np.full((2, 4), v, dtype=ml_dtypes.bfloat16) for v in (1.0, 2.0**-8, 2.0**-8)]
    result = nkisim.run(reduce_all, [[x, world(3), nl.add] for x in xs], ranks=3, target="trn2")
    expected = (np.float32(1.0) + np.float32(2.0**-8) + np.float32(2.0**-8)).astype(ml_dtypes.bfloat16)
    assert result.outputs[0].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(result.outputs[2], np.full((2, 4), expected))


@pytest.mark.parametrize("n", [2, 4, 8])
def test_reduce_scatter_gives_rank_k_the_kth_part_of_the_sum(n):
    xs = inputs(np.random.default_rng(1), n, (2 * n, 5))
    result = nkisim.run(reduce_scatter_rows, [[x, world(n), n] for x in xs], ranks=n, target="trn2")
    total = np.sum(xs, axis=0)
    for rank, out in enumerate(result.outputs):
        np.testing.assert_array_equal(out, total[2 * rank : 2 * rank + 2])


@pytest.mark.parametrize("n", [2, 4, 8])
def test_all_to_all_sends_part_j_to_rank_j(n):
    xs = inputs(np.random.default_rng(2), n, (3 * n, 4))
    result = nkisim.run(exchange_rows, [[x, world(n)] for x in xs], ranks=n, target="trn2")
    for rank, out in enumerate(result.outputs):
        np.testing.assert_array_equal(out, np.concatenate([x[3 * rank : 3 * rank + 3] for x in xs]))


@pytest.mark.parametrize("dim", [0, 1])
def test_sbuf_all_gather_joins_partitions_or_the_free_dim(dim):
    xs = inputs(np.random.default_rng(3), 4, (16, 8))
    result = nkisim.run(gather_sbuf, [[x, world(4), 4, dim] for x in xs], ranks=4, target="trn2")
    np.testing.assert_array_equal(result.outputs[3], np.concatenate(xs, axis=dim))


def test_sub_groups_reduce_within_each_rank_list():
    xs = inputs(np.random.default_rng(4), 4, (2, 3))
    group = ReplicaGroup([[0, 1], [2, 3]])
    result = nkisim.run(reduce_all, [[x, group, nl.add] for x in xs], ranks=4, target="trn2")
    for rank, out in enumerate(result.outputs):
        pair = (0, 1) if rank < 2 else (2, 3)
        np.testing.assert_array_equal(out, xs[pair[0]] + xs[pair[1]])


def test_a_strided_group_gathers_in_list_order():
    group = ReplicaGroup.from_partition_op(4, rg_partition_op.mod, 2)  # [[0, 2], [1, 3]]
    xs = inputs(np.random.default_rng(5), 4, (1, 6))
    result = nkisim.run(gather_rows, [[x, group, 2] for x in xs], ranks=4, target="trn2")
    np.testing.assert_array_equal(result.outputs[2], np.concatenate([xs[0], xs[2]]))
    np.testing.assert_array_equal(result.outputs[1], np.concatenate([xs[1], xs[3]]))


def test_from_partition_op_matches_the_published_examples():
    # [api ReplicaGroup.from_partition_op], 8 ranks
    assert ReplicaGroup.from_partition_op(8, rg_partition_op.bitwise_and, 0) == ReplicaGroup([list(range(8))])
    assert ReplicaGroup.from_partition_op(8, rg_partition_op.div, 4) == ReplicaGroup([[0, 1, 2, 3], [4, 5, 6, 7]])
    assert ReplicaGroup.from_partition_op(8, rg_partition_op.mod, 4) == ReplicaGroup([[0, 4], [1, 5], [2, 6], [3, 7]])


def test_lnc2_ranks_meet_core_by_core():
    xs = inputs(np.random.default_rng(6), 2, (4, 8))
    result = nkisim.run(reduce_all[2], [[x, world(2), nl.add] for x in xs], ranks=2, target="trn2")
    for out in result.outputs:
        np.testing.assert_array_equal(out, xs[0] + xs[1])
    tracks = {r.engine.rsplit(" ", 2)[0] for r in result.profile.instructions}
    assert tracks == {"rank0 core0", "rank0 core1", "rank1 core0", "rank1 core1"}


# -- permutes and rank ids --------------------------------------------------------------


@nki.jit
def ring_gather(x, group, n):
    """Gather by n - 1 ring steps, placing each received block at its origin rank's row."""
    rows, cols = x.shape
    out = hbm((n, rows, cols), x.dtype)
    buffers = [nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf) for _ in range(2)]
    nisa.dma_copy(dst=buffers[0], src=x)
    for step in range(n):
        held = buffers[step % 2]
        origin = ncc.collective_permute_implicit_current_processing_rank_id(iteration_id=step, replica_group=group)
        nisa.dma_copy(dst=out.ap(pattern=[[cols, rows], [1, cols]], scalar_offset=origin, indirect_dim=0), src=held)
        if step < n - 1:
            ncc.collective_permute_implicit(
                srcs_by_channel=[[held]], dsts_by_channel=[[buffers[(step + 1) % 2]]], replica_group=group
            )
    return out


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_permutes_and_processing_rank_ids_gather_everything(n):
    xs = inputs(np.random.default_rng(7), n, (4, 6))
    result = nkisim.run(ring_gather, [[x, world(n), n] for x in xs], ranks=n, target="trn2")
    for out in result.outputs:
        np.testing.assert_array_equal(out, np.stack(xs))


@nki.jit
def ring_reduce_step(a, b, group):
    s0, s1 = (nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf) for _ in range(2))
    dst = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    out = hbm(a.shape, a.dtype)
    nisa.dma_copy(dst=s0, src=a)
    nisa.dma_copy(dst=s1, src=b)
    ncc.collective_permute_implicit_reduce(
        srcs0_by_channel=[[s0]], srcs1_by_channel=[[s1]], dsts_by_channel=[[dst]], replica_group=group, op=nl.maximum
    )
    nisa.dma_copy(dst=out, src=dst)
    return out


def test_permute_implicit_reduce_receives_the_predecessors_reduction():
    rng = np.random.default_rng(8)
    a, b = inputs(rng, 3, (2, 5)), inputs(rng, 3, (2, 5))
    result = nkisim.run(ring_reduce_step, [[a[r], b[r], world(3)] for r in range(3)], ranks=3, target="trn2")
    for rank, out in enumerate(result.outputs):
        before = (rank - 1) % 3
        np.testing.assert_array_equal(out, np.maximum(a[before], b[before]))


@nki.jit
def permute(x, pairs):
    src, dst = hbm(x.shape, x.dtype), hbm(x.shape, x.dtype)
    nisa.dma_copy(dst=src, src=x)
    ncc.collective_permute(srcs=[src], dsts=[dst], source_target_pairs=pairs)
    return dst


def test_collective_permute_moves_source_to_target():
    xs = inputs(np.random.default_rng(9), 4, (3, 3))
    pairs = [(0, 1), (1, 0), (2, 3), (3, 2)]
    result = nkisim.run(permute, [[x, pairs] for x in xs], ranks=4, target="trn2")
    for rank, out in enumerate(result.outputs):
        np.testing.assert_array_equal(out, xs[rank ^ 1])


@nki.jit
def pick_by_rank(table):
    _, rows, cols = table.shape
    out = hbm((rows, cols), table.dtype)
    nisa.dma_copy(dst=out, src=table.ap(pattern=[[cols, rows], [1, cols]], scalar_offset=ncc.rank_id(), indirect_dim=0))
    return out


def test_rank_id_selects_each_ranks_slice_and_is_zero_on_one_rank():
    table = np.arange(4 * 2 * 3, dtype=np.float32).reshape(4, 2, 3)
    result = nkisim.run(pick_by_rank, [[table]] * 4, ranks=4, target="trn2")
    for rank, out in enumerate(result.outputs):
        np.testing.assert_array_equal(out, table[rank])
    np.testing.assert_array_equal(nkisim.run(pick_by_rank, [table], target="trn2").outputs, table[0])


def test_a_one_rank_run_gathers_a_group_of_itself():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(nkisim.run(gather_rows, [x, ReplicaGroup([[0]]), 1], target="trn2").outputs, x)


# -- time -------------------------------------------------------------------------------


@nki.jit
def gather_only(shape, group, n, late=0):
    """An all-gather of never-written HBM: its data is ready at 0 unless rank ``late`` first copies into it."""
    src, dst = hbm(shape, nl.float32), hbm((shape[0] * n, *shape[1:]), nl.float32)
    if ncc.rank_id().read() == late and late:
        nisa.dma_copy(dst=src, src=dst[: shape[0]])
    ncc.all_gather(srcs=[src], dsts=[dst], replica_group=group, collective_dim=0)
    return dst


def collective_records(profile, opcode="all_gather"):
    return [r for r in profile.instructions if r.opcode == opcode]


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_all_gather_time_is_worked_out_by_hand(n):
    hw = load_target("trn2")
    # NeuronLink-v3: 1.28 TB/s per Trainium2 chip over 4 links [trainium2.rst, trainium2_arch.rst]
    assert hw.collectives.link_bytes_per_ns == 1280 / 4
    hop = 1300 + 500  # one DMA trigger and one remote semaphore write (estimates, docs/collectives.md)
    assert hw.collectives.hop_latency_ns == hop
    gathered = n * 64 * 128 * 4  # bytes of dst
    expected = (n - 1) * hop + (n - 1) / n * gathered / 320
    profile = nkisim.profile(gather_only, [[(64, 128), world(n), n]] * n, ranks=n, target="trn2", check="off")
    records = collective_records(profile)
    assert len(records) == n
    for record in records:
        assert record.start_ns == 0
        assert record.end_ns == pytest.approx(expected)


def test_all_reduce_takes_twice_the_ring_time():
    hw = load_target("trn2")
    nbytes, n = 32 * 64 * 4, 4
    links = hw.collectives
    expected = 2 * ((n - 1) * links.hop_latency_ns + (n - 1) / n * nbytes / links.link_bytes_per_ns)

    @nki.jit
    def kernel(group):
        src, dst = hbm((32, 64), nl.float32), hbm((32, 64), nl.float32)
        ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=group, op=nl.add)
        return dst

    profile = nkisim.profile(kernel, [[world(n)]] * n, ranks=n, target="trn2", check="off")
    assert [r.end_ns for r in collective_records(profile, "all_reduce")] == pytest.approx([expected] * n)


def test_a_collective_starts_when_the_last_rank_arrives():
    profile = nkisim.profile(gather_only, [[(64, 128), world(4), 4, 2]] * 4, ranks=4, target="trn2", check="off")
    late_copy = next(r for r in profile.instructions if r.opcode == "dma_copy")
    assert late_copy.engine.startswith("rank2 ")
    # rank 2's collective reads what its copy wrote on another DMA queue: a semaphore wait after it
    ready = late_copy.end_ns + load_target("trn2").sync.semaphore_latency_ns
    assert [r.start_ns for r in collective_records(profile)] == pytest.approx([ready] * 4)


def test_runs_are_deterministic_across_threads():
    xs = inputs(np.random.default_rng(10), 8, (4, 8))

    def once():
        result = nkisim.run(reduce_all, [[x, world(8), nl.add] for x in xs], ranks=8, target="trn2")
        return [o.tobytes() for o in result.outputs], [
            (r.engine, r.start_ns, r.end_ns) for r in result.profile.instructions
        ]

    first = once()
    assert all(once() == first for _ in range(3))


# -- errors -----------------------------------------------------------------------------


def test_a_rank_in_two_lists_is_refused():
    with pytest.raises(OperandError, match=r"rank 1 is in two rank lists \(\[0, 1\] and \[1, 2\]\)"):
        ReplicaGroup([[0, 1], [1, 2]])


def test_shapes_that_differ_between_ranks_are_named():
    xs = [np.zeros((2, 3), np.float32), np.zeros((3, 3), np.float32)]
    with pytest.raises(ShapeError, match=r"ncc\.all_reduce \[DMA, trn2\]: srcs differ between ranks: rank \d has"):
        nkisim.run(reduce_all, [[x, world(2), nl.add] for x in xs], ranks=2, target="trn2")


def test_mixing_hbm_and_sbuf_is_refused():
    @nki.jit
    def kernel(x, group):
        src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        dst = hbm(x.shape, x.dtype)
        nisa.dma_copy(dst=src, src=x)
        ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=group, op=nl.add)
        return dst

    x = np.zeros((2, 2), np.float32)
    with pytest.raises(MemoryKindError, match=r"test_collectives_ranks\.py:\d+: ncc\.all_reduce .*dsts\[0\] is in HBM"):
        nkisim.run(kernel, [[x, world(2)]] * 2, ranks=2, target="trn2")


def test_a_rank_that_never_arrives_is_an_error_not_a_hang():
    @nki.jit
    def kernel(x, group):
        if ncc.rank_id().read() == 0:
            return reduce_all(x, group, nl.add)
        return x

    with pytest.raises(KernelError, match=r"rank 0 reached ncc\.all_reduce but rank 1 returned without reaching it"):
        nkisim.run(kernel, [[np.zeros((1, 1), np.float32), world(2)]] * 2, ranks=2, target="trn2")


def test_ranks_at_different_collectives_fail_instead_of_deadlocking():
    @nki.jit
    def kernel(x, group):
        if ncc.rank_id().read() == 0:
            return reduce_all(x, group, nl.add)
        return exchange_rows(x, group)

    with pytest.raises(KernelError, match="would deadlock"):
        nkisim.run(kernel, [[np.zeros((2, 1), np.float32), world(2)]] * 2, ranks=2, target="trn2")


def test_a_group_beyond_the_launch_names_the_ranks_option():
    with pytest.raises(
        OperandError, match=r"replica_group ReplicaGroup\(\[\[0, 1\]\]\) names rank 1, but the kernel runs on 1 rank"
    ):
        nkisim.run(gather_rows, [np.zeros((1, 1), np.float32), world(2), 2], target="trn2")


def test_a_wrong_dst_shape_says_what_it_must_be():
    with pytest.raises(ShapeError, match=r"dsts\[0\] shape \[2, 3\] must be \[4, 3\]"):
        nkisim.run(gather_rows, [[np.zeros((2, 3), np.float32), world(2), 1]] * 2, ranks=2, target="trn2")


def test_variable_length_collectives_are_not_supported():
    @nki.jit
    def kernel():
        ncc.all_to_all_v([], [], world(1), None)

    with pytest.raises(UnsupportedError, match=r"ncc\.all_to_all_v: is not supported by nkisim"):
        nkisim.run(kernel, [], target="trn2")


def test_trn1_has_no_collectives():
    with pytest.raises(TargetError, match=r"ncc\.all_reduce \[DMA, trn1\]: needs replica_collectives"):
        nkisim.run(reduce_all, [np.zeros((1, 1), np.float32), world(1), nl.add], target="trn1")


def test_ranks_needs_one_input_set_per_rank():
    with pytest.raises(ValueError, match="ranks=2 but inputs holds 3"):
        nkisim.run(reduce_all, [[], [], []], ranks=2, target="trn2")


def test_a_collective_returns_its_instruction_handle():
    seen = []

    @nki.jit
    def kernel(x):
        src, dst = hbm(x.shape, x.dtype), hbm(x.shape, x.dtype)
        copy = nisa.dma_copy(dst=src, src=x)
        seen.append(ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=world(1), op=nl.add).depends_on(copy))
        return dst

    x = np.ones((2, 2), np.float32)
    np.testing.assert_array_equal(nkisim.run(kernel, [x], target="trn2").outputs, x)
    assert repr(seen[0]).startswith("<NkiInstruction ncc.all_reduce #1 at test_collectives_ranks.py:")


def test_ranks_waiting_in_groups_that_never_meet_are_a_deadlock_not_a_hang():
    """Each rank names another pairing: rank 0 waits for 1, 1 for 2, 2 for 0, and none can go on."""
    x = np.ones((4, 4), np.float32)
    pairings = [[[0, 1], [2]], [[1, 2], [0]], [[0, 2], [1]]]
    inputs = [[x, ReplicaGroup(pairing), nl.add] for pairing in pairings]
    with pytest.raises(
        KernelError,
        match=r"every program waits and none can go on, the programs would deadlock: "
        r"rank 0 at ncc\.all_reduce .*; rank 1 at ncc\.all_reduce .*; rank 2 at ncc\.all_reduce",
    ):
        nkisim.run(reduce_all, inputs, ranks=3, target="trn2")
