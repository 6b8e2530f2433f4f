"""The cycle model: hand-computed VLIW bundle schedules from the published latency table, and scaling.

Latencies (tpc_llvm latencies.cpp): LD_TNSR -> VPU 4; VPU ADD -> VPU 4; f32 MUL/MAC -> VPU source 6;
MAC/MUL -> next MAC's accumulator 4; VPU/LD -> store value 1. One instruction per slot per bundle; a VPU
operation with three vector operands (SrcC) never shares a bundle with a store (whose value uses SrcC).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nkisim.tpc as tpc
from nkisim.tpc.schedule import latency_matrix, member_arrays, schedule_member, schedule_reference


@tpc.kernel
def five_ops(ctx: Any, a: tpc.tensor, b: tpc.tensor, out1: tpc.tensor, out2: tpc.tensor) -> None:
    c = ctx.int5()
    x = ctx.v_f32_ld_tnsr_b(c, a)
    y = ctx.v_f32_ld_tnsr_b(c, b)
    s = ctx.v_f32_add_b(x, y)
    m = ctx.v_f32_mul_b(s, x)
    acc = ctx.v_f32_mac_b(m, y, s)
    ctx.v_f32_st_tnsr(c, out1, acc)
    ctx.v_f32_st_tnsr(c, out2, m)


def _one_vector(n: int = 4) -> list[np.ndarray]:
    return [np.arange(64, dtype=np.float32) + i for i in range(n)]


def test_hand_computed_bundles_gaudi() -> None:
    """ld x @0; ld y @1 (load slot taken); add @max(0+4, 1+4)=5; mul @5+4=9; mac: m 9+6=15, y 5,
    accumulator s 5+4=9 -> @15; st acc @15+1=16; st m @9+1=10 (stores may go ahead). 17 cycles."""
    a, b = _one_vector(2)
    r = tpc.run(five_ops, [a, b], outputs=[((64,), np.float32)] * 2, device="gaudi", memory_stalls=False)
    assert r.issue_cycles[0].tolist() == [0, 1, 5, 9, 15, 16, 10]
    assert r.issue_slots[0].tolist() == [0, 0, 2, 2, 2, 3, 3]
    assert r.member_cycles == [17]
    assert r.cycles == 17 + r.launch_cycles
    s = a + b
    m = s * a
    np.testing.assert_allclose(r.outputs[0], m * b + s, rtol=1e-6)
    np.testing.assert_array_equal(r.outputs[1], m)


def test_tensor_load_in_the_store_slot_on_gaudi2() -> None:
    """Gaudi2: the second load takes the free store slot of bundle 0, so everything moves a cycle earlier."""
    a, b = _one_vector(2)
    r = tpc.run(five_ops, [a, b], outputs=[((64,), np.float32)] * 2, device="gaudi2", memory_stalls=False)
    assert r.issue_cycles[0].tolist() == [0, 0, 4, 8, 14, 15, 9]
    assert r.issue_slots[0].tolist() == [0, 3, 2, 2, 2, 3, 3]
    assert r.member_cycles == [16]


@tpc.kernel
def src_c_conflict(ctx: Any, a: tpc.tensor, b: tpc.tensor, d: tpc.tensor, out1: tpc.tensor, out2: tpc.tensor) -> None:
    c = ctx.int5()
    x = ctx.v_f32_ld_tnsr_b(c, a)
    y = ctx.v_f32_ld_tnsr_b(c, b)
    z = ctx.v_f32_ld_tnsr_b(c, d)
    s = ctx.v_f32_add_b(x, y)
    ctx.v_f32_st_tnsr(c, out1, s)
    acc = ctx.v_f32_mac_b(z, z, z)
    ctx.v_f32_st_tnsr(c, out2, acc)


def test_mac_and_store_never_share_a_bundle() -> None:
    """loads @0,1,2; add @5; store of s @6; the MAC is ready @2+4=6 but bundle 6 holds a store -> @7;
    its store @8. 9 cycles (8 without the SrcC rule)."""
    a, b, d = _one_vector(3)
    r = tpc.run(src_c_conflict, [a, b, d], outputs=[((64,), np.float32)] * 2, device="gaudi", memory_stalls=False)
    assert r.issue_cycles[0].tolist() == [0, 1, 2, 5, 6, 7, 8]
    assert r.member_cycles == [9]


@tpc.kernel
def exp_once(ctx: Any, a: tpc.tensor, out: tpc.tensor) -> None:
    c = ctx.int5()
    ctx.v_f32_st_tnsr(c, out, ctx.v_exp_f32(ctx.v_f32_ld_tnsr_b(c, a)))


def test_special_function_macro() -> None:
    """ld @0; GET_LUT_ENTRY @4; LOOKUP @8 (2 issue cycles); 4 MACs from LOOKUP+5=13 (13, 17, 21, 25: accumulator
    chain, 4 each); CALC_FP_SPECIAL @25+6=31 (a MAC result as a source); store @32. 33 cycles."""
    (a,) = _one_vector(1)
    r = tpc.run(exp_once, [a], device="gaudi", memory_stalls=False)
    assert r.issue_cycles[0].tolist() == [0, 4, 8, 13, 17, 21, 25, 31, 32]
    assert r.member_cycles == [33]
    np.testing.assert_allclose(r.outputs[0], np.exp(a.astype(np.float64)), rtol=1e-6)


@tpc.kernel
def add_once(ctx: Any, a: tpc.tensor, b: tpc.tensor, out: tpc.tensor) -> None:
    c = ctx.int5()
    for i in range(ctx.get_index_space_offset()[0], ctx.get_index_space_offset()[0] + ctx.get_index_space_size()[0]):
        c[0] = 64 * i
        ctx.v_f32_st_tnsr(c, out, ctx.v_f32_add_b(ctx.v_f32_ld_tnsr_b(c, a), ctx.v_f32_ld_tnsr_b(c, b)))


def test_bandwidth_stalls_hand_computed() -> None:
    """Gaudi with 8 TPCs streaming: 950 GB/s / (8 x 1.9 GHz) = 62.5 B/cycle, 4.096 cycles per 256-B vector.
    ld x @0, transfer 0..4.096 -> data @5; ld y @1, transfer 4.096..8.192 -> data @9; add @9; store @10,
    transfer 10..14.096. 15 cycles."""
    a = np.arange(8 * 64, dtype=np.float32)
    r = tpc.run(add_once, [a, a], device="gaudi")
    assert len(r.members) == 8
    assert r.issue_cycles[0].tolist() == [0, 1, 9, 10]
    assert r.member_cycles == [15] * 8


def test_compiled_scheduler_matches_the_reference() -> None:
    """numba's scheduler and the plain-Python reference agree on random dependence graphs."""
    rng = np.random.default_rng(7)
    lat = latency_matrix(tpc.load_gaudi("gaudi2").latency)
    for _ in range(20):
        n = 60
        uops = []
        for u in range(n):
            slot = int(rng.integers(0, 4))
            mem = {0: int(rng.choice([1, 3, 5])), 3: int(rng.choice([2, 4])), 1: 0, 2: 0}[slot]
            srcs = [int(s) for s in rng.integers(-1, u, size=int(rng.integers(0, 4)))] if u else []
            kinds = [int(k) for k in rng.integers(0, 4, size=len(srcs))]
            pad = 4 - len(srcs)
            uops.append(
                (slot, int(rng.integers(0, 8)), *srcs, *[-1] * pad, *kinds, *[0] * pad, mem, int(rng.integers(0, 3)))
            )
        arrays = member_arrays(uops, 0)
        args = (*arrays, lat, 2, True, 3.3, 2000)
        fast = schedule_member(*args)
        slow = schedule_reference(*args)
        assert fast[0].tolist() == slow[0].tolist() and fast[1].tolist() == slow[1].tolist()
        assert fast[2] == slow[2] and fast[3] == pytest.approx(slow[3])


def _busy(rows: int, device: str = "gaudi2", num_tpc: int | None = None) -> tpc.TpcResult:
    from tests.tpc.kernels import busy_kernel

    x = np.ones((rows, 64), dtype=np.float32)
    return tpc.run(busy_kernel, [x], device=device, num_tpc=num_tpc)


def test_twice_the_data_twice_the_cycles() -> None:
    one = _busy(24 * 8)
    two = _busy(24 * 16)
    assert max(two.cycles_per_tpc.values()) == pytest.approx(2 * max(one.cycles_per_tpc.values()), rel=0.1)
    np.testing.assert_array_equal(two.outputs[0], np.full((24 * 16, 64), 8 * 3 + 28, dtype=np.float32))


def test_more_tpcs_until_the_work_runs_out() -> None:
    rows = 24 * 16
    cycles = {n: max(_busy(rows, num_tpc=n).cycles_per_tpc.values()) for n in (1, 2, 4, 8, 24)}
    for n in (2, 4, 8, 24):
        assert cycles[n] == pytest.approx(cycles[1] / n, rel=0.1)
    # 24 rows keep at most 24 TPCs busy: all 64 of Gaudi3 take as long as 24 of them
    g3_24, g3_64 = _busy(24, device="gaudi3", num_tpc=24), _busy(24, device="gaudi3")
    assert len(g3_64.cycles_per_tpc) == 24
    assert g3_64.cycles == g3_24.cycles


def test_generations_differ_by_tpc_count_and_clock() -> None:
    """768 rows: 96 per TPC on Gaudi (8 at 1.9 GHz), 32 on Gaudi2 (24 at 2 GHz), 12 on Gaudi3 (64 at 2 GHz)."""
    runs = {d: _busy(768, device=d) for d in ("gaudi", "gaudi2", "gaudi3")}
    per_tpc = {d: max(r.cycles_per_tpc.values()) for d, r in runs.items()}
    assert per_tpc["gaudi"] == pytest.approx(3 * per_tpc["gaudi2"], rel=0.1)
    assert per_tpc["gaudi2"] == pytest.approx(64 / 24 * per_tpc["gaudi3"], rel=0.1)
    work_ns = {d: r.total_ns - r.launch_cycles / r.device.clock_ghz for d, r in runs.items()}
    assert work_ns["gaudi"] / work_ns["gaudi2"] == pytest.approx(3 * 2.0 / 1.9, rel=0.1)


def test_profile_has_one_track_per_tpc(tmp_path: Any) -> None:
    import json

    r = _busy(48)
    tracks = {rec.engine for rec in r.profile.instructions}
    assert tracks == {f"TPC {i}" for i in range(24)}
    assert r.profile.target == "gaudi2"
    assert r.profile.total_cycles == r.cycles  # counted at the TPC clock
    path = tmp_path / "trace.json"
    r.profile.to_perfetto(path)
    names = {e["args"]["name"] for e in json.loads(path.read_text())["traceEvents"] if e.get("name") == "thread_name"}
    assert {"TPC 0", "TPC 23"} <= names


def test_counters() -> None:
    """VPEStats-like counters: vector loads and stores per tensor, instructions, slot utilisation."""
    a = np.ones((4, 640), dtype=np.float32)
    r = tpc.run(add_once_2d, [a, a])
    assert r.vector_loads == {0: 40, 1: 40}
    assert r.vector_stores == {2: 40}
    assert r.instructions == 4 * 40
    assert 0 < r.slot_utilisation["vpu"] <= 1


@tpc.kernel
def add_once_2d(ctx: Any, a: tpc.tensor, b: tpc.tensor, out: tpc.tensor) -> None:
    s = ctx.get_index_space_offset()
    e = s + ctx.get_index_space_size()
    c = ctx.int5()
    for w in range(s[1], e[1]):
        c[1] = w
        for d in range(s[0] * 64, e[0] * 64, 64):
            c[0] = d
            ctx.v_f32_st_tnsr(c, out, ctx.v_f32_add_b(ctx.v_f32_ld_tnsr_b(c, a), ctx.v_f32_ld_tnsr_b(c, b)))
