"""benchmarks/nkilib_outcomes.py: the progress log of a suite run, checked against pytest's own junit report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from nkilib_outcomes import PROGRESS_ENV, case_id, parse_junit, parse_progress, write_header  # noqa: E402

#: Tests of every outcome a report can give: a pass, a failure, errors in setup, in teardown (after a passing
#: call) and in both, a failure in the call and in the teardown, skips in setup and in the call, an xfail, an
#: xpass (strict and not), a message with control characters, a test that kills its xdist worker, parametrized
#: ids with brackets and "::" inside, and modules that fail to collect or skip themselves.
KINDS = """
import os
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

@pytest.fixture
def sticky():
    yield
    raise ValueError("teardown broke")

class TestKinds:
    @pytest.mark.parametrize("n", ["1", "a::b", "[x]"])
    def test_pass(self, n):
        pass

    def test_fail(self):
        assert 1 + 1 == 3, "arithmetic mismatch"

    def test_setup_error(self, broken):
        pass

    def test_teardown_error(self, sticky):
        pass

    def test_errors_in_setup_and_teardown(self, sticky, broken):
        pass

    @pytest.mark.skip(reason="not here")
    def test_marked_skip(self):
        pass

    def test_skip_in_call(self):
        pytest.skip("later")

    @pytest.mark.xfail(reason="known")
    def test_xfail(self):
        assert False

    @pytest.mark.xfail(reason="fixed now", strict=True)
    def test_xpass_strict(self):
        pass

    @pytest.mark.xfail(reason="maybe")
    def test_xpass(self):
        pass

    def test_control_character(self):
        assert False, "\x1b[31mred\x1b[0m"

    def test_double_failure(self, sticky):
        assert False, "call broke"

def test_crash():
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os._exit(3)  # the worker dies: xdist reports the crash
"""


def _suite(tmp_path: Path) -> Path:
    root = tmp_path / "lib" / "test"
    family = root / "integration" / "nkilib" / "core" / "kinds"
    family.mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    (family / "test_kinds.py").write_text(KINDS)
    (family / "test_broken.py").write_text("import not_a_module_anywhere\n")
    (family / "test_skipped.py").write_text(
        "import pytest\n\npytest.skip('not on this machine', allow_module_level=True)\n"
    )
    return root


def _run(root: Path, tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, Path, Path]:
    junit, log = tmp_path / "report.xml", tmp_path / "progress.jsonl"
    write_header(log, {"target": "trn2"})
    env = {**os.environ, PROGRESS_ENV: str(log), "PYTHONPATH": str(BENCHMARKS)}
    env.pop("PYTEST_XDIST_WORKER", None)  # this suite's own worker's: test_crash reads the inner run's
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "nkilib_outcomes"]
    cmd += [f"--junitxml={junit}", "--continue-on-collection-errors", "integration", *extra]
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    return done, junit, log


def _cells(rows: list[dict]) -> list[tuple]:
    return [(row["id"], row["family"], row["outcome"], row["message"]) for row in rows]


@pytest.mark.parametrize("workers", [[], ["-n", "1", "--max-worker-restart=5"]], ids=["one process", "xdist"])
def test_the_log_gives_the_rows_pytest_s_junit_report_gives(tmp_path, workers):
    root = _suite(tmp_path)
    done, junit, log = _run(root, tmp_path, *workers)
    assert done.returncode == 1, done.stdout[-2000:]
    expected = parse_junit(junit)
    header, logged = parse_progress(log)
    assert header == {"target": "trn2"}
    # the one documented difference: a failure in the call and again in the teardown is two cases in the report
    double = "integration.nkilib.core.kinds.test_kinds.TestKinds::test_double_failure"
    assert [cells[2:] for cells in _cells(expected) if cells[0] == double] == [
        ("failed", "AssertionError: call broke"),
        ("error", 'failed on teardown with "ValueError: teardown broke"'),
    ]
    first = [
        cells for i, cells in enumerate(_cells(expected)) if cells[0] != double or _cells(expected)[i - 1][0] != double
    ]
    assert _cells(logged) == first
    outcomes = {row["id"].partition("::")[2]: row["outcome"] for row in expected}
    assert outcomes["test_fail"] == "failed" and outcomes["test_setup_error"] == "error"
    assert outcomes["test_teardown_error"] == "error" and outcomes["test_xfail"] == "skipped"
    assert outcomes["test_pass[a::b]"] == "passed" and outcomes["integration.nkilib.core.kinds.test_broken"] == "error"
    assert outcomes["test_xpass"] == "passed" and outcomes["integration.nkilib.core.kinds.test_skipped"] == "skipped"
    assert (
        "#x1B[31mred#x1B[0m"
        in dict((c[0], c[3]) for c in _cells(logged))[
            "integration.nkilib.core.kinds.test_kinds.TestKinds::test_control_character"
        ]
    )  # control characters escaped as the report does
    if workers:
        crash = dict((c[0], c[3]) for c in _cells(expected))["integration.nkilib.core.kinds.test_kinds::test_crash"]
        assert "crashed while running" in crash
    # one line a report: from pytest's own process only, never again from an xdist worker
    lines = log.read_text().splitlines()
    assert sum('test_kinds.TestKinds::test_fail"' in line for line in lines) == 3  # setup, call, teardown
    # the time of a test is its reports' durations added up, as in the report (rounded there to the ms)
    times = {row["id"]: row["seconds"] for row in expected}
    assert all(abs(row["seconds"] - times[row["id"]]) <= 0.02 for row in logged)


def test_a_run_killed_before_its_report_leaves_the_tests_that_ended_in_its_log(tmp_path):
    root = tmp_path / "lib" / "test"
    family = root / "integration" / "nkilib" / "core" / "kill"
    family.mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    (family / "test_kill.py").write_text(
        "import os, signal\n\n\ndef test_a():\n    pass\n\n\ndef test_b():\n    assert False, 'no'\n\n\n"
        "def test_c():\n    os.kill(os.getpid(), signal.SIGKILL)\n\n\ndef test_d():\n    pass\n"
    )
    done, junit, log = _run(root, tmp_path)
    assert done.returncode == -9 and not junit.exists()
    _, rows = parse_progress(log)
    assert [(row["id"], row["outcome"]) for row in rows] == [
        ("integration.nkilib.core.kill.test_kill::test_a", "passed"),
        ("integration.nkilib.core.kill.test_kill::test_b", "failed"),
    ]  # test_c was running (its setup only), test_d never began
    assert rows[0]["family"] == "core/kill" and rows[1]["message"] == "AssertionError: no"


def test_a_line_cut_short_by_the_stop_is_skipped(tmp_path):
    log = tmp_path / "progress.jsonl"
    write_header(log, {"target": "trn3"})
    with open(log, "a") as out:
        out.write(
            '{"id": "integration.nkilib.core.x.test_x::test_a", "tag": "passed", "message": "", "seconds": 1.5}\n'
        )
        out.write('{"id": "integration.nkilib.core.x.test_x::test_b", "tag": "fail')
    header, rows = parse_progress(log)
    assert header == {"target": "trn3"} and [row["id"].split("::")[1] for row in rows] == ["test_a"]


@pytest.mark.parametrize(
    ("nodeid", "expected"),
    [
        (
            "integration/nkilib/core/a/test_a.py::TestA::test_x[1-2]",
            "integration.nkilib.core.a.test_a.TestA::test_x[1-2]",
        ),
        (
            "integration/nkilib/core/a/test_a.py::test_y[p/q.py::r]",
            "integration.nkilib.core.a.test_a::test_y[p/q.py::r]",
        ),
        ("integration/nkilib/core/a/test_a.py", "::integration.nkilib.core.a.test_a"),
    ],
)
def test_a_node_id_becomes_junit_s_classname_and_name(nodeid, expected):
    assert case_id(nodeid) == expected


def test_a_log_that_cannot_be_written_warns_once_and_the_run_goes_on(tmp_path):
    from nkilib_outcomes import ProgressLog

    log = ProgressLog(tmp_path / "gone" / "progress.jsonl")  # its folder does not exist: every write fails
    with pytest.warns(UserWarning, match="misses outcomes from here on") as seen:
        for name in ("test_a", "test_b"):
            log._append(f"integration.x::{name}", "passed", "", 0.1)
    assert len(seen) == 1 and not log.path.exists()
