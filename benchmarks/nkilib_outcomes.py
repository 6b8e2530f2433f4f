"""A suite run's per-test outcomes: from pytest's junit report, or from the log this plugin keeps as tests end.

pytest writes its junit report when its session ends, also when SIGINT stops it. A run stopped any harder (the
machine shut down, the process tree killed, SIGKILL) leaves no report, and every outcome of the run, hours of
them in a whole-suite run, would be lost. Loaded as a plugin (``-p nkilib_outcomes``) with :data:`PROGRESS_ENV`
naming a file, pytest's own process (xdist's controller, never a worker) appends to that file one JSON line per
test report as it arrives: the test's junit id, what junitxml makes of the report (its tag and message) and
the report's duration. :func:`parse_progress` folds those lines into the rows :func:`parse_junit` reads from a
report, so that ``nkilib_suite.py`` keeps the tests finished before such a stop (and ``--recover`` those of a run
whose script was stopped too). The lines follow pytest 9's junitxml; where a test fails in its call and again
in its teardown, the report has two cases and the log one row, the failure.
"""

from __future__ import annotations

import json
import os
import re
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from _pytest.junitxml import bin_xml_escape  # junitxml's own escape of a message's control characters

#: The environment variable naming the progress log; the plugin does nothing without it.
PROGRESS_ENV = "NKISIM_SUITE_PROGRESS"
#: A row's outcome by junit tag, in the order a report's case is read: the first tag found is the outcome.
TAGS = {"failure": "failed", "error": "error", "skipped": "skipped"}


def family_of(classname: str) -> str:
    """``integration.nkilib.core.cumsum.test_cumsum.TestX`` -> ``core/cumsum``."""
    parts = classname.split(".")
    for i, part in enumerate(parts):
        if part in ("core", "experimental") and i + 1 < len(parts):
            following = parts[i + 1]
            return f"{part}/{following}" if not following.startswith("test_") else part
    return parts[2] if len(parts) > 2 else classname


def short_message(message: str, limit: int = 400) -> str:
    """The line of a failure message that names the error (else its first line), at most ``limit`` characters."""
    lines = [line for line in message.splitlines() if line.strip()]
    keep = next(
        (line for line in lines if re.search(r"Error|error|assert|mismatch|NaN", line)), lines[0] if lines else ""
    )
    return keep.strip()[:limit]


def _row(test_id: str, outcome: str, message: str, seconds: float) -> dict[str, Any]:
    classname, _, name = test_id.partition("::")
    return {
        "id": test_id,
        "family": family_of(classname or name),  # a collection error names its module
        "outcome": outcome,
        "message": short_message(message),
        "seconds": round(seconds, 2),
    }


def parse_junit(path: Path) -> list[dict[str, Any]]:
    """Per-test outcomes from a junit XML file."""
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        classname = case.get("classname", "")
        if not classname and not case.get("name"):
            continue  # pytest's record of a run interrupted (Ctrl-C, SIGINT) names no test
        if (classname, case.get("name")) == ("pytest", "internal"):
            continue  # nor does its record of an internal error (xdist with no worker left): the run stopped
        outcome, message = "passed", ""
        for tag, tag_outcome in TAGS.items():
            node = case.find(tag)
            if node is not None:
                outcome, message = tag_outcome, (node.get("message") or node.text or "").strip()
                break
        rows.append(_row(f"{classname}::{case.get('name', '')}", outcome, message, float(case.get("time") or 0.0)))
    return rows


def case_id(nodeid: str) -> str:
    """The junit id (``classname::name``) of a pytest node id, as junitxml names its case: the file's path in
    dots without ``.py``, then the classes, then the test with its parameters."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]) + "::" + names[-1]


def _reason(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    return crash.message if crash is not None else str(report.longrepr)


def report_entry(report: pytest.TestReport) -> tuple[str | None, str]:
    """What junitxml records of one report: its tag (``passed`` for a call that passed; None for a setup or
    teardown that passed, which adds only its duration, and for an outcome junitxml ignores) and message."""
    if report.passed:
        return ("passed" if report.when == "call" else None), ""
    if report.failed:
        if report.when == "call":
            if hasattr(report, "wasxfail"):
                return "skipped", "xfail-marked test passes unexpectedly"
            return "failure", bin_xml_escape(_reason(report))
        where = "teardown" if report.when == "teardown" else "setup"  # xdist's crash report is "???": setup's words
        return "error", bin_xml_escape(f'failed on {where} with "{_reason(report)}"')
    if not report.skipped:
        return None, ""
    if hasattr(report, "wasxfail"):
        return "skipped", bin_xml_escape(report.wasxfail.removeprefix("reason: "))
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return "skipped", bin_xml_escape(reason.removeprefix("Skipped: "))


class ProgressLog:
    """Appends each report's line to ``path`` as it arrives (a line at a time: a stop loses at most the last).

    A line it cannot write (a full disk) is reported once as a warning and the run goes on: the junit report
    still records it, and the log only stands in for a report that was never written.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.failed = False

    def _append(self, test_id: str, tag: str | None, message: str, seconds: float) -> None:
        line = json.dumps({"id": test_id, "tag": tag, "message": message, "seconds": seconds})
        try:
            with open(self.path, "a", encoding="utf-8") as log:
                log.write(line + "\n")
        except OSError as exc:
            if not self.failed:
                self.failed = True
                warnings.warn(f"the progress log {self.path} misses outcomes from here on: {exc}", stacklevel=1)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        tag, message = report_entry(report)
        self._append(case_id(report.nodeid), tag, message, float(getattr(report, "duration", 0.0)))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self._append(case_id(report.nodeid), "error", "collection failure", 0.0)
        elif report.skipped:
            self._append(case_id(report.nodeid), "skipped", "collection skipped", 0.0)


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get(PROGRESS_ENV)
    if path and not hasattr(config, "workerinput"):  # the controller sees every worker's reports
        config.pluginmanager.register(ProgressLog(Path(path)), "nkilib-progress-log")


def write_header(path: Path, run: dict[str, Any]) -> None:
    """Start the progress log ``path`` with the run's description (read back by :func:`parse_progress`)."""
    path.write_text(json.dumps({"run": run}) + "\n", encoding="utf-8")


def parse_progress(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run's description and the rows of the tests the log shows ended (as :func:`parse_junit` gives them).

    A test with only a setup that passed was still running: it is left out, as a report would leave it. A line
    cut short by the stop is skipped.
    """
    run: dict[str, Any] = {}
    cases: dict[str, tuple[dict[str, str], list[float]]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if "run" in item:
            run = item["run"]
            continue
        tags, seconds = cases.setdefault(item["id"], ({}, [0.0]))
        seconds[0] += item["seconds"]
        if item["tag"] is not None:
            tags.setdefault(item["tag"], item["message"])
    rows = []
    for test_id, (tags, seconds) in cases.items():
        if not tags:
            continue
        outcome, message = "passed", ""
        for tag, tag_outcome in TAGS.items():
            if tag in tags:
                outcome, message = tag_outcome, tags[tag]
                break
        rows.append(_row(test_id, outcome, message, seconds[0]))
    return run, rows
