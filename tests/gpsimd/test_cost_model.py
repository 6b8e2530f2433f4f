"""The cost model: calibration to the published trn1 MLP ReLU figures, the profile it produces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from nkisim import gpsimd
from nkisim.examples import gpsimd_relu
from nkisim.report import Profile
from tests.gpsimd.kernels import library, negate_tcm

#: Published trn1 inferences/s (neuron-customops/tutorials/customop-mlp-perf-opt.rst).
PUBLISHED = {"relu_element": 8.10, "relu_tcm": 220.74, "relu_tcm_multicore": 269.94}


@pytest.fixture(scope="module")
def simulated() -> dict[str, float]:
    ops = gpsimd_relu.make_libraries()
    return {
        name: gpsimd_relu.mlp_iterations_per_second(op, sample=4096 if name == "relu_element" else None)
        for name, op in ops.items()
    }


def test_three_relu_versions_are_ordered_like_the_published_ones(simulated: dict[str, float]) -> None:
    assert simulated["relu_element"] < simulated["relu_tcm"] < simulated["relu_tcm_multicore"]


def test_ratios_within_30_percent_of_the_published_ones(simulated: dict[str, float]) -> None:
    tcm_vs_element = simulated["relu_tcm"] / simulated["relu_element"]
    multi_vs_single = simulated["relu_tcm_multicore"] / simulated["relu_tcm"]
    assert tcm_vs_element == pytest.approx(PUBLISHED["relu_tcm"] / PUBLISHED["relu_element"], rel=0.3)
    assert multi_vs_single == pytest.approx(PUBLISHED["relu_tcm_multicore"] / PUBLISHED["relu_tcm"], rel=0.3)


def test_iterations_per_second_close_to_published(simulated: dict[str, float]) -> None:
    for name, its in simulated.items():
        assert its == pytest.approx(PUBLISHED[name], rel=0.05), name


def test_relu_versions_compute_relu() -> None:
    x = np.random.default_rng(5).standard_normal((8, 300)).astype(np.float32)
    for op in gpsimd_relu.make_libraries().values():
        assert np.array_equal(gpsimd.run(op, [x]).outputs, np.maximum(x, 0))


def test_relu_backward_matches_numpy() -> None:
    single = gpsimd_relu.make_libraries()["relu_tcm"].library
    rng = np.random.default_rng(2)
    g, x = rng.standard_normal(3000).astype(np.float32), rng.standard_normal(3000).astype(np.float32)
    assert np.array_equal(gpsimd.run(single.relu_tcm_backward, [g, x]).outputs, g * (x > 0))


def test_tcm_cost_hand_computed() -> None:
    """One 1000-element fp32 block: launch + 2 x (setup + 4000 B / rate) + ceil(1000/16) words + latency."""
    result = gpsimd.run(library("cost_ops", negate_tcm), [np.ones(1000, np.float32)])
    g = result.profile.hw.gpsimd_cores
    cycles = g.launch_overhead_cycles + 2 * (g.tcm_dma_setup_cycles + 4000 / g.tcm_dma_bytes_per_cycle) + 63 + 3
    assert result.total_ns == pytest.approx(cycles / 1.4)
    assert [r.opcode for r in result.profile.instructions] == [
        "launch",
        "tensor_to_tcm",
        "tcm_compute",
        "tcm_to_tensor",
    ]
    assert result.profile.instructions[1].bytes == 4000


def test_newer_generations_run_at_1_2_ghz() -> None:
    op = library("clock_ops", negate_tcm)
    x = np.ones(1000, np.float32)
    t1, t2 = gpsimd.run(op, [x], target="trn1").total_ns, gpsimd.run(op, [x], target="trn2").total_ns
    g1 = gpsimd.run(op, [x]).profile.hw.gpsimd_cores
    # same cycles but the launch overhead (2 us either way); the rest scales with 1.4 / 1.2
    assert (t2 - 2000) == pytest.approx((t1 - g1.launch_overhead_cycles / 1.4) * 1.4 / 1.2)


def test_profile_is_the_nki_profile_type_with_one_track_per_core(tmp_path: Path) -> None:
    result = gpsimd.run(gpsimd_relu.make_libraries()["relu_tcm_multicore"], [np.ones(70000, np.float32)])
    profile = result.profile
    assert isinstance(profile, Profile) and profile.kernel == "relu_mc_ops.relu_tcm_multicore"
    assert {r.engine for r in profile.instructions} == {f"GpSimd {i}" for i in range(8)}
    assert result.total_ns == profile.total_ns == pytest.approx(max(result.core_busy_ns.values()))
    assert set(result.core_busy_ns) == set(range(8))
    path = tmp_path / "trace.json.gz"
    profile.to_perfetto(path)
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {f"GpSimd {i}" for i in range(8)}


def test_long_kernels_keep_every_cycle_in_few_records() -> None:
    """Thousands of transfers are merged into at most 128 records (plus the launch) with the same total."""
    op = library("many_ops", negate_tcm)
    x = np.ones(300_000, np.float32)
    result = gpsimd.run(op, [x])
    assert len(result.profile.instructions) <= 128 + 1
    g = result.profile.hw.gpsimd_cores
    blocks = -(-x.size // 1024)
    per_block = 2 * g.tcm_dma_setup_cycles + 64 * g.simd_op_cycles + g.tcm_latency_cycles
    moved = 2 * x.nbytes / g.tcm_dma_bytes_per_cycle
    last = x.size - (blocks - 1) * 1024  # the last block is shorter: fewer SIMD words
    words_saved = 64 - -(-last // 16)
    cycles = g.launch_overhead_cycles + blocks * per_block + moved - words_saved * g.simd_op_cycles
    assert result.total_ns == pytest.approx(cycles / 1.4)


def test_element_accessor_cost_per_access() -> None:
    from nkisim.examples.gpsimd_negate import negate_lib

    result = gpsimd.run(negate_lib.tensor_negate, [np.ones(100, np.float32)])
    g = result.profile.hw.gpsimd_cores
    element = [r for r in result.profile.instructions if r.opcode == "element_access"]
    assert sum(r.duration_ns for r in element) == pytest.approx(200 * g.element_access_cycles / 1.4)


def test_demo_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from nkisim.gpsimd.demo import main

    assert main() == 0
    text = capsys.readouterr().out
    assert "tensor_negate" in text and "relu_tcm_multicore" in text and "published" in text


def test_profile_summary_and_table_work() -> None:
    result = gpsimd.run(library("summary_ops", negate_tcm), [np.ones(5000, np.float32)])
    assert "GpSimd 0" in result.profile.table()
    assert result.profile.engine_busy_ns["GpSimd 0"] == pytest.approx(result.core_busy_ns[0])
