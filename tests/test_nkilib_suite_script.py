"""benchmarks/nkilib_suite.py and nkilib_report.py: junit parsing, triage, skip reasons, records, the document."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import nkilib_report as report
import nkilib_suite as suite
import oom_log
from nkilib_outcomes import PROGRESS_ENV

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
 <testcase classname="integration.nkilib.core.cumsum.test_cumsum.TestCumsum" name="test_a" time="1.5"/>
 <testcase classname="integration.nkilib.core.utils.test_quantize_to_mx.TestQ" name="test_quantize_mx_hw[P-32]"
   time="0.2"><failure message="AssertionError: Validation failed">trace</failure></testcase>
 <testcase classname="integration.nkilib.core.mlp.test_mlp.TestMlp" name="test_big[h-8192]" time="0">
   <skipped message="Skipping slow simulation test (see test/simulation.md)"/></testcase>
 <testcase classname="integration.nkilib.core.utils.test_tensor_view.TestTV" name="test_tv" time="0">
   <skipped message="trace_only test: runs NKI's compiler tracer"/></testcase>
</testsuite></testsuites>
"""


def test_junit_rows_name_family_outcome_and_time(tmp_path):
    path = tmp_path / "r.xml"
    path.write_text(JUNIT)
    rows = suite.parse_junit(path)
    assert [(r["family"], r["outcome"]) for r in rows] == [
        ("core/cumsum", "passed"),
        ("core/utils", "failed"),
        ("core/mlp", "skipped"),
        ("core/utils", "skipped"),
    ]
    assert rows[0]["seconds"] == 1.5
    assert report.triage(rows[1])[0] == "suite"  # the golden's OCP scale against the documented instruction


def test_the_nameless_case_of_an_interrupted_run_is_no_test(tmp_path):
    path = tmp_path / "r.xml"
    interrupted = '<testcase classname="" name="" time="0.000" />\n</testsuite>'
    path.write_text(JUNIT.replace("</testsuite>", interrupted))
    assert len(suite.parse_junit(path)) == 4


def test_the_record_of_an_internal_error_is_no_test(tmp_path):
    """pytest-xdist ends a run whose last worker was killed with an internal error, recorded as pytest::internal."""
    path = tmp_path / "r.xml"
    internal = (
        '<testcase classname="pytest" name="internal" time="0.000"><error message="internal error">'
        "RuntimeError: Unexpectedly no active workers available</error></testcase>\n</testsuite>"
    )
    path.write_text(JUNIT.replace("</testsuite>", internal))
    rows = suite.parse_junit(path)
    assert len(rows) == 4
    assert "pytest" not in {r["family"] for r in rows}


def test_skips_are_counted_by_reason(tmp_path):
    path = tmp_path / "r.xml"
    path.write_text(JUNIT)
    counts = report.skip_counts(suite.parse_junit(path))
    assert counts == {
        f"suite: its large-shape skip in simulation mode ({suite.RUN_ALL_ENV} not set)": 1,
        "nkisim: a trace_only test needs NKI's compiler tracer, which a simulation run has not": 1,
    }
    assert report.skip_reason({"message": "needs 16 cores"}) == "suite: needs # cores"


def test_an_unknown_failure_is_untriaged_with_its_message_shape():
    verdict, why = report.triage({"id": "x::test_y", "message": "ValueError: 3 is not 4"})
    assert (verdict, why) == ("untriaged", "ValueError: # is not #")


def test_the_summary_gives_the_rate_with_and_without_the_suites_own_failures(monkeypatch):
    verdicts = {"a::suite_fault": ("suite", ""), "a::unknown": ("untriaged", "")}
    monkeypatch.setattr(report, "triage", lambda row: verdicts[row["id"]])
    monkeypatch.setattr(report, "SUITE_TESTS", {"trn2": 1234})  # the whole suite's count of the record's target
    rows = [{"id": "a::ok", "outcome": "passed"}] * 7 + [{"id": "a::skip", "outcome": "skipped"}]
    rows += [{"id": "a::suite_fault", "outcome": "failed"}, {"id": "a::unknown", "outcome": "error"}]
    records = [
        {"target": "trn2", "subset": "all", "tests": rows},
        {"target": "trn3", "subset": "fast", "tests": [{"id": "a::skip", "outcome": "skipped"}]},
    ]
    lines = report.summary_lines(records)
    header = next(line for line in lines if line.startswith("| target"))
    trn2, trn3 = (next(line for line in lines if line.startswith(f"| {t} ")) for t in ("trn2", "trn3"))
    # 10 recorded; 7 of 9 run pass (77.7%, rounded down); without the suite failure 7 of 8 (87.5%)
    assert trn2 == "| trn2 | all | 10 of 1,234 | 7 | 2 | 77.7% | 87.5% | 1 | 0 | 0 | 0 | 0 | 0 | 1 |"
    assert trn3 == "| trn3 | fast | 1 | 0 | 0 | - | - | 0 | 0 | 0 | 0 | 0 | 0 | 0 |"  # nothing run: no rate
    assert header.count("|") == trn2.count("|") == trn3.count("|")


def test_a_rate_is_rounded_down_so_that_it_never_reaches_a_bar_it_misses():
    assert report._rate(Counter(passed=9_496, failed=504)) == "94.9%"  # 94.96%
    assert report._rate(Counter(passed=1, failed=2)) == "33.3%"
    assert report._rate(Counter(passed=2, failed=1)) == "66.6%"


def test_whole_suite_runs_are_kept_apart_from_fast_ones_and_other_records_are_ignored(tmp_path, monkeypatch):
    monkeypatch.setattr(suite, "RESULTS", tmp_path)
    assert suite.results_path("trn2", False).name == "trn2.json"
    assert suite.results_path("trn2", True).name == "trn2-all.json"
    for name in ("trn3-all.json", "trn2.json", "timing.json", "trn2-all.json", "trn3.json"):
        (tmp_path / name).write_text("{}")
    assert [p.name for p in suite.recorded_runs()] == ["trn2.json", "trn2-all.json", "trn3.json", "trn3-all.json"]


def test_a_test_file_importing_a_package_the_checkout_lacks_is_the_suites_fault():
    row = {"id": "integration.nkilib.experimental.subkernels.test_topk_reduce", "message": "collection failure"}
    assert report.triage(row)[0] == "suite"


def test_a_whole_suite_run_made_family_by_family_lists_each_family_with_its_wall_time(tmp_path, monkeypatch):
    import json

    monkeypatch.setattr(suite, "RESULTS", tmp_path)
    row = {"id": "integration.nkilib.core.max.test_max.T::test_a", "family": "core/max", "outcome": "passed"}
    record = {
        "target": "trn2",
        "subset": "all",
        "run_all": True,
        "wall_s": 12.5,
        "families": ["core/max"],
        "reruns": [
            {"families": ["core/cumsum"], "wall_s": 3.0},
            {"families": ["core/qkv"], "wall_s": 7200.0, "interrupted_after": 1},
            {"families": ["core/qkv"], "wall_s": 80.0, "tests": 19},
            {"families": ["core/qkv"], "wall_s": 900.0, "tests": 4, "timeout": 900},
            {"families": ["core/qkv"], "wall_s": 60.0, "resumed_after": 300, "workers": 1},
        ],
        "tests": [row, {**row, "family": "core/cumsum"}, {**row, "family": "core/qkv"}],
    }
    (tmp_path / "trn2-all.json").write_text(json.dumps(record))
    doc = tmp_path / "doc.md"
    suite.write_doc(doc)
    text = doc.read_text()
    assert "## trn2 (all subset, large shapes included)" in text
    assert (
        "core/max (12.5 s); core/cumsum (3.0 s); core/qkv (7200.0 s, interrupted after 1 tests); "
        "core/qkv (80.0 s, a re-run of 19 recorded failures after a fix); "
        "core/qkv (900.0 s, a re-run of 4 recorded failures with 900 s per test); "
        "core/qkv (60.0 s, `-n 1`, resumed after the 300 tests recorded)."
    ) in text
    assert "Re-run after fixes" not in text


def test_a_rerun_selects_recorded_failures_by_pattern_and_names_their_pytest_nodes(tmp_path):
    import json

    def row(test_id, family, outcome, message=""):
        return {"id": test_id, "family": family, "outcome": outcome, "message": message}

    cls = "integration.nkilib.core.qkv.test_qkv_cte.TestQkvCteKernel"
    rows = [
        row(f"{cls}::test_a[1-2]", "core/qkv", "failed", "AttributeError: no attribute 'float8_e4m3'"),
        row(f"{cls}::test_b[3]", "core/qkv", "failed", "Failed: Timeout (>150.0s)"),
        row(f"{cls}::test_c", "core/qkv", "passed"),
        row("integration.nkilib.core.max.test_max.T::test_d", "core/max", "failed", "no attribute 'float8_e4m3'"),
        row("::integration.nkilib.core.qkv.test_qkv_tkg", "core/qkv", "error", "collection failure"),
    ]
    path = tmp_path / "trn2-all.json"
    path.write_text(json.dumps({"tests": rows}))
    assert suite.rerun_ids(path, ["core/qkv"], "float8_e4m3") == [f"{cls}::test_a[1-2]"]
    assert suite.rerun_ids(path, ["core/qkv"], "Timeout|collection") == [
        f"{cls}::test_b[3]",
        "::integration.nkilib.core.qkv.test_qkv_tkg",
    ]
    checkout = Path("/lib")
    assert suite.node_id(checkout, f"{cls}::test_a[1-2]") == (
        "/lib/test/integration/nkilib/core/qkv/test_qkv_cte.py::TestQkvCteKernel::test_a[1-2]"
    )
    assert suite.node_id(checkout, "integration.nkilib.core.max.test_max::test_e") == (
        "/lib/test/integration/nkilib/core/max/test_max.py::test_e"
    )
    assert suite.node_id(checkout, "::integration.nkilib.core.qkv.test_qkv_tkg") == (
        "/lib/test/integration/nkilib/core/qkv/test_qkv_tkg.py"
    )


def _fake_suite(
    tmp_path,
    monkeypatch,
    family: str,
    old: list[dict],
    finished: list[tuple[str, str]],
    code: int = 0,
    logs: list[str | None] | None = None,
    messages: dict[str, str] | None = None,
    report: bool = True,
):
    """A checkout with ``family``, a recorded ``old`` run, and a pytest stand-in whose junit lists ``finished``
    (classname, test name; an error with ``messages[name]`` where given) and exits with ``code``; the kernel's log
    reads as ``logs`` in turn (at the start, then at each poll; unreadable when not given). Without ``report`` it
    writes no junit report, only the progress log's lines of ``finished``. Returns the checkout and the commands
    run."""
    import json
    import subprocess

    reads = iter(range(1_000_000))

    def read_log() -> str | None:  # the last text stays what the log shows
        return logs[min(next(reads), len(logs) - 1)] if logs else None

    monkeypatch.setattr(suite, "OomWatch", lambda: oom_log.OomWatch(read=read_log))
    messages = messages or {}

    checkout = tmp_path / "lib"
    (checkout / "test" / "integration" / "nkilib" / family).mkdir(parents=True)
    monkeypatch.setattr(suite, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(suite, "SUITE_DEPS", [])
    monkeypatch.setattr(suite.importlib.util, "find_spec", lambda name: object())  # pytest-timeout "installed"
    (tmp_path / "results").mkdir()
    suite.results_path("trn2", True).write_text(json.dumps({"tests": old, "wall_s": 1.0, "families": [family]}))
    commands = []

    def fake_run(cmd, **kwargs):
        if cmd[0] == "git":
            return subprocess.CompletedProcess(cmd, 0, stdout="abc123\n")
        # Ctrl-C reaches pytest alone while it runs (it then writes the tests finished so far)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        commands.append(cmd)
        junit = next(arg for arg in cmd if arg.startswith("--junitxml=")).split("=", 1)[1]
        cases = "".join(
            f'<testcase classname="{cls}" name="{name}" time="2.0">'
            + (f'<error message="{messages[name]}">trace</error>' if name in messages else "")
            + "</testcase>"
            for cls, name in finished
        )
        if report:
            Path(junit).write_text(f'<testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>')
        else:
            with open(kwargs["env"][PROGRESS_ENV], "a") as log:
                for cls, name in finished:
                    tag, message = ("error", messages[name]) if name in messages else ("passed", "")
                    log.write(json.dumps({"id": f"{cls}::{name}", "tag": tag, "message": message, "seconds": 2.0}))
                    log.write("\n")
        return subprocess.CompletedProcess(cmd, code)

    class FakePopen:
        """pytest, run to its end at once; the script waits for it as for the real one."""

        def __init__(self, cmd, **kwargs):
            self.args = cmd
            log = Path(kwargs["env"][PROGRESS_ENV])
            # pytest is given the log's locked descriptor, so that the lock outlives a script stopped alone
            assert [os.path.samestat(os.fstat(fd), os.stat(log)) for fd in kwargs["pass_fds"]] == [True]
            with suite._held(log) as other:
                assert other is None  # held while pytest runs: --recover leaves it
            self.returncode = fake_run(cmd, **kwargs).returncode
            self.waits = 0

        def wait(self, timeout=None):
            self.waits += 1
            if self.waits == 1:  # still running at the first look: the script reads the kernel's log meanwhile
                raise subprocess.TimeoutExpired(self.args, timeout)
            return self.returncode

    monkeypatch.setattr(suite.subprocess, "run", fake_run)
    monkeypatch.setattr(suite.subprocess, "Popen", FakePopen)
    return checkout, commands


def test_a_resumed_run_deselects_the_recorded_tests_and_adds_only_the_new_ones(tmp_path, monkeypatch):
    cls = "integration.nkilib.core.output_projection.test_output_proj_cte.TestOutputProjCteKernel"
    old = [
        {"id": f"{cls}::test_a[1]", "family": "core/output_projection", "outcome": "passed", "message": ""},
        {"id": f"{cls}::test_a[2]", "family": "core/output_projection", "outcome": "failed", "message": "x"},
        {"id": "integration.nkilib.core.max.test_max.T::test_m", "family": "core/max", "outcome": "passed"},
    ]
    checkout, commands = _fake_suite(tmp_path, monkeypatch, "core/output_projection", old, [(cls, "test_a[3]")])
    before = signal.getsignal(signal.SIGINT)  # pytest's handler, or SIG_IGN when started in the background
    record = suite.run_suite(checkout, "trn2", 2, True, ["core/output_projection"], resume=True)
    module = "integration/nkilib/core/output_projection/test_output_proj_cte.py"  # pytest's id, from the suite root
    assert "--max-worker-restart=1000" in commands[0]  # a crashed worker does not end the family early
    deselected = [arg for arg in commands[0] if arg.startswith("--deselect=")]
    assert deselected == [
        f"--deselect={module}::TestOutputProjCteKernel::test_a[1]",
        f"--deselect={module}::TestOutputProjCteKernel::test_a[2]",
    ]
    assert [(r["id"].rsplit("::", 1)[1], r["outcome"]) for r in record["tests"]] == [
        ("test_a[1]", "passed"),
        ("test_a[2]", "failed"),
        ("test_m", "passed"),
        ("test_a[3]", "passed"),
    ]
    assert record["reruns"][-1]["resumed_after"] == 2
    assert signal.getsignal(signal.SIGINT) is before  # the handler it found is back


def test_a_run_whose_pytest_left_no_report_keeps_the_tests_its_log_shows_ended(tmp_path, monkeypatch, capsys):
    cls = "integration.nkilib.core.qkv.test_qkv_cte.TestQkv"
    old = [{"id": f"{cls}::test_q[1]", "family": "core/qkv", "outcome": "passed", "message": "", "seconds": 1.0}]
    finished = [(cls, "test_q[2]"), (cls, "test_q[3]")]
    checkout, commands = _fake_suite(
        tmp_path, monkeypatch, "core/qkv", old, finished, code=-9, messages={"test_q[3]": "boom"}, report=False
    )
    record = suite.run_suite(checkout, "trn2", 1, True, ["core/qkv"], resume=True)
    assert "nkilib_outcomes" in commands[0] and commands[0][commands[0].index("nkilib_outcomes") - 1] == "-p"
    assert [(r["id"].rsplit("::", 1)[1], r["outcome"], r["message"]) for r in record["tests"]] == [
        ("test_q[1]", "passed", ""),
        ("test_q[2]", "passed", ""),
        ("test_q[3]", "error", "boom"),
    ]
    assert record["reruns"][-1]["interrupted_after"] == 2  # stopped before its end: said so
    assert "pytest wrote no report (exit -9); the 2 tests its log shows ended are kept" in capsys.readouterr().out
    assert not list((tmp_path / "results").glob(".trn2.*"))  # its report, selection and log are gone


def _left_behind(results: Path, pid: int, rows: list[tuple[str, str]], started: float) -> Path:
    """The progress log of a run of core/qkv on trn2 whose script was stopped: its header and ``rows``."""
    log = results / f".trn2.{pid}{suite.PROGRESS_SUFFIX}"
    run = {"target": "trn2", "everything": True, "run_all": True, "commit": "abc123", "families": ["core/qkv"]}
    run.update({"workers": 1, "timeout": 150, "again": [], "resumed_after": 1, "started": started})
    lines = [json.dumps({"run": run})]
    lines += [json.dumps({"id": i, "tag": tag, "message": "", "seconds": 3.0}) for i, tag in rows]
    log.write_text("\n".join(lines) + "\n")
    return log


def test_recover_records_the_tests_of_a_run_whose_script_was_stopped_and_leaves_a_running_one(tmp_path, monkeypatch):
    import os

    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setattr(suite, "RESULTS", results)
    cls = "integration.nkilib.core.qkv.test_qkv_cte.TestQkv"
    old = [{"id": f"{cls}::test_q[1]", "family": "core/qkv", "outcome": "passed", "message": "", "seconds": 1.0}]
    suite.results_path("trn2", True).write_text(json.dumps({"tests": old, "wall_s": 5.0, "families": ["core/qkv"]}))
    stopped = _left_behind(results, 111, [(f"{cls}::test_q[2]", "passed"), (f"{cls}::test_q[3]", None)], 1000.0)
    os.utime(stopped, (1090.0, 1090.0))  # its last line, 90 s after its start
    running = _left_behind(results, 222, [(f"{cls}::test_q[4]", "passed")], 1000.0)
    with suite._held(running) as held:  # its run still going: the lock is its script's
        assert held
        records = suite.recover("trn2")
        assert len(records) == 1 and not stopped.exists() and running.exists()
        assert suite.recover("trn2") == [] and running.exists()  # nothing more to recover while the lock is held
    record = json.loads(suite.results_path("trn2", True).read_text())
    assert [(r["id"].rsplit("::", 1)[1], r["outcome"]) for r in record["tests"]] == [
        ("test_q[1]", "passed"),
        ("test_q[2]", "passed"),
    ]  # test_q[3] had begun only
    assert record["reruns"] == [
        {"families": ["core/qkv"], "wall_s": 90.0, "workers": 1, "resumed_after": 1, "interrupted_after": 1}
    ]
    assert len(suite.recover("trn2")) == 1 and not running.exists()  # its lock free, its script gone


def test_a_run_that_left_neither_report_nor_log_lines_stops_with_a_word_and_its_files_removed(tmp_path, monkeypatch):
    checkout, _ = _fake_suite(tmp_path, monkeypatch, "core/qkv", [], [], code=-9, report=False)
    with pytest.raises(SystemExit, match=r"pytest produced no results \(exit -9\)"):
        suite.run_suite(checkout, "trn2", 1, True, ["core/qkv"])
    assert not list((tmp_path / "results").glob(".trn2.*"))


def test_recover_takes_the_oldest_run_first_the_report_over_the_log_and_leaves_what_it_cannot_read(
    tmp_path, monkeypatch, capsys
):
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setattr(suite, "RESULTS", results)
    cls = "integration.nkilib.core.qkv.test_qkv_cte.TestQkv"
    # pids whose order as text is not their runs' order: 10000 ran after 9999
    _left_behind(results, 10000, [(f"{cls}::test_q[1]", "passed")], 2000.0)
    older = _left_behind(results, 9999, [(f"{cls}::test_q[1]", "failure"), (f"{cls}::test_q[4]", "failure")], 1000.0)
    stem = older.name.removesuffix(suite.PROGRESS_SUFFIX)
    report = results / f"{stem}.xml"  # pytest ended, its script did not record it: the report is read, not the log
    report.write_text(
        f'<testsuites><testsuite name="pytest"><testcase classname="{cls}" name="test_q[1]" time="1.0">'
        f'<error message="x">x</error></testcase><testcase classname="{cls}" name="test_q[4]" time="1.0">'
        '<error message="from the report">x</error></testcase></testsuite></testsuites>'
    )
    (results / f"{stem}.only").write_text("x\n")
    cut = _left_behind(results, 7, [(f"{cls}::test_q[2]", "passed")], 3000.0)
    (results / f"{cut.name.removesuffix(suite.PROGRESS_SUFFIX)}.xml").write_text("<testsuites><testsu")  # cut short
    nameless = results / f".trn2.8{suite.PROGRESS_SUFFIX}"
    nameless.write_text(json.dumps({"id": f"{cls}::test_q[3]", "tag": "passed", "message": "", "seconds": 1.0}) + "\n")
    other = _left_behind(results, 5, [], 500.0).rename(results / f".trn3.5{suite.PROGRESS_SUFFIX}")
    assert len(suite.recover("trn2")) == 3
    record = json.loads(suite.results_path("trn2", True).read_text())
    # all three resumed the same family: the later run's outcome of test_q[1] replaces the earlier one's
    assert [(r["id"].rsplit("::", 1)[1], r["outcome"], r["message"]) for r in record["tests"]] == [
        ("test_q[4]", "error", "from the report"),
        ("test_q[1]", "passed", ""),
        ("test_q[2]", "passed", ""),
    ]
    assert record["wall_s"] > 0 and [run["wall_s"] > 0 for run in record["reruns"]] == [True, True]  # 3 runs
    assert sorted(p.name for p in results.iterdir() if p.name.startswith(".")) == [nameless.name, other.name]
    assert f"{nameless} names no run: left as it is" in capsys.readouterr().out


def test_a_run_whose_script_is_gone_but_whose_pytest_runs_on_is_left_to_it(tmp_path):
    log = tmp_path / f".trn2.1{suite.PROGRESS_SUFFIX}"
    with suite._held(log) as lock:  # the script's lock, given to its pytest
        pytest_alive = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, pass_fds=(lock.fileno(),)
        )
    try:
        with suite._held(log) as other:  # the script has let go; pytest holds the lock still
            assert other is None
    finally:
        pytest_alive.communicate(b"", timeout=30)
    with suite._held(log) as other:
        assert other is not None  # both gone: free


def _suite_checkout(tmp_path: Path) -> tuple[Path, Path]:
    """A checkout rooted at test/ (as the suite's pytest.ini makes it) with a family of three parametrized tests,
    one of whose ids holds "//"; returns the checkout and the family's directory."""
    checkout = tmp_path / "lib"
    family = checkout / "test" / "integration" / "nkilib" / "core" / "fam"
    family.mkdir(parents=True)
    (checkout / "test" / "pytest.ini").write_text("[pytest]\n")
    (family / "test_fam.py").write_text(
        "import pytest\n\n\nclass TestK:\n    @pytest.mark.parametrize('n', ['1', '2', 'x//y'])\n"
        "    def test_a(self, n):\n        pass\n"
    )
    return checkout, family


def test_the_deselected_ids_are_ones_pytest_deselects_in_a_suite_rooted_at_test(tmp_path):
    import subprocess
    import sys

    checkout, family = _suite_checkout(tmp_path)
    recorded = [
        "integration.nkilib.core.fam.test_fam.TestK::test_a[1]",
        "integration.nkilib.core.fam.test_fam.TestK::test_a[x//y]",
    ]
    args = [f"--deselect={suite.suite_node_id(checkout, test_id)}" for test_id in recorded]
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", str(family), *args],
        cwd=checkout, capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    assert [line for line in out.splitlines() if "::" in line] == [
        "integration/nkilib/core/fam/test_fam.py::TestK::test_a[2]"
    ]


def test_a_rerun_keeps_of_the_collected_tests_those_listed_and_runs_on_when_some_are_not_collected(tmp_path):
    """pytest with the selection plugin, in a suite rooted at test/: named on the command line, the absent draw
    would stop the run ("ERROR: not found")."""
    import os
    import subprocess
    import sys

    checkout, family = _suite_checkout(tmp_path)
    (family / "test_other.py").write_text("def test_b():\n    pass\n\n\ndef test_c():\n    pass\n")
    recorded = [
        "integration.nkilib.core.fam.test_fam.TestK::test_a[x//y]",
        "integration.nkilib.core.fam.test_fam.TestK::test_a[9]",  # an earlier draw, not collected now
        "::integration.nkilib.core.fam.test_other",  # a file that failed to collect: all it holds
    ]
    only = tmp_path / "only.txt"
    only.write_text("".join(f"{suite.suite_node_id(checkout, test_id)}\n" for test_id in recorded))
    benchmarks = str(Path(suite.__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([benchmarks, os.environ.get("PYTHONPATH", "")])}
    env["NKISIM_SUITE_ONLY"] = str(only)
    files = list(dict.fromkeys(suite.node_id(checkout, test_id).partition("::")[0] for test_id in recorded))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rN", "-p", "no:cacheprovider", "-p", "nkilib_select", *files],
        cwd=checkout, capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 passed, 2 deselected" in proc.stdout
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "nkilib_select",
         *files],
        cwd=checkout, capture_output=True, text=True, check=False, env=env,
    ).stdout  # fmt: skip
    assert [line for line in collected.splitlines() if "::" in line] == [
        "integration/nkilib/core/fam/test_fam.py::TestK::test_a[x//y]",
        "integration/nkilib/core/fam/test_other.py::test_b",
        "integration/nkilib/core/fam/test_other.py::test_c",
    ]


def test_a_rerun_names_the_tests_files_and_keeps_the_outcome_of_a_test_not_collected_again(tmp_path, monkeypatch):
    cls = "integration.nkilib.core.rmsnorm.test_rmsnorm_quant.TestRmsNormQuantKernel"
    timeout = "Failed: Timeout (>150.0s) from pytest-timeout."
    old = [
        {"id": f"{cls}::test_s[1]", "family": "core/rmsnorm", "outcome": "failed", "message": timeout},
        {"id": f"{cls}::test_s[2]", "family": "core/rmsnorm", "outcome": "failed", "message": timeout},
        {"id": f"{cls}::test_t", "family": "core/rmsnorm", "outcome": "passed", "message": ""},
    ]
    # this collection drew test_s[1] again, and not test_s[2]
    checkout, commands = _fake_suite(tmp_path, monkeypatch, "core/rmsnorm", old, [(cls, "test_s[1]")])
    record = suite.run_suite(checkout, "trn2", 1, True, ["core/rmsnorm"], timeout=150, rerun="Timeout")
    module = checkout / "test" / "integration" / "nkilib" / "core" / "rmsnorm" / "test_rmsnorm_quant.py"
    assert str(module) in commands[0] and not any("::" in arg for arg in commands[0])
    assert commands[0][commands[0].index("nkilib_select") - 1] == "-p"
    outcomes = {r["id"].rsplit("::", 1)[1]: r["outcome"] for r in record["tests"]}
    assert outcomes == {"test_s[1]": "passed", "test_s[2]": "failed", "test_t": "passed"}
    assert record["reruns"][-1]["not_collected"] == 1
    assert "1 of them not collected again" in report._run_text(record["reruns"][-1])
    assert not list((tmp_path / "results").glob(".*.only"))  # the list of tests to keep is removed with the junit


def test_the_expected_whole_suite_time_scales_the_family_runs_rate_leaving_re_runs_out():
    runs = [{"wall_s": 100.0}, {"wall_s": 50.0}, {"wall_s": 999.0, "tests": 3}]
    text = report.expected_time(runs, 30, "trn2")  # 150 s over 30 tests: 5 s a test
    whole = report.SUITE_TESTS["trn2"]
    assert text.startswith(f"At the 5.0 s of wall time per test of these runs, the {whole:,} tests")
    assert f"about {round(5.0 * whole / 3600)} hours on trn2" in text
    one = report.expected_time([{"wall_s": 3600 / whole * 30}], 30, "trn2")
    assert "about 1 hour on trn2" in one


@pytest.mark.parametrize("code", [suite.INTERRUPTED, suite.INTERNAL_ERROR])
def test_an_interrupted_rerun_keeps_the_recorded_outcome_of_the_tests_it_did_not_reach(tmp_path, monkeypatch, code):
    """Stopped by hand (2) or by pytest-xdist's internal error when its last worker was lost (3)."""
    cls = "integration.nkilib.core.qkv.test_qkv_cte.TestQkvCteKernel"
    timeout = "Failed: Timeout (>150.0s) from pytest-timeout."
    row = {"family": "core/qkv", "outcome": "failed", "message": timeout}
    old = [{"id": f"{cls}::test_s[{i}]", **row} for i in range(3)]
    # only test_s[0] finished before Ctrl-C
    checkout, _ = _fake_suite(tmp_path, monkeypatch, "core/qkv", old, [(cls, "test_s[0]")], code)
    record = suite.run_suite(checkout, "trn2", 1, True, ["core/qkv"], timeout=900, rerun="Timeout")
    assert not record["interrupted"]  # the first run's; the re-run's stop is in its own entry
    outcomes = {r["id"].rsplit("::", 1)[1]: r["outcome"] for r in record["tests"]}
    assert outcomes == {"test_s[0]": "passed", "test_s[1]": "failed", "test_s[2]": "failed"}
    assert record["reruns"][-1] == {
        "families": ["core/qkv"], "wall_s": record["reruns"][-1]["wall_s"], "workers": 1, "tests": 3,
        "timeout": 900, "interrupted_after": 1,
    }  # fmt: skip


def test_pytest_can_be_interrupted_when_the_script_runs_in_the_background():
    import subprocess

    # a shell starting "nohup ... &" makes its children ignore SIGINT; pytest must still take it
    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    parent = (
        "import signal, subprocess, sys\n"
        f"sys.path.insert(0, {str(Path(suite.__file__).parent)!r})\n"
        "import nkilib_suite\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "for hook in (None, nkilib_suite._interruptible):\n"
        f"    subprocess.run([sys.executable, '-c', {probe!r}], preexec_fn=hook, check=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]  # ignored as inherited; Python's KeyboardInterrupt handler with the hook


@pytest.mark.parametrize(("workers", "expected"), [(1, ["-n", "1", "--max-worker-restart=1000"]), (0, [])])
def test_one_worker_still_runs_the_tests_in_an_xdist_worker_so_a_test_killed_for_memory_is_recorded(
    tmp_path, monkeypatch, workers, expected
):
    cls = "integration.nkilib.core.max.test_max.T"
    checkout, commands = _fake_suite(tmp_path, monkeypatch, "core/max", [], [(cls, "test_m")])
    suite.run_suite(checkout, "trn2", workers, True, ["core/max"])
    xdist = [arg for arg in commands[0] if arg in ("-n", "1", "--max-worker-restart=1000")]
    assert xdist == expected


def test_a_run_merges_its_outcomes_under_an_exclusive_lock(tmp_path):
    """Two runs of one target may end at once: while one merges, another cannot take the lock."""
    fcntl = pytest.importorskip("fcntl")
    results = tmp_path / "trn2-all.json"
    with suite._locked(results), open(results.with_suffix(".lock"), "w") as other, pytest.raises(BlockingIOError):
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(results.with_suffix(".lock"), "w") as other:  # released afterwards
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_whole_run_at_once_names_its_worker_count_and_whether_it_was_stopped(tmp_path, monkeypatch):
    import json

    monkeypatch.setattr(suite, "RESULTS", tmp_path)
    row = {"id": "integration.nkilib.core.max.test_max.T::test_a", "family": "core/max", "outcome": "passed"}
    base = {"subset": "fast", "run_all": True, "commit": "abc1234", "families": [], "tests": [row]}
    (tmp_path / "trn1.json").write_text(
        json.dumps({**base, "target": "trn1", "wall_s": 9.0, "workers": 1, "interrupted": True})
    )
    (tmp_path / "trn2.json").write_text(json.dumps({**base, "target": "trn2", "wall_s": 5.0}))  # recorded before both
    doc = tmp_path / "doc.md"
    suite.write_doc(doc)
    text = doc.read_text()
    assert "Wall time (2 cores, `-n 1`, interrupted): 9.0 s for every family at nki-library commit abc1234." in text
    assert "Wall time (2 cores, `-n 2`): 5.0 s for every family at nki-library commit abc1234." in text


def test_a_run_refuses_to_start_on_a_nearly_full_disk_and_names_the_outputs_left_behind(tmp_path, monkeypatch, capsys):
    left = tmp_path / "neuron_test_output" / "out-test_killed"
    left.mkdir(parents=True)
    (left / "golden.bin").write_bytes(b"x" * 4096)
    (tmp_path / "test" / "integration").mkdir(parents=True)
    usage = type(shutil.disk_usage(tmp_path))
    monkeypatch.setattr(suite.shutil, "disk_usage", lambda path: usage(100 * 2**30, 95 * 2**30, 5 * 2**30))
    assert suite.disk_room(tmp_path, 4) is None
    message = suite.disk_room(tmp_path, 20)
    assert message.startswith(f"only 5.0 GiB free on the disk of {tmp_path} (at least 20 wanted")
    assert f"{tmp_path / 'neuron_test_output'} holds 0.0 GiB" in message and "--min-free-gib 0" in message
    with pytest.raises(SystemExit):
        suite.main([str(tmp_path), "--min-free-gib", "20", "--no-doc"])
    assert "only 5.0 GiB free" in capsys.readouterr().err


def test_a_full_disk_is_its_own_verdict():
    row = {
        "id": "integration.nkilib.experimental.loss.t.T::test_a[x]",
        "message": "OSError: [Errno 28] No space left on device",
    }
    assert report.triage(row)[0] == "disk"
    assert "disk" in report.VERDICTS


def test_a_partial_run_leaves_the_first_runs_worker_count_and_stop_to_the_record(tmp_path, monkeypatch):
    """The record's "Wall time" line is its first run's: a later run of some families with another -n, done
    to the end, is listed apart with its own -n and does not relabel the first."""
    import json

    cls = "integration.nkilib.core.max.test_max.T"
    old = [{"id": f"{cls}::test_m", "family": "core/max", "outcome": "failed", "message": "Failed: Timeout"}]
    checkout, _ = _fake_suite(tmp_path, monkeypatch, "core/max", old, [(cls, "test_m")])
    first = json.loads(suite.results_path("trn2", True).read_text())
    suite.results_path("trn2", True).write_text(json.dumps({**first, "workers": 2, "interrupted": True}))
    record = suite.run_suite(checkout, "trn2", 1, True, ["core/max"])
    assert (record["workers"], record["interrupted"]) == (2, True)
    assert record["reruns"][-1]["workers"] == 1 and "interrupted_after" not in record["reruns"][-1]


def test_a_whole_suite_record_of_a_target_never_counted_says_its_total_is_unknown(monkeypatch):
    monkeypatch.setattr(report, "SUITE_TESTS", {"trn2": 1234})
    records = [{"target": "trn1", "subset": "all", "tests": [{"id": "a::ok", "outcome": "passed"}]}]
    line = next(line for line in report.summary_lines(records) if line.startswith("| trn1 "))
    assert line.startswith("| trn1 | all | 1 of ? | 1 |")
    assert "the 1,234 tests of the whole suite take about" in report.expected_time([{"wall_s": 10.0}], 1, "trn1")


# -- worker crashes against the kernel's log ---------------------------------------------------------------------

#: Two kills as the kernel writes them (the format of Linux's oom_kill.c), with a line of another kind between.
KERNEL_LOG = """\
[ 2343.688758] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task=python
[ 2343.688800] Out of memory: Killed process 6906 (python) total-vm:17147108kB, anon-rss:15979148kB, file-rss:120kB
[ 2500.100000] usb 1-1: new device
[ 2745.427489] Out of memory: Killed process 2435 (python) total-vm:26376352kB, anon-rss:21045488kB, file-rss:0kB
"""


def test_the_kernel_log_s_oom_kills_are_read_with_their_time_process_and_memory():
    assert oom_log.kills(KERNEL_LOG) == [
        oom_log.Kill(2343.6888, 6906, "python", 15979148),
        oom_log.Kill(2745.427489, 2435, "python", 21045488),
    ]
    assert oom_log.kills("[ 1.0] usb 1-1: new device\n") == []


def test_a_watch_counts_the_kills_after_its_start_even_when_the_ring_buffer_drops_them():
    first, second = KERNEL_LOG.splitlines()[1], KERNEL_LOG.splitlines()[3]
    third = "[ 3000.5] Out of memory: Killed process 77 (pytest) total-vm:1kB, anon-rss:2048kB, file-rss:0kB"
    texts = iter([first, f"{first}\n{second}", third])  # at the start, then two polls; the last lost the others
    watch = oom_log.OomWatch(read=lambda: next(texts))
    watch.poll()
    watch.poll()
    assert [(k.pid, k.rss_kb) for k in watch.new] == [(2435, 21045488), (77, 2048)]  # the kill before it left out
    unreadable = oom_log.OomWatch(read=lambda: None)
    unreadable.poll()
    assert unreadable.new is None


def test_a_run_records_its_worker_crashes_and_the_oom_kills_the_log_shows(tmp_path, monkeypatch):
    cls = "integration.nkilib.core.max.test_max.T"
    crash = "worker 'gw0' crashed while running 'integration/nkilib/core/max/test_max.py::T::test_b'"
    kill = KERNEL_LOG.splitlines()[1]
    checkout, _ = _fake_suite(
        tmp_path, monkeypatch, "core/max", [], [(cls, "test_a"), (cls, "test_b")],
        logs=["", kill], messages={"test_b": crash},
    )  # fmt: skip
    record = suite.run_suite(checkout, "trn2", 1, True, ["core/max"])
    run = record["reruns"][-1]  # the family was recorded before: this run is an entry of its record
    assert (run["crashes"], run["oom_kills"]) == (1, 1)
    assert report.crash_lines([record, run]) == [
        "Worker crashes in the 1 run that read the kernel's log: 1; out-of-memory kills in that log while they "
        "ran: 1 (any process's).",
        "",
    ]


def test_a_resumed_run_keeps_its_counts_in_its_own_entry_and_the_first_run_s_in_the_record(tmp_path, monkeypatch):
    cls = "integration.nkilib.core.max.test_max.T"
    old = [{"id": f"{cls}::test_a", "family": "core/max", "outcome": "passed", "message": ""}]
    checkout, _ = _fake_suite(tmp_path, monkeypatch, "core/max", old, [(cls, "test_c")], logs=["", ""])
    record = suite.run_suite(checkout, "trn2", 1, True, ["core/max"], resume=True)
    assert "crashes" not in record  # the first run could not read the log
    assert (record["reruns"][-1]["crashes"], record["reruns"][-1]["oom_kills"]) == (0, 0)
    runs = [record, *record["reruns"], {"crashes": 3, "oom_kills": 2}]
    assert report.crash_lines(runs)[0].startswith("Worker crashes in the 2 runs that read the kernel's log: 3; ")
    unread = _fake_suite(tmp_path / "b", monkeypatch, "core/max", [], [(cls, "test_d")])[0]
    assert "oom_kills" not in suite.run_suite(unread, "trn2", 1, True, ["core/max"])


def test_a_first_run_of_a_target_keeps_its_counts_in_the_record_itself(tmp_path, monkeypatch):
    cls = "integration.nkilib.core.max.test_max.T"
    kill = KERNEL_LOG.splitlines()[3]
    checkout, _ = _fake_suite(tmp_path, monkeypatch, "core/max", [], [(cls, "test_a")], logs=["", kill])
    suite.results_path("trn2", True).unlink()  # nothing recorded for trn2 yet
    record = suite.run_suite(checkout, "trn2", 1, True, ["core/max"])
    assert (record["crashes"], record["oom_kills"], record.get("reruns")) == (0, 1, None)


def test_the_kernel_log_unreadable_or_lost_during_a_run_is_unknown_not_zero(monkeypatch):
    import subprocess

    def refused(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="dmesg: read kernel buffer failed")

    monkeypatch.setattr(oom_log.subprocess, "run", refused)
    assert oom_log.read_log() is None

    def missing(cmd, **kwargs):
        raise FileNotFoundError(cmd[0])

    monkeypatch.setattr(oom_log.subprocess, "run", missing)
    assert oom_log.read_log() is None
    texts = iter(["", None, KERNEL_LOG])
    watch = oom_log.OomWatch(read=lambda: next(texts))
    watch.poll()  # the log cannot be read any more: kills may have gone uncounted
    watch.poll()
    assert watch.new is None


def test_the_mx_moe_unit_tests_timeouts_name_the_suites_generator_and_the_largest_keeps_its_own_measure():
    message = "Failed: Timeout (>150.0s) from pytest-timeout."
    cls = "integration.nkilib.core.moe.moe_bwmm_mx.test_moe_bwmm_mx.TestMx"
    shard = report.triage({"id": f"{cls}::test_moe_bwmm_mx_shard_I_unit[2-3072-1024-2048-8-256]", "message": message})
    largest = report.triage({"id": f"{cls}::test_moe_bwmm_mx_cte_unit[2-3072-10240-384-128-256-4]", "message": message})
    other = report.triage({"id": f"{cls}::test_moe_tkg[1]", "message": message})
    assert shard[0] == largest[0] == other[0] == "timeout"
    assert "2,219 of one worker's 2,294 samples" in shard[1] and "15.1 million blocks" in largest[1]
    assert "generate_stabilized_mx_data" not in other[1]
