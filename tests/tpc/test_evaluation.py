"""How a run evaluates and schedules its tape, against numpy formulas and hand-computed bundles.

Values are computed per group (an operation at one dataflow depth, all members at once), loads and
stores use views of the tensors when they can, and identical member bodies share one schedule; each
test takes a kernel down a path where that could go wrong and checks the result independently.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nkisim.tpc as tpc
from nkisim.tpc import types


def _blocks(ctx: Any) -> Any:
    """The int5 of each 64-lane vector of this member's box (dim0 only)."""
    s = ctx.get_index_space_offset()
    e = s + ctx.get_index_space_size()
    c = ctx.int5()
    for d in range(int(s[0]) * 64, int(e[0]) * 64, 64):
        c[0] = d
        yield c


@tpc.kernel
def uneven(ctx: Any, x: tpc.tensor, out: tpc.tensor) -> None:
    """Odd members add 1 twice (a longer dependent chain), even members once."""
    i = int(ctx.get_index_space_offset()[0])
    for c in _blocks(ctx):
        v = ctx.v_f32_ld_tnsr_b(c, x)
        for _ in range(1 + i % 2):
            v = ctx.v_f32_add_b(v, 1.0)
        ctx.v_f32_st_tnsr(c, out, v)


def test_members_with_different_bodies_have_their_own_schedules() -> None:
    """Gaudi, no stalls. Even: ld @0, add @4, st @5 -> 6 cycles. Odd: ld @0, add @4, add @8, st @9 -> 10."""
    x = np.arange(4 * 64, dtype=np.float32)
    r = tpc.run(uneven, [x], device="gaudi", memory_stalls=False)
    assert r.member_cycles == [6, 10, 6, 10]
    assert [a.tolist() for a in r.issue_cycles] == [[0, 4, 5], [0, 4, 8, 9], [0, 4, 5], [0, 4, 8, 9]]
    assert r.instructions == 3 + 4 + 3 + 4
    want = x + 1 + (np.arange(4 * 64) // 64) % 2
    np.testing.assert_array_equal(r.outputs[0], want.astype(np.float32))


def test_a_value_kept_from_another_member() -> None:
    """Members 1..3 add member 0's loaded vector (ready when they start) to their own."""
    kept: dict[str, Any] = {}

    @tpc.kernel
    def shares(ctx: Any, x: tpc.tensor, out: tpc.tensor) -> None:
        for c in _blocks(ctx):
            v = ctx.v_f32_ld_tnsr_b(c, x)
            if "first" not in kept:
                kept["first"] = v
            ctx.v_f32_st_tnsr(c, out, ctx.v_f32_add_b(v, kept["first"]))

    x = np.arange(4 * 64, dtype=np.float32)
    r = tpc.run(shares, [x], device="gaudi", memory_stalls=False)
    np.testing.assert_array_equal(r.outputs[0], x + np.tile(x[:64], 4))
    assert r.member_cycles == [6] * 4  # ld @0, add @4, st @5: the kept value is ready at the start


def test_values_read_after_their_tensor_is_overwritten() -> None:
    """``y`` is stored to ``out``, which is then overwritten; ``y`` read later keeps its lanes."""

    @tpc.kernel
    def rewrite(ctx: Any, x: tpc.tensor, out: tpc.tensor, out2: tpc.tensor) -> None:
        for c in _blocks(ctx):
            y = ctx.v_f32_add_b(ctx.v_f32_ld_tnsr_b(c, x), 1.0)
            ctx.v_f32_st_tnsr(c, out, y)
            ctx.aso()
            z = ctx.v_f32_ld_tnsr_b(c, out)  # x + 1
            ctx.v_f32_st_tnsr(c, out, ctx.v_f32_add_b(z, 10.0))
            ctx.aso()
            w = ctx.v_f32_ld_tnsr_b(c, out)  # x + 11
            ctx.v_f32_st_tnsr(c, out2, ctx.v_f32_add_b(y, w))

    x = np.random.default_rng(1).standard_normal(6 * 64).astype(np.float32)
    r = tpc.run(rewrite, [x], outputs=[(x.shape, np.float32)] * 2)
    one, eleven = x + np.float32(1), x + np.float32(1) + np.float32(10)
    np.testing.assert_array_equal(r.outputs[0], eleven)
    np.testing.assert_array_equal(r.outputs[1], one + eleven)


def test_loaded_values_survive_a_later_store_to_their_tensor() -> None:
    """A load of ``out`` (zeros) before a store to it still reads zeros when used afterwards."""

    @tpc.kernel
    def before(ctx: Any, x: tpc.tensor, out: tpc.tensor, out2: tpc.tensor) -> None:
        for c in _blocks(ctx):
            old = ctx.v_f32_ld_tnsr_b(c, out)
            ctx.v_f32_st_tnsr(c, out, ctx.v_f32_mul_b(ctx.v_f32_ld_tnsr_b(c, x), 3.0))
            ctx.aso()
            new = ctx.v_f32_ld_tnsr_b(c, out)
            ctx.v_f32_st_tnsr(c, out2, ctx.v_f32_sub_b(new, old))

    x = np.arange(5 * 64, dtype=np.float32)
    r = tpc.run(before, [x], outputs=[(x.shape, np.float32)] * 2)
    np.testing.assert_array_equal(r.outputs[0], x * 3)
    np.testing.assert_array_equal(r.outputs[1], x * 3)


def test_a_kernel_writing_its_input_leaves_the_callers_array_alone() -> None:
    @tpc.kernel
    def in_place(ctx: Any, x: tpc.tensor, out: tpc.tensor) -> None:
        for c in _blocks(ctx):
            v = ctx.v_f32_ld_tnsr_b(c, x)
            ctx.v_f32_st_tnsr(c, x, ctx.v_f32_add_b(v, 1.0))
            ctx.aso()
            ctx.v_f32_st_tnsr(c, out, ctx.v_f32_add_b(ctx.v_f32_ld_tnsr_b(c, x), v))

    x = np.arange(8 * 64, dtype=np.float32)
    before = x.copy()
    r = tpc.run(in_place, [x], check_mapping=False)
    np.testing.assert_array_equal(x, before)
    np.testing.assert_array_equal(r.outputs[0], 2 * before + 1)


def test_loads_and_stores_in_any_order() -> None:
    """Vectors visited backwards and twice over, stores overlapping by half a vector: numpy's last write wins."""

    @tpc.kernel
    def shuffled(ctx: Any, x: tpc.tensor, out: tpc.tensor) -> None:
        c = ctx.int5()
        for d in [*range(7 * 64, -1, -64), *range(0, 8 * 64, 64), 32]:
            c[0] = d
            ctx.v_f32_st_tnsr(c, out, ctx.v_f32_sub_b(ctx.v_f32_ld_tnsr_b(c, x), float(d)))

    x = np.arange(8 * 64, dtype=np.float32) * 2
    r = tpc.run(shuffled, [x], index_space=[1], check_mapping=False)
    want = x - (np.arange(8 * 64) // 64 * 64)
    want[32:96] = x[32:96] - 32  # the last store, lanes 32..95
    np.testing.assert_array_equal(r.outputs[0], want.astype(np.float32))


def test_more_than_255_operations_in_one_run() -> None:
    """300 distinct shuffles (each its own opcode) on two vectors, then an add: numpy applies the same maps."""
    maps = [np.random.default_rng(k).permutation(64) for k in range(300)]

    @tpc.kernel
    def many(ctx: Any, x: tpc.tensor, out: tpc.tensor) -> None:
        for c in _blocks(ctx):
            v = ctx.v_f32_ld_tnsr_b(c, x)
            for lanes in maps:
                v = ctx.v_f32_shuffle_b(v, [int(p) | 0x80 for p in lanes])
            ctx.v_f32_st_tnsr(c, out, ctx.v_f32_add_b(v, 1.0))

    x = np.random.default_rng(2).standard_normal((2, 64)).astype(np.float32)
    want = x.copy()
    for lanes in maps:
        want = want[:, lanes]
    r = tpc.run(many, [x.reshape(-1)], index_space=[2])
    np.testing.assert_array_equal(r.outputs[0].reshape(2, 64), want + np.float32(1))
    assert r.instructions == 2 * (1 + 300 + 1 + 1)


def test_more_values_than_the_handle_pool_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Handles past the interned pool are made as needed and the pool stays within its cap."""
    monkeypatch.setattr(types, "_POOL", {code: [] for code in types.VEC_OF})
    monkeypatch.setattr(types, "_POOL_CAP", 40)
    monkeypatch.setattr(types, "_CHUNK", 16)
    x = np.random.default_rng(3).standard_normal((10, 640)).astype(np.float32)

    @tpc.kernel
    def relu(ctx: Any, t: tpc.tensor, out: tpc.tensor) -> None:
        s = ctx.get_index_space_offset()
        e = s + ctx.get_index_space_size()
        c = ctx.int5()
        for row in range(int(s[1]), int(e[1])):
            c[1] = row
            for d in range(int(s[0]) * 64, int(e[0]) * 64, 64):
                c[0] = d
                ctx.v_f32_st_tnsr(c, out, ctx.v_f32_max_b(ctx.v_f32_ld_tnsr_b(c, t), 0.0))

    r = tpc.run(relu, [x])
    np.testing.assert_array_equal(r.outputs[0], np.maximum(x, 0))
    assert len(types._POOL[0]) <= 40 + 16
