"""nki-library's hardware kernel times as an oracle for nkisim's timing model.

::

    python benchmarks/nkilib_timing.py PATH_TO_NKI_LIBRARY [--timeout 600] [--files mlp_tkg,rmsnorm]
        [--doc docs/nkilib-timing.md] [--from-json benchmarks/nkilib_results/timing.json]

nki-library's test vectors carry ``tpbSgCyclesSum``, the kernel's time measured on
hardware (its ``test/utils/metrics_collector.py`` reads it from neuron-profile's
summary of a profiled run); the unit behaves as picoseconds (docs/timing.md, "The nki-library
oracle"). This script runs every configuration that carries such a figure through the
suite's own tests (``pytest -p nkisim.compat.nkilib --test-mode simulation``, with
``NKILIB_SIMULATION_RUN_ALL=1`` so that large shapes run) on trn2, the target the figures
were recorded on, in one process with a per-test timeout. Loaded as a pytest plugin
(``-p nkilib_timing``), this module

* keeps only the tests whose configuration has a figure that is a measurement: figures
  with at most :data:`ROUNDED_DIGITS` significant digits (``125e7``, ``92000000``) are
  rounded thresholds, not measurements, and ``None`` or ``0`` mean none;
* replaces the kernel call: the kernel is profiled on its inputs' shapes alone (no
  values; the full run when the shapes do not suffice), its time and bottleneck are
  recorded, and the test stops there (skipped: its outputs are not checked here). The
  time compared is the device time (``Profile.device_ns``): the kernel's timeline plus the
  NEFF execution's start-up and tear-down, which the hardware figures include.

It writes the table (test id, nkisim time, hardware time, ratio, bottleneck) to
``docs/nkilib-timing.md`` and prints: configurations, share within +-25%, geometric mean
of nkisim / hardware, Spearman rank correlation and the five worst.
"""

from __future__ import annotations

import argparse
import enum
import hashlib
import inspect
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "nkilib_results" / "timing.json"
DOC = ROOT / "docs" / "nkilib-timing.md"
#: The suite's test files whose vectors carry hardware figures.
FILES = {
    "mlp_tkg": "test/integration/nkilib/core/mlp/test_mlp_tkg.py",
    "mlp_cte": "test/integration/nkilib/core/mlp/test_mlp_cte.py",
    "rmsnorm": "test/integration/nkilib/core/rmsnorm/test_rmsnorm_quant.py",
    "attention_cte": "test/integration/nkilib/core/attention/test_attention_cte.py",
}
#: The target the figures were recorded on (docs/timing.md).
TARGET = "trn2"
#: A figure with this many significant digits or fewer is a rounded threshold (``580e6``, ``1111000000``).
ROUNDED_DIGITS = 4
#: Picoseconds per nanosecond: the unit of ``tpbSgCyclesSum``.
PS_PER_NS = 1000.0
OUT_ENV = "NKILIB_TIMING_OUT"
COMMIT_ENV = "NKILIB_TIMING_COMMIT"
TIMEOUT_ENV = "NKILIB_TIMING_TIMEOUT"
HALF_ENV = "NKILIB_TIMING_HALF"
#: The two halves of the configurations: trn2's DMA payload curve is fitted on the first, checked on the second.
HALVES = ("calibration", "validation")


# -- the figures --------------------------------------------------------------------------


def is_measurement(figure: Any) -> bool:
    """True for a figure that reads as a measurement: a positive number with more than ROUNDED_DIGITS digits."""
    if figure is None or isinstance(figure, bool) or not isinstance(figure, (int, float)) or figure <= 0:
        return False
    if float(figure) != int(figure):
        return True
    return len(str(int(figure)).rstrip("0")) > ROUNDED_DIGITS


def half_of(figure: float) -> str:
    """The half a configuration falls in, by a stable hash of its hardware figure.

    Hashing the figure, not the test id, keeps the variants that the suite gives one and the
    same measurement (a bias flag the kernel ignores at that shape, ...) in the same half.
    """
    digest = hashlib.sha256(str(int(figure)).encode()).digest()
    return HALVES[digest[0] % 2]


def _norm(value: Any) -> Any:
    """A config value as the suite's range configs store it: enums by value, bools as ints, dtypes by name."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bool):
        return int(value)
    if value is None or isinstance(value, (int, float, str)):
        return value
    try:
        import numpy as np

        return np.dtype(value).name
    except TypeError:
        return repr(value)


#: Range-config families: the config key in ``RangeTestCase.tensors``, the vector length, the figure's index,
#: the vnc index (or None), and the vector index of each config value in the config dict's order.
RANGE_FAMILIES = {
    "mlp_tkg_config": (21, 8, 0, [0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]),
    # mlp_cte's config has no vnc: its tests run at the platform's default LNC (2 on trn2)
    "mlp_cte_config": (17, 5, 0, [1, 2, 3, 4, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 6]),
}
#: LNC the suite launches mlp_cte with on trn2 (its config ignores the vector's vnc_degree).
MLP_CTE_LNC = 2


def _range_figures(module: Any, family: str) -> dict[tuple, set]:
    """Config key -> the set of figures the module's vectors give it (several: ambiguous)."""
    length, at, vnc_at, order = RANGE_FAMILIES[family]
    table: dict[tuple, set] = {}
    lists = [v for v in vars(module).values() if isinstance(v, list)]
    for cls in (v for v in vars(module).values() if inspect.isclass(v)):
        lists += [v for v in vars(cls).values() if isinstance(v, list)]
    for vectors in lists:
        for vector in vectors:
            if isinstance(vector, tuple) and len(vector) == 2 and isinstance(vector[1], list):
                vector = vector[1]  # (ModelTestType, params)
            if not isinstance(vector, list) or len(vector) != length:
                continue
            if family == "mlp_cte_config" and vector[vnc_at] != MLP_CTE_LNC:
                continue  # measured at another LNC than the test runs
            key = tuple(_norm(vector[i]) for i in order)
            table.setdefault(key, set()).add(vector[at])
    return table


def figure_of(item: Any) -> Any:
    """The hardware figure of a collected test, or None."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    params = callspec.params
    if "tpbSgCyclesSum" in params:
        return params["tpbSgCyclesSum"]
    for value in params.values():
        tensors = getattr(value, "tensors", None)
        if not isinstance(tensors, dict):
            continue
        for family in RANGE_FAMILIES:
            if family in tensors:
                key = tuple(_norm(v) for v in tensors[family].values())
                figures = _range_figures(item.module, family).get(key, set())
                return figures.pop() if len(figures) == 1 else None
    return None


# -- the pytest plugin ---------------------------------------------------------------------

_CURRENT: dict[str, Any] = {}


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Keep the tests whose configuration carries a measured hardware figure."""
    kept, dropped = [], []
    half = os.environ.get(HALF_ENV)
    for item in items:
        figure = figure_of(item)
        if is_measurement(figure) and (not half or half_of(figure) == half):
            item.user_properties.append(("hardware_ps", float(figure)))
            kept.append(item)
        else:
            dropped.append(item)
    items[:] = kept
    config.hook.pytest_deselected(items=dropped)


def pytest_runtest_setup(item: Any) -> None:
    _CURRENT["id"] = item.nodeid
    _CURRENT["hardware_ps"] = dict(item.user_properties).get("hardware_ps")


def pytest_configure(config: Any) -> None:
    from nkisim.compat import nkilib

    if getattr(nkilib.CpuSimulated.__call__, "timed", False):
        return
    original = nkilib.CpuSimulated.__call__

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        return _profile_and_stop(self, original, args, kwargs)

    timed.timed = True  # type: ignore[attr-defined]
    nkilib.CpuSimulated.__call__ = timed


def _specs(value: Any) -> Any:
    """Arrays (also inside lists and tuples) as shape/dtype specs; other values unchanged."""
    import numpy as np

    from nkisim.frontend.jit import ArraySpec

    if isinstance(value, np.ndarray):
        return ArraySpec(tuple(value.shape), value.dtype)
    if isinstance(value, (list, tuple)) and any(isinstance(v, np.ndarray) for v in value):
        return type(value)(_specs(v) for v in value)
    return value


def _profile_and_stop(runner: Any, original: Any, args: tuple, kwargs: dict) -> Any:
    """Profile the kernel (shapes only when they suffice), record it, and stop the test."""
    import pytest

    import nkisim
    from nkisim.compat.nkilib import target_from_env
    from nkisim.frontend.jit import Kernel

    target = target_from_env() or TARGET
    timeout = float(os.environ.get(TIMEOUT_ENV, "600"))
    kernel = runner.kernel if isinstance(runner.kernel, Kernel) else Kernel(runner.kernel)
    if runner.lnc is not None:
        kernel = kernel[runner.lnc]
    func = kernel.func
    bound = inspect.signature(func).bind(*args, **kwargs).arguments
    record: dict[str, Any] = {"id": _CURRENT.get("id"), "hardware_ps": _CURRENT.get("hardware_ps"), "target": target}
    record["nkilib_commit"] = os.environ.get(COMMIT_ENV, "")
    start = time.perf_counter()
    try:
        profile = nkisim.profile(kernel, {k: _specs(v) for k, v in bound.items()}, target=target, timeout=timeout)
        record["mode"] = "shapes"
    except Exception as exc:  # the kernel needs values (data-dependent control flow, ...): run it in full
        record["shapes_error"] = f"{type(exc).__name__}: {exc}"[:300]
        try:
            with nkisim.collect_profiles() as profiles:
                original(runner, *args, **kwargs)
            profile = profiles[-1]
            record["mode"] = "full"
        except Exception as full_exc:
            record["error"] = f"{type(full_exc).__name__}: {full_exc}"[:300]
            profile = None
    record["wall_s"] = round(time.perf_counter() - start, 2)
    if profile is not None:
        # the figures time the whole NEFF execution, start-up and tear-down included (docs/timing.md)
        record["nkisim_ns"] = profile.device_ns
        record["kernel_ns"] = profile.total_ns
        record["bottleneck"] = profile.bottleneck
        record["instructions"] = profile.instruction_count
    out = os.environ.get(OUT_ENV)
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(record) + "\n")
    pytest.skip(f"timed by nkilib_timing: {record.get('nkisim_ns', record.get('error'))}")


# -- the driver -----------------------------------------------------------------------------


def run_suite(
    checkout: Path, files: list[str], timeout: float, out: Path, extra: list[str], nkisim: Path, half: str | None = None
) -> None:
    """Run the tests with figures in one pytest process (nkisim from ``nkisim``), appending records to ``out``."""
    env = dict(os.environ)
    if half:
        env[HALF_ENV] = half
    env["PYTHONPATH"] = os.pathsep.join(
        [str(checkout / "src"), str(nkisim), str(ROOT / "benchmarks"), env.get("PYTHONPATH", "")]
    )
    env["NKILIB_SIMULATION_RUN_ALL"] = "1"
    env[OUT_ENV] = str(out)
    env[TIMEOUT_ENV] = str(timeout)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True)
    env[COMMIT_ENV] = head.stdout.strip()
    cmd = [
        sys.executable, "-m", "pytest", "-p", "nkisim.compat.nkilib", "-p", "nkilib_timing",
        *files, "--test-mode", "simulation", "--platform-target", TARGET, "-q", "-p", "no:cacheprovider",
        "--nkisim-prune-artifacts", f"--timeout={int(timeout * 1.5)}", "-rN", *extra,
    ]  # fmt: skip
    subprocess.run(cmd, cwd=checkout, env=env, check=False)


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation (average ranks for ties)."""

    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=values.__getitem__)
        result = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                result[order[k]] = (i + j) / 2
            i = j + 1
        return result

    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    var = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return cov / var if var else float("nan")


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary figures over the records that have both times."""
    timed = [r for r in records if r.get("nkisim_ns") and r.get("hardware_ps")]
    ratios = [r["nkisim_ns"] / (r["hardware_ps"] / PS_PER_NS) for r in timed]
    if not ratios:
        return {"configurations": 0, "failed": len(records)}
    worst = sorted(zip(ratios, timed), key=lambda p: -abs(math.log(p[0])))[:5]
    return {
        "configurations": len(timed),
        "failed": len(records) - len(timed),
        "within_25": sum(0.75 <= q <= 1.25 for q in ratios) / len(ratios),
        "geomean": math.exp(sum(math.log(q) for q in ratios) / len(ratios)),
        "spearman": spearman([r["nkisim_ns"] for r in timed], [r["hardware_ps"] for r in timed]),
        "beyond_1_5x": sum(q > 1.5 or q < 1 / 1.5 for q in ratios),
        "worst": [(short_id(r["id"]), q) for q, r in worst],
    }


def short_id(nodeid: str) -> str:
    """A test id without the directory and class."""
    return nodeid.split("::")[-1]


def summarise_halves(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The summary of all records and of each half (see :func:`half_of`)."""
    halves = {"all": summarise(records)}
    for half in HALVES:
        halves[half] = summarise([r for r in records if r.get("hardware_ps") and half_of(r["hardware_ps"]) == half])
    return halves


def _figures(summary: dict[str, Any]) -> str:
    return (
        f"{summary['configurations']} configurations, {summary['within_25']:.0%} within +-25%, geometric mean "
        f"{summary['geomean']:.3f}, Spearman {summary['spearman']:.3f}, {summary['beyond_1_5x']} beyond 1.5x"
    )


def print_summary(summary: dict[str, Any]) -> None:
    if not summary["configurations"]:
        print(f"no configuration timed ({summary['failed']} failed)")
        return
    print(
        f"configurations {summary['configurations']} (failed {summary['failed']}); "
        f"within +-25%: {summary['within_25']:.0%}; geometric mean nkisim/hardware {summary['geomean']:.3f}; "
        f"Spearman {summary['spearman']:.3f}; beyond 1.5x: {summary['beyond_1_5x']}"
    )
    print("worst five:")
    for name, ratio in summary["worst"]:
        print(f"  {ratio:6.2f}  {name}")


def write_doc(
    records: list[dict[str, Any]], summary: dict[str, Any], path: Path, halves: dict[str, dict[str, Any]] | None = None
) -> None:
    lines = [
        "# nkisim against nki-library's hardware kernel times",
        "",
        "Generated by `python benchmarks/nkilib_timing.py PATH_TO_NKI_LIBRARY`: every configuration of the",
        "suite whose test vector carries a measured `tpbSgCyclesSum` (picoseconds of kernel time on trn2;",
        "see [timing.md](timing.md#the-nki-library-oracle) for the unit, the target and the excluded figures),",
        f"simulated by nkisim on {TARGET} from the inputs' shapes. nkisim's time is the device time: the kernel's",
        "timeline plus the NEFF execution's start-up and tear-down (`[launch]` of the target). Ratio = nkisim /",
        "hardware; bottleneck is the engine that makes up most of nkisim's critical path.",
        "",
    ]
    commits = sorted({r.get("nkilib_commit") or "?" for r in records})
    lines += [f"nki-library commit: {', '.join(commits)}.", ""]
    if summary["configurations"]:
        lines += [
            f"- configurations: {summary['configurations']} (not timed: {summary['failed']})",
            f"- within +-25%: {summary['within_25']:.0%}",
            f"- geometric mean of the ratios: {summary['geomean']:.3f}",
            f"- Spearman rank correlation: {summary['spearman']:.3f}",
            f"- off by more than 1.5x: {summary['beyond_1_5x']}",
            "",
        ]
    if halves and all(h["configurations"] for h in halves.values()):
        lines += [
            'By half (trn2\'s DMA payload curve is fitted on the calibration half; see timing.md, "Calibration"):',
            "",
        ]
        lines += [f"- {name}: {_figures(h)}" for name, h in halves.items() if name != "all"]
        lines += [""]
    lines += ["| test | nkisim (us) | hardware (us) | ratio | bottleneck |", "|---|---:|---:|---:|---|"]
    for r in sorted(records, key=lambda r: r.get("id") or ""):
        hw_us = r["hardware_ps"] / PS_PER_NS / 1e3 if r.get("hardware_ps") else float("nan")
        if r.get("nkisim_ns"):
            sim_us = r["nkisim_ns"] / 1e3
            ratio = sim_us / hw_us
            lines.append(
                f"| `{short_id(r['id'])}` | {sim_us:.1f} | {hw_us:.1f} | {ratio:.2f} | {r.get('bottleneck', '')} |"
            )
        else:
            why = (r.get("error") or "no profile").replace("|", "/").splitlines()[0][:120]
            lines.append(f"| `{short_id(r['id'])}` | - | {hw_us:.1f} | - | not timed: {why} |")
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, nargs="?", help="an aws-neuron/nki-library checkout")
    parser.add_argument("--files", default=",".join(FILES), help=f"which test files: {', '.join(FILES)}")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per configuration")
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--no-doc", action="store_true")
    parser.add_argument("--nkisim", type=Path, default=ROOT, help="the nkisim tree to time (default: this one)")
    parser.add_argument("--json", type=Path, default=RESULTS, help="where to keep the records")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression, to run a subset")
    parser.add_argument("--from-json", type=Path, help="summarise recorded results instead of running")
    parser.add_argument("--half", choices=HALVES, help="run only this half of the configurations")
    args = parser.parse_args()
    if args.from_json:
        records = [json.loads(line) for line in args.from_json.read_text().splitlines() if line.strip()]
    else:
        if args.checkout is None:
            parser.error("give the nki-library checkout (or --from-json)")
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text("")
        files = [FILES[name] for name in args.files.split(",")]
        start = time.perf_counter()
        keyword = ["-k", args.keyword] if args.keyword else []
        run_suite(args.checkout.resolve(), files, args.timeout, args.json, keyword, args.nkisim.resolve(), args.half)
        print(f"wall time {time.perf_counter() - start:.0f} s")
        records = [json.loads(line) for line in args.json.read_text().splitlines() if line.strip()]
    halves = summarise_halves(records)
    summary = halves["all"]
    print_summary(summary)
    for half in HALVES:
        if halves[half]["configurations"]:
            print(f"{half}: {_figures(halves[half])}")
    if not args.no_doc:
        write_doc(records, summary, args.doc, halves)


if __name__ == "__main__":
    main()
