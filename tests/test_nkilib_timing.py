"""The pure parts of benchmarks/nkilib_timing.py: which figures count as measurements, and the statistics."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "nkilib_timing.py"
_SPEC = importlib.util.spec_from_file_location("nkilib_timing", _PATH)
timing = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(timing)


@pytest.mark.parametrize(
    "figure",
    [62157403, 51_564_336, 4296859369, 238002211],  # nki-library measurements (mlp_tkg, rmsnorm_quant, mlp_cte)
)
def test_measured_figures_count(figure):
    assert timing.is_measurement(figure)


@pytest.mark.parametrize(
    "figure",
    [580e6, 125e7, 950e7 * 1.02, 92000000, 1111000000, 1000000000, None, 0, -1],  # thresholds, none, no data
)
def test_rounded_thresholds_and_missing_figures_do_not(figure):
    assert not timing.is_measurement(figure)


def _ranks(values):
    """Average ranks, by sorting (an independent way from the module's)."""
    values = np.asarray(values, dtype=float)
    return np.array([np.mean(np.flatnonzero(np.sort(values) == v)) for v in values])


@pytest.mark.parametrize("seed", range(5))
def test_spearman_is_the_pearson_correlation_of_ranks(seed):
    rng = np.random.default_rng(seed)
    xs = rng.integers(0, 20, size=30).astype(float)  # ties on purpose
    ys = xs * 0.5 + rng.normal(size=30) * 4
    expected = np.corrcoef(_ranks(xs), _ranks(ys))[0, 1]
    assert timing.spearman(list(xs), list(ys)) == pytest.approx(expected)


def test_summary_of_records():
    records = [
        {"id": "a::t[1]", "hardware_ps": 100e6, "nkisim_ns": 100e3},  # ratio 1.0
        {"id": "a::t[2]", "hardware_ps": 200e6, "nkisim_ns": 100e3},  # 0.5
        {"id": "a::t[3]", "hardware_ps": 300e6, "nkisim_ns": 360e3},  # 1.2
        {"id": "a::t[4]", "hardware_ps": 50e6, "error": "OperandError"},
    ]
    summary = timing.summarise(records)
    assert summary["configurations"] == 3 and summary["failed"] == 1
    assert summary["within_25"] == pytest.approx(2 / 3)
    assert summary["geomean"] == pytest.approx(math.exp((math.log(1.0) + math.log(0.5) + math.log(1.2)) / 3))
    assert summary["beyond_1_5x"] == 1
    assert summary["worst"][0] == ("t[2]", pytest.approx(0.5))


def test_halves_split_by_a_hash_of_the_figure():
    import hashlib

    figures = [62157403, 51_564_336, 4296859369, 238002211, 258002211, 210306921, 1437844003, 8367215426]
    for figure in figures:
        expected = "validation" if hashlib.sha256(str(figure).encode()).digest()[0] % 2 else "calibration"
        assert timing.half_of(figure) == timing.half_of(float(figure)) == expected
    assert {timing.half_of(f) for f in figures} == {"calibration", "validation"}


def test_summaries_of_the_halves_partition_the_records():
    records = [
        {"id": f"a::t[{i}]", "hardware_ps": float(figure), "nkisim_ns": figure / 1000 * (1 + i / 10)}
        for i, figure in enumerate([62157403, 51_564_336, 4296859369, 238002211, 258002211, 210306921])
    ]
    halves = timing.summarise_halves(records)
    assert halves["all"] == timing.summarise(records)
    sizes = [halves[h]["configurations"] for h in timing.HALVES]
    assert sum(sizes) == len(records) and all(sizes)
    for half in timing.HALVES:
        mine = [r for r in records if timing.half_of(r["hardware_ps"]) == half]
        assert halves[half]["geomean"] == pytest.approx(
            math.exp(sum(math.log(r["nkisim_ns"] * 1000 / r["hardware_ps"]) for r in mine) / len(mine))
        )
