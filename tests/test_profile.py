"""Profile: its numbers, its instruction records, its text summary and its Perfetto trace.

Expected times come from the documented cost formulas over the hw constants (see
tests/test_timing.py for the formulas themselves).
"""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np
import pytest

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.hw import load_target

REL = 1e-9
P = 128
N = 512
THIS_FILE = os.path.basename(__file__)
ENGINES = {"Sync", "Tensor", "Vector", "Scalar", "GpSimd", "DMA"}


def line_of(marker: str) -> int:
    """The line of this file that carries ``marker`` (a comment at the end of a nisa call)."""
    with open(__file__) as fh:
        hits = [i for i, text in enumerate(fh, start=1) if text.rstrip().endswith(marker)]
    assert len(hits) == 1, f"marker {marker} must appear on exactly one line"
    return hits[0]


def store(out, tile):
    nisa.dma_copy(dst=out, src=tile)  # @helper-store


def mixed_kernel(a, b):
    """Two loads, then one instruction on each compute engine, then a store through a helper."""
    out = nl.ndarray((P, N), dtype=nl.float32, buffer=nl.shared_hbm)
    a_tile, b_tile = nl.ndarray((P, N), dtype=nl.float32), nl.ndarray((P, N), dtype=nl.float32)
    c_tile, e_tile = nl.ndarray((P, N), dtype=nl.float32), nl.ndarray((P, N), dtype=nl.float32)
    iota_tile = nl.ndarray((P, N), dtype=nl.int32)
    acc = nl.ndarray((P, N), dtype=nl.float32, buffer=nl.psum)
    nisa.dma_copy(dst=a_tile, src=a)  # @load-a
    nisa.dma_copy(dst=b_tile, src=b)  # @load-b
    nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)  # @add
    nisa.activation(dst=e_tile, op=nl.exp, data=c_tile)  # @exp
    nisa.nc_matmul(dst=acc, stationary=a_tile[:, 0:P], moving=b_tile)  # @matmul
    nisa.iota(dst=iota_tile, pattern=[[1, N]], offset=0)  # @iota
    store(out, e_tile)
    return out


def run_mixed(target="trn1"):
    a = np.ones((P, N), np.float32)
    return nkisim.run(mixed_kernel, [a, a], target=target).profile


@pytest.fixture(scope="module")
def profile():
    return run_mixed()


# -- numbers --------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_total_cycles_counts_total_ns_at_the_reference_clock(target):
    hw = load_target(target)
    prof = run_mixed(target)
    assert prof.target == target
    assert prof.reference_clock_ghz == hw.reference_clock_ghz
    assert isinstance(prof.total_cycles, int)
    assert prof.total_cycles == round(prof.total_ns * hw.reference_clock_ghz)


def test_total_ns_is_the_last_result(profile):
    assert profile.total_ns == max(rec.end_ns for rec in profile.instructions)
    assert min(rec.start_ns for rec in profile.instructions) == 0.0


def dma_busy_ns(hw, nbytes):
    """A [P, N] fp32 transfer between HBM and SBUF: 16 DMA engines, 2 KiB rows at the table's efficiency."""
    assert (N * 4, 0.80) in hw.dma.payload_efficiency
    rate = min(hw.dma.engines * hw.dma.bytes_per_ns_per_engine, hw.hbm.bandwidth_bytes_per_ns)
    return nbytes / (rate * 0.80)


def access_ns(cfg):
    """When a compute engine's result is visible after its end (the SBUF/PSUM access latency)."""
    return cfg.access_latency_cycles / cfg.clock_ghz


def exp_ns(hw):
    """The kernel's one exp: its activation table is loaded first, then ``max(MIN_II, N)`` cycles."""
    return hw.scalar.table_load_ns + max(hw.scalar.min_ii_cycles, N) / hw.scalar.clock_ghz


def test_total_ns_of_the_mixed_kernel_from_the_formulas(profile):
    """load a | load b (shared engines) -> add (Vector) -> exp (Scalar) -> store; the rest runs alongside."""
    hw = load_target("trn1")
    busy = dma_busy_ns(hw, P * N * 4)
    lat, sem = hw.dma.fixed_latency_ns, hw.sync.semaphore_latency_ns
    loads_end = lat + 2 * busy
    add = max(hw.vector.min_ii_cycles, 2 * N) / hw.vector.clock_ghz
    exp = exp_ns(hw)
    expected = loads_end + sem + add + access_ns(hw.vector) + sem + exp + access_ns(hw.scalar) + sem + lat + busy
    assert profile.total_ns == pytest.approx(expected, rel=REL)


def test_instruction_count(profile):
    assert profile.instruction_count == 7
    assert len(profile.instructions) == 7
    assert [rec.index for rec in profile.instructions] == list(range(7))


# -- instruction records --------------------------------------------------------------


def test_records_carry_opcode_and_engine(profile):
    assert [(rec.opcode, rec.engine) for rec in profile.instructions] == [
        ("dma_copy", "DMA q0"),
        ("dma_copy", "DMA q1"),
        ("tensor_tensor", "Vector"),
        ("activation", "Scalar"),
        ("nc_matmul", "Tensor"),
        ("iota", "GpSimd"),
        ("dma_copy", "DMA q2"),
    ]


def test_records_carry_source_file_and_line_of_the_nisa_call(profile):
    markers = ["@load-a", "@load-b", "@add", "@exp", "@matmul", "@iota", "@helper-store"]
    for rec, marker in zip(profile.instructions, markers, strict=True):
        assert rec.source == f"{THIS_FILE}:{line_of('# ' + marker)}", marker


def test_records_carry_start_end_and_costs(profile):
    hw = load_target("trn1")
    recs = {rec.opcode + str(rec.index): rec for rec in profile.instructions}
    for rec in profile.instructions:
        assert 0.0 <= rec.start_ns <= rec.end_ns
        assert rec.duration_ns == rec.end_ns - rec.start_ns
    add = recs["tensor_tensor2"]
    assert add.duration_ns == pytest.approx(max(hw.vector.min_ii_cycles, 2 * N) / hw.vector.clock_ghz, rel=REL)
    exp = recs["activation3"]
    assert exp.duration_ns == pytest.approx(exp_ns(hw), rel=REL)
    matmul = recs["nc_matmul4"]
    fp32_cycles = max(min(hw.tensor.matmul_min_ii_cycles, P), N) * hw.tensor.fp32_cycle_factor
    assert matmul.duration_ns == pytest.approx(fp32_cycles / hw.tensor.clock_ghz, rel=REL)
    assert matmul.flops == 2 * P * P * N
    iota = recs["iota5"]
    # independent, but on NeuronCore-v2 GpSimd waits for Vector's SBUF port: it follows the add
    assert iota.start_ns == pytest.approx(add.end_ns, rel=REL)
    assert iota.duration_ns == pytest.approx((hw.gpsimd.startup_cycles + N) / hw.gpsimd.clock_ghz, rel=REL)
    for rec in (recs["dma_copy0"], recs["dma_copy1"], recs["dma_copy6"]):
        assert rec.bytes == P * N * 4


def test_records_name_their_producer(profile):
    producers = [rec.producer for rec in profile.instructions]
    # add waits for load b (the later load), exp for add, the store for exp; matmul for load b.
    assert producers == [-1, -1, 1, 2, 1, -1, 3]


# -- engine busy time -----------------------------------------------------------------


def test_engine_busy_ns_keys(profile):
    assert set(profile.engine_busy_ns) == ENGINES


def test_engine_busy_ns_values(profile):
    hw = load_target("trn1")
    busy = profile.engine_busy_ns
    assert busy["Sync"] == 0.0
    assert busy["Vector"] == pytest.approx(max(hw.vector.min_ii_cycles, 2 * N) / hw.vector.clock_ghz, rel=REL)
    assert busy["Scalar"] == pytest.approx(exp_ns(hw), rel=REL)
    fp32_cycles = max(min(hw.tensor.matmul_min_ii_cycles, P), N) * hw.tensor.fp32_cycle_factor
    assert busy["Tensor"] == pytest.approx(fp32_cycles / hw.tensor.clock_ghz, rel=REL)
    assert busy["GpSimd"] == pytest.approx((hw.gpsimd.startup_cycles + N) / hw.gpsimd.clock_ghz, rel=REL)
    # DMA: time with bytes moving (fixed latency excluded); the three transfers never overlap.
    assert busy["DMA"] == pytest.approx(3 * dma_busy_ns(hw, P * N * 4), rel=REL)


def test_engine_utilisation_is_busy_over_total(profile):
    util = profile.engine_utilisation()
    assert set(util) == ENGINES
    for name, frac in util.items():
        assert frac == pytest.approx(profile.engine_busy_ns[name] / profile.total_ns, rel=REL)
        assert 0.0 <= frac <= 1.0


# -- summary --------------------------------------------------------------------------


def test_summary_has_total_time_busy_percentages_and_instruction_count(profile):
    text = profile.summary()
    assert str(profile) == text
    assert "trn1" in text
    assert f"{profile.total_ns / 1000:.3f} us" in text
    assert str(profile.total_cycles) in text
    assert re.search(rf"\b{profile.instruction_count} instructions\b", text)
    for name, busy in profile.engine_busy_ns.items():
        match = re.search(rf"^\s*{name}\b.*?(\d+(?:\.\d+)?)%", text, re.MULTILINE)
        assert match, f"no busy % line for {name}:\n{text}"
        assert float(match.group(1)) == pytest.approx(100 * busy / profile.total_ns, abs=0.051)


def test_summary_counts_instructions_per_engine(profile):
    text = profile.summary()
    counts = {"Sync": 0, "Tensor": 1, "Vector": 1, "Scalar": 1, "GpSimd": 1, "DMA": 3}
    for name, count in counts.items():
        line = next(line for line in text.splitlines() if line.strip().startswith(name))
        assert line.split()[-1] == str(count), line


# -- Perfetto / Chrome trace ----------------------------------------------------------


def load_trace(prof, tmp_path):
    path = tmp_path / "t.json"
    prof.to_perfetto(path)
    with open(path) as fh:
        data = json.load(fh)
    assert isinstance(data, dict)
    assert isinstance(data["traceEvents"], list)
    return data


def thread_names(events):
    names = {}
    for ev in events:
        if ev.get("ph") == "M" and ev.get("name") == "thread_name":
            key = (ev["pid"], ev["tid"])
            assert key not in names, f"two thread_name events for {key}"
            names[key] = ev["args"]["name"]
    return names


def test_perfetto_writes_valid_chrome_trace_json(profile, tmp_path):
    data = load_trace(profile, tmp_path)
    assert data.get("displayTimeUnit", "ms") in ("ms", "ns")
    for ev in data["traceEvents"]:
        assert ev["ph"] in ("X", "M", "s", "f")  # complete events, metadata, dependency flow arrows
        assert isinstance(ev["name"], str)
        assert isinstance(ev["pid"], int)
        if ev["ph"] == "X":
            assert isinstance(ev["tid"], int)
            assert math.isfinite(ev["ts"]) and math.isfinite(ev["dur"])
            assert ev["dur"] >= 0


def test_perfetto_flow_arrows_join_each_instruction_to_its_producer(profile, tmp_path):
    events = load_trace(profile, tmp_path)["traceEvents"]
    names = thread_names(events)
    starts = {ev["id"]: ev for ev in events if ev["ph"] == "s"}
    finishes = {ev["id"]: ev for ev in events if ev["ph"] == "f"}
    waiting = [rec for rec in profile.instructions if rec.producer >= 0]
    assert waiting and set(starts) == set(finishes) == {rec.index for rec in waiting}
    for rec in waiting:
        producer = profile.instructions[rec.producer]
        assert starts[rec.index]["ts"] == pytest.approx(producer.end_ns / 1000.0, rel=REL, abs=1e-12)
        assert names[(1, starts[rec.index]["tid"])] == producer.engine
        assert finishes[rec.index]["ts"] == pytest.approx(rec.start_ns / 1000.0, rel=REL, abs=1e-12)
        assert names[(1, finishes[rec.index]["tid"])] == rec.engine


def test_perfetto_events_carry_the_operands(profile, tmp_path):
    events = load_trace(profile, tmp_path)["traceEvents"]
    complete = [ev for ev in events if ev["ph"] == "X"]
    copies = [ev for ev in complete if ev["name"] == "dma_copy"]
    assert copies and all(set(ev["args"]) >= {"dst", "src", "source", "index"} for ev in copies)
    first = copies[0]["args"]
    assert first["src"].startswith("hbm ") or first["src"].startswith("sbuf ")
    assert "[" in first["dst"] and first["dst"].endswith("]")


def test_perfetto_has_one_complete_event_per_instruction(profile, tmp_path):
    events = load_trace(profile, tmp_path)["traceEvents"]
    complete = [ev for ev in events if ev["ph"] == "X"]
    assert len(complete) == profile.instruction_count
    names = thread_names(events)
    for ev, rec in zip(complete, profile.instructions, strict=True):
        assert ev["name"] == rec.opcode
        assert ev["ts"] == pytest.approx(rec.start_ns / 1000.0, rel=REL, abs=1e-12)
        assert ev["dur"] == pytest.approx((rec.end_ns - rec.start_ns) / 1000.0, rel=REL, abs=1e-12)
        assert names[(ev["pid"], ev["tid"])] == rec.engine
        assert ev["args"]["source"] == rec.source


def test_perfetto_has_one_thread_name_per_track_used(profile, tmp_path):
    events = load_trace(profile, tmp_path)["traceEvents"]
    names = thread_names(events)
    used = {rec.engine for rec in profile.instructions}
    assert sorted(names.values()) == sorted(used)
    assert used == {"DMA q0", "DMA q1", "DMA q2", "Vector", "Scalar", "Tensor", "GpSimd"}
    # Distinct tracks, distinct threads.
    assert len(set(names)) == len(used)


def test_perfetto_of_a_single_engine_kernel(tmp_path):
    def kernel():
        x = nl.ndarray((P, N), dtype=nl.float32)
        nisa.memset(dst=x, value=1.0)

    prof = nkisim.run(kernel, []).profile
    events = load_trace(prof, tmp_path)["traceEvents"]
    assert list(thread_names(events).values()) == ["Vector"]
    (ev,) = [ev for ev in events if ev["ph"] == "X"]
    hw = load_target("trn1")
    assert ev["ts"] == 0.0
    assert ev["dur"] == pytest.approx(max(hw.vector.min_ii_cycles, N) / hw.vector.clock_ghz / 1000.0, rel=REL)


# -- an empty kernel ------------------------------------------------------------------


def test_empty_kernel_profile(tmp_path):
    def kernel():
        return None

    prof = nkisim.run(kernel, []).profile
    assert prof.total_ns == 0.0
    assert prof.total_cycles == 0
    assert prof.instruction_count == 0
    assert prof.instructions == []
    assert set(prof.engine_busy_ns) == ENGINES
    assert all(v == 0.0 for v in prof.engine_busy_ns.values())
    assert "0 instructions" in prof.summary()
    events = load_trace(prof, tmp_path)["traceEvents"]
    assert [ev for ev in events if ev["ph"] == "X"] == []
    assert thread_names(events) == {}
