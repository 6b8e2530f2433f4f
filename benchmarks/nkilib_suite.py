"""Run AWS's NKI kernel library test suite (aws-neuron/nki-library) on nkisim and report conformance.

::

    python benchmarks/nkilib_suite.py PATH_TO_NKI_LIBRARY_CHECKOUT [--all] [--target trn2] [-n 2]
        [--families cumsum,max] [--timeout 150] [--suite-shape-skip] [--no-doc]

It runs ``pytest test/integration --test-mode simulation -m fast`` (everything with
``--all``) in the checkout with ``-p nkisim.compat.nkilib`` and the suite's own
``--platform-target``, prints pass/fail/error/skip counts per kernel family and the
wall time, keeps the per-test outcomes in ``benchmarks/nkilib_results/<target>.json``
(``<target>-all.json`` for ``--all``; a run limited by ``--families`` replaces only those
families' outcomes, so the whole suite can be run a few families at a time) and rewrites
``docs/nkilib-conformance.md`` from every target recorded there. The
suite needs pytest-xdist, pytest-html, fabric2, plotext, aws-embedded-metrics, allpairspy
and boto3 importable (and pytest-timeout with ``--timeout``); when one is missing the script
prints the ``pip install`` line to run. Nothing of the suite is installed. ``--no-doc``
prints the summary without rewriting the document. A run refuses to start with less than ``--min-free-gib`` (20) of free
disk space: the largest tests write several GiB each (each test's outputs are removed when it ends, and
those of a test whose worker was killed by the controller).

``--rerun PATTERN`` (with ``--families``) runs again only the recorded failures and errors of
those families whose "id: message" matches PATTERN (after a fix, or timeouts with a longer ``--timeout``),
and replaces just their outcomes. It collects those tests' files and keeps the tests it names
(:mod:`nkilib_select`): a test an unseeded sweep does not draw again keeps its recorded outcome, and
the re-run counts them.
``--resume`` (with ``--families``) runs only the tests of those families that have no recorded
outcome yet, after an interrupted run, and adds theirs. To stop a run and keep what it finished,
send SIGINT to its pytest process (Ctrl-C, or ``kill -INT``; also in a run started in the background).
pytest writes its report only when it ends, so the run also logs each test's outcome as the test ends
(:mod:`nkilib_outcomes`): when pytest is stopped harder (SIGKILL, the machine going down) the script
records the tests that log shows ended, and when the script itself was stopped too, ``--recover`` (with
``--target``) records them later from the log the run left in ``benchmarks/nkilib_results``.
Runs of other families may go on at the same time, of one target or several: each has its own pytest
report, and each merges its outcomes into the results under a lock. The suite's workers import nkisim
when they start and again when one is lost (a worker killed for memory is replaced), so a long run
should not share its nkisim tree with work in progress: run it from a copy of a commit (``git worktree
add``) with that copy first on ``PYTHONPATH``, and copy its results and document back.

The script sets the suite's ``NKILIB_SIMULATION_RUN_ALL=1``, so that simulation mode runs the
shapes the suite would otherwise skip as slow (every name containing 4096, 8192 or 16384);
``--suite-shape-skip`` leaves it unset. Skipped tests are counted by reason
(:data:`SKIP_REASONS`: the suite's own filters, or nkisim's plugin). The recorded results are
kept in the repository, so that the document can be rewritten for every target at once.

The triage of failures is :data:`TRIAGE`: a pattern on the test id or message and a
verdict. Failures no entry matches are listed as untriaged with their message. pytest-xdist names a worker
that died "crashed" whatever stopped it; while a run goes on the script reads the kernel's log (``dmesg``,
where it can) and records the run's worker crashes next to the out-of-memory kills that log showed meanwhile
(:mod:`oom_log`), which the document states per target.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from nkilib_outcomes import PROGRESS_ENV, parse_junit, parse_progress, write_header
from nkilib_report import document, print_summary
from nkilib_select import ONLY_ENV
from nkilib_triage import CRASH, RUN_ALL_ENV
from oom_log import OomWatch

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "nkilib_results"
DOC = ROOT / "docs" / "nkilib-conformance.md"
#: A representative set of families, cheapest first.
DEFAULT_FAMILIES = "cumsum,embeddings,core/utils,max,conv,topk,router_topk,attention,mlp,core/moe"
#: What the suite's conftest and harness import: (module, pip package).
SUITE_DEPS = (
    ("xdist", "pytest-xdist"),
    ("pytest_html", "pytest-html"),
    ("fabric2", "fabric2"),
    ("plotext", "plotext"),
    ("aws_embedded_metrics", "aws-embedded-metrics"),
    ("allpairspy", "allpairspy"),
    ("boto3", "boto3"),
)

#: Seconds between reads of the kernel's log while the suite runs (:class:`oom_log.OomWatch`).
OOM_POLL_S = 20
#: A run's progress log (:mod:`nkilib_outcomes`) is its junit report's path with this suffix for ``.xml``.
PROGRESS_SUFFIX = ".progress.jsonl"


def _commit(checkout: Path) -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


def run_suite(
    checkout: Path,
    target: str,
    workers: int,
    everything: bool,
    families: list[str],
    timeout: int = 0,
    run_all: bool = True,
    rerun: str = "",
    resume: bool = False,
) -> dict:
    """Run the suite for one target; returns the recorded result.

    ``run_all`` sets the suite's ``NKILIB_SIMULATION_RUN_ALL=1``, so that it runs its large shapes too.
    ``rerun`` (a regular expression) runs again only the recorded failures and errors of ``families``
    whose "id: message" it matches, after a fix, and replaces just their outcomes. ``resume`` runs only
    the tests of ``families`` that have no recorded outcome yet (after an interrupted run) and adds theirs.
    """
    needed = [*SUITE_DEPS, ("pytest_timeout", "pytest-timeout")] if timeout else list(SUITE_DEPS)
    missing = [package for module, package in needed if importlib.util.find_spec(module) is None]
    if missing:
        sys.exit(f"the suite needs packages that are not installed; run:\n    pip install {' '.join(missing)}")
    base = checkout / "test" / "integration" / "nkilib"
    paths = (
        [str(p) for f in families for p in base.glob(f if "/" in f else f"*/{f}")]
        if families
        else [str(checkout / "test" / "integration")]
    )
    if not paths:
        sys.exit(f"no kernel family matches {families}")
    again: list[str] = []
    if rerun:
        again = rerun_ids(results_path(target, everything), families, rerun)
        if not again:
            sys.exit(f"no recorded failure of {families} matches {rerun!r}")
        # their files, of which the plugin keeps those tests: named one by one, a test that is not collected
        # again (an unseeded sweep's draw) would stop the whole run
        paths = list(dict.fromkeys(node_id(checkout, test_id).partition("::")[0] for test_id in again))
    done = recorded_ids(results_path(target, everything), families) if resume else []
    # per run: runs of one target at once, and a later run given a process id an earlier one had, never share them
    stem = f".{target}.{os.getpid()}-{time.time_ns()}"
    RESULTS.mkdir(parents=True, exist_ok=True)
    junit = RESULTS / f"{stem}.xml"
    only = RESULTS / f"{stem}.only"  # the tests a re-run keeps (nkilib_select)
    progress = RESULTS / f"{stem}{PROGRESS_SUFFIX}"  # each test's outcome as it ends (nkilib_outcomes)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "nkisim.compat.nkilib",
        *paths,
        "--test-mode",
        "simulation",
        "--platform-target",
        target,
        "-p",
        "no:cacheprovider",
        "--continue-on-collection-errors",
        f"--junitxml={junit}",
        "-q",
        "--tb=line",
        "--nkisim-prune-all-artifacts",  # the suite writes every test's inputs and outputs: ~80 GB for a run
        "-p",
        "nkilib_outcomes",
    ]
    cmd += [f"--deselect={suite_node_id(checkout, test_id)}" for test_id in done]
    if again:
        cmd += ["-p", "nkilib_select"]
    if not everything:
        cmd += ["-m", "fast"]
    if workers > 0:
        # the tests run in xdist workers even with -n 1: a worker the machine's OOM killer stops is recorded as a
        # crash and replaced, where pytest itself would be killed with every outcome of the run; xdist's default
        # (4 restarts per worker) ended a family early
        cmd += ["-n", str(workers), "--max-worker-restart=1000"]
    if timeout and importlib.util.find_spec("pytest_timeout") is not None:
        cmd += [f"--timeout={timeout}"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(checkout / "src"), os.environ.get("PYTHONPATH"), str(Path(__file__).resolve().parent)])
        ),
    }
    if again:
        env[ONLY_ENV] = str(only)
    env.pop(RUN_ALL_ENV, None)
    if run_all:
        env[RUN_ALL_ENV] = "1"
    run = {
        "target": target,
        "everything": everything,
        "run_all": run_all,
        "commit": _commit(checkout),
        "families": families,
        "workers": workers,
        "timeout": timeout,
        "again": again,
        "resumed_after": len(done),
        "started": time.time(),
    }
    # the log of each test's outcome as it ends, kept should the run stop before pytest writes its report; its lock,
    # held by this script and pytest, tells --recover that the run goes on
    with _held(progress) as lock:
        assert lock is not None, f"{progress} is another run's"  # a new name
        if again:
            only.write_text("".join(f"{suite_node_id(checkout, test_id)}\n" for test_id in again))
        write_header(progress, run)
        env[PROGRESS_ENV] = str(progress)
        proc, wall, watch = _run_pytest(cmd, checkout, env, lock.fileno())
        stopped = proc.returncode in STOPPED
        rows = _read_report(junit)
        if rows is None:
            rows = parse_progress(progress)[1]
            if not rows:
                for leftover in (only, progress):
                    leftover.unlink(missing_ok=True)
                sys.exit(f"pytest produced no results (exit {proc.returncode})")
            code = proc.returncode
            print(f"pytest wrote no report (exit {code}); the {len(rows)} tests its log shows ended are kept")
            stopped = True
        # where the kernel's log could be read: the run's worker crashes, and the OOM kills that may explain them
        kills = watch.new
        crashes = sum(1 for row in rows if re.search(CRASH, row["message"]))
        logged = {} if kills is None else {"crashes": crashes, "oom_kills": len(kills)}
        record = merge_run(run, rows, stopped, wall, logged)
        for leftover in (junit, only, progress):  # recorded: under the lock, so that no --recover records them again
            leftover.unlink(missing_ok=True)
    return record


def _run_pytest(
    cmd: list[str], checkout: Path, env: dict[str, str], lock: int
) -> tuple[subprocess.Popen, float, OomWatch]:
    """Run the suite's pytest to its end, reading the kernel's log meanwhile; pytest holds the file ``lock`` too.

    Returns the finished process, the wall time and the watch of the kernel's log.
    """
    print("$", " ".join(cmd), flush=True)
    start = time.monotonic()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops pytest, which ends with what it finished
    watch = OomWatch()
    try:
        proc = subprocess.Popen(
            cmd,
            cwd=checkout,
            env=env,
            stdout=sys.stdout,
            stderr=subprocess.STDOUT,
            preexec_fn=_interruptible,
            pass_fds=(lock,),
        )  # progress shows
        while True:
            try:
                proc.wait(timeout=OOM_POLL_S)
                break
            except subprocess.TimeoutExpired:
                watch.poll()
        watch.poll()
    finally:
        signal.signal(signal.SIGINT, previous)
    return proc, time.monotonic() - start, watch


def _read_report(junit: Path) -> list[dict] | None:
    """The rows of pytest's junit report; None when it wrote none, or a file cut short (a full disk, a kill)."""
    if not junit.exists():
        return None
    try:
        return parse_junit(junit)
    except ET.ParseError:
        return None


def merge_run(run: dict, rows: list[dict], stopped: bool, wall: float, logged: dict) -> dict:
    """Merge the outcomes ``rows`` of ``run`` (its description: :func:`run_suite`'s progress log header) into its
    target's results and return the record written.

    ``stopped``: the run ended before its last test. ``logged``: its worker crashes and the kernel log's OOM
    kills meanwhile, where that log could be read.
    """
    families, again, resumed = run["families"], run["again"], run["resumed_after"]
    record = {
        "target": run["target"],
        "wall_s": round(wall, 1),
        "subset": "all" if run["everything"] else "fast",
        "run_all": run["run_all"],
        "commit": run["commit"],
        "families": families,
        "workers": run["workers"],
        "interrupted": stopped,
        "tests": rows,
    }
    path = results_path(run["target"], run["everything"])
    with _locked(path):  # another run of this target may be writing its outcomes now
        if families and path.exists():  # a partial run replaces only its families' results (or only its re-run tests)
            old = json.loads(path.read_text())
            new_ids = {row["id"] for row in rows}
            if again:  # a test not re-run (stopped before it, or not collected again) keeps its recorded outcome
                # a run that went to its end collected again a file that failed to collect: it has its new tests
                ran = {i for i in again if i in new_ids or (not stopped and i.startswith("::"))}
                replaced = lambda r: r["id"] in ran  # noqa: E731
            elif resumed:
                replaced = lambda r: r["id"] in new_ids  # noqa: E731
            else:
                replaced = lambda r: _in_families(r["family"], families)  # noqa: E731
            record["tests"] = [r for r in old["tests"] if not replaced(r)] + rows
            # the record's own wall time, families, worker count and stop are its first run's; this run's are its
            # entry in the re-runs
            record["wall_s"] = old["wall_s"]
            record["families"] = old.get("families", [])
            record["workers"] = old.get("workers", 2)  # runs recorded before the count was kept used -n 2
            record["interrupted"] = old.get("interrupted", False)
            rerun_entry: dict[str, object] = {"families": families, "wall_s": round(wall, 1), "workers": run["workers"]}
            rerun_entry.update(logged)
            record.update({key: old[key] for key in ("crashes", "oom_kills") if key in old})  # the first run's
            if again:
                rerun_entry["tests"] = len(again)
                rerun_entry["timeout"] = run["timeout"]  # a re-run after a fix, or of timeouts with a longer limit
                lost = sum(1 for test_id in again if test_id not in new_ids and not test_id.startswith("::"))
                if lost and not stopped:
                    rerun_entry["not_collected"] = lost
                    print(f"{lost} of the {len(again)} tests to re-run were not collected again (unseeded sweeps)")
            if resumed:
                rerun_entry["resumed_after"] = resumed
            if stopped:  # stopped early: the tests finished so far are kept, and said to be
                rerun_entry["interrupted_after"] = len(rows)
            record["reruns"] = [*old.get("reruns", []), rerun_entry]
        else:
            record.update(logged)
        path.write_text(json.dumps(record, indent=1))
    return record


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path``'s lock file, waiting for it (POSIX; elsewhere, runs of one target must
    not end at once)."""
    with _held(path.with_suffix(".lock"), wait=True):
        yield


@contextlib.contextmanager
def _held(path: Path, wait: bool = False) -> Iterator[IO[str] | None]:
    """Hold an exclusive lock on ``path``: yields the open file, or (without ``wait``) None when another process
    holds it (POSIX; elsewhere, the file, unlocked).

    The lock is the open file's: a process given its descriptor holds it too, and it goes with the last of them,
    however they end.
    """
    with open(path, "a") as handle:
        try:
            import fcntl
        except ImportError:
            yield handle
            return
        try:
            fcntl.flock(handle, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        yield handle  # closed, not unlocked: an unlock would take the lock from a process given the descriptor too


def recover(target: str) -> list[dict]:
    """Record the outcomes of the runs of ``target`` whose script stopped before recording them, oldest first;
    returns their records.

    Such a run left its progress log (and, if pytest ended, its junit report, which is read instead) in the
    results folder, with no process holding the log's lock (neither the script nor its pytest). It is recorded as
    stopped early, with the wall time from its start to the log's last line. A log whose run goes on is left to
    it, and a log without the description of its run is left as it is, with a word.
    """
    logs = []
    for log in RESULTS.glob(f".{target}.*{PROGRESS_SUFFIX}"):
        run, _ = parse_progress(log)
        logs.append((run.get("started", 0.0), log))
    records = []
    for _, log in sorted(logs):
        with _held(log) as lock:
            if lock is None:
                continue  # its run goes on
            run, rows = parse_progress(log)
            if not run:
                print(f"{log} names no run: left as it is")
                continue
            stem = log.name.removesuffix(PROGRESS_SUFFIX)
            report, only = log.with_name(f"{stem}.xml"), log.with_name(f"{stem}.only")
            rows = _read_report(report) or rows
            if rows:
                records.append(merge_run(run, rows, True, log.stat().st_mtime - run["started"], {}))
                which = ", ".join(run["families"]) or "every family"
                print(f"recovered {len(rows)} outcomes of the {target} run of {which}")
            for leftover in (report, only, log):
                leftover.unlink(missing_ok=True)
    return records


def recorded_ids(path: Path, families: list[str]) -> list[str]:
    """The tests of ``families`` with a recorded outcome (collection errors aside: those files run again)."""
    if not path.exists():
        return []
    rows = json.loads(path.read_text())["tests"]
    return [r["id"] for r in rows if _in_families(r["family"], families) and not r["id"].startswith("::")]


def rerun_ids(path: Path, families: list[str], pattern: str) -> list[str]:
    """The recorded failures and errors of ``families`` whose "id: message" matches ``pattern``."""
    if not path.exists():
        return []
    rows = json.loads(path.read_text())["tests"]
    return [
        r["id"]
        for r in rows
        if r["outcome"] in ("failed", "error")
        and _in_families(r["family"], families)
        and re.search(pattern, f"{r['id']}: {r['message']}")
    ]


def node_id(checkout: Path, test_id: str) -> str:
    """``integration.nkilib.core.qkv.test_qkv_cte.TestX::test_y[p]`` -> the pytest node id of that test."""
    dotted, _, name = test_id.partition("::")
    if not dotted:  # a file that failed to collect: "::integration.nkilib.core.qkv.test_qkv_tkg"
        return str(checkout / "test" / Path(*name.split(".")).with_suffix(".py"))
    parts = dotted.split(".")
    module, cls = (parts[:-1], parts[-1]) if parts[-1][:1].isupper() else (parts, "")
    path = checkout / "test" / Path(*module).with_suffix(".py")
    return f"{path}::{cls}::{name}" if cls else f"{path}::{name}"


def suite_node_id(checkout: Path, test_id: str) -> str:
    """The node id pytest gives the test in the suite: relative to ``test/``, where the suite's pytest.ini makes
    the root directory (``--deselect`` matches only that form, not the path of :func:`node_id`)."""
    path, separator, name = node_id(checkout, test_id).partition("::")  # the name as it is ("[a//b]" stays)
    return str(Path(path).relative_to(checkout / "test")) + separator + name


def _interruptible() -> None:
    """In pytest's process: SIGINT interrupts it (pytest then writes the tests finished so far), also when this
    script was started in the background (``nohup ... &``), which makes a shell ignore SIGINT for its children."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


#: pytest's exit code when the run was interrupted (Ctrl-C, SIGINT): its junit file holds the tests finished.
INTERRUPTED = 2
#: pytest's exit code after an internal error, such as pytest-xdist's "Unexpectedly no active workers available"
#: when the last worker was killed for memory while the controller had no test left to give a new one: its junit
#: file holds the tests finished too.
INTERNAL_ERROR = 3
#: The exit codes of a run that stopped before its last test: its record says so, and a re-run keeps the outcomes
#: of the tests it did not reach.
STOPPED = (INTERRUPTED, INTERNAL_ERROR)


def results_path(target: str, everything: bool) -> Path:
    """Where a target's outcomes are kept: the fast subset and the whole suite apart, so that a
    whole-suite run made a few families at a time never mixes with fast-subset results."""
    return RESULTS / f"{target}{'-all' if everything else ''}.json"


def recorded_runs() -> list[Path]:
    """The recorded suite runs, fast subset before whole suite, target by target (other files in
    the results folder, such as the timing benchmark's, are not suite runs)."""
    runs = [p for p in RESULTS.glob("*.json") if p.stem.removesuffix("-all") in ("trn1", "inf2", "trn2", "trn3")]
    return sorted(runs, key=lambda p: (p.stem.removesuffix("-all"), p.stem.endswith("-all")))


def _in_families(family: str, families: list[str]) -> bool:
    return any(family == f or family.endswith("/" + f) for f in families)


#: Free disk space a run starts with at least, by default: the largest tests write several GiB of inputs and
#: outputs each (removed when they end), and a full disk fails the tests that write next.
MIN_FREE_GIB = 20


def write_doc(path: Path = DOC) -> None:
    """Rewrite the conformance document from every recorded target."""
    path.write_text(document([json.loads(p.read_text()) for p in recorded_runs()]))


def disk_room(checkout: Path, min_free_gib: float) -> str | None:
    """Why a run should not start for want of disk space, or None."""
    free = shutil.disk_usage(checkout).free / 2**30
    if free >= min_free_gib:
        return None
    outputs = checkout / "neuron_test_output"
    left = sum(f.stat().st_size for f in outputs.rglob("*") if f.is_file()) / 2**30 if outputs.is_dir() else 0.0
    return (
        f"only {free:.1f} GiB free on the disk of {checkout} (at least {min_free_gib:g} wanted: the largest tests "
        f"write several GiB each, and a full disk fails the tests that write next); {outputs} holds {left:.1f} GiB "
        "of test outputs, left by tests whose worker was killed before pruning them: remove what you do not need, "
        "or pass --min-free-gib 0"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", type=Path, nargs="?", help="an aws-neuron/nki-library checkout")
    parser.add_argument("--all", action="store_true", help="run every test, not only the fast subset")
    parser.add_argument("--target", default="trn2", help="trn1, trn2 or trn3 (comma-separated for several)")
    parser.add_argument("-n", type=int, default=2, help="pytest-xdist workers (0: run in pytest's own process)")
    parser.add_argument(
        "--families",
        default="",
        help=f"comma-separated family directories, e.g. {DEFAULT_FAMILIES!r} ; default: every family",
    )
    parser.add_argument("--timeout", type=int, default=0, help="seconds per test (needs pytest-timeout); 0: none")
    parser.add_argument(
        "--suite-shape-skip",
        action="store_true",
        help=f"leave {RUN_ALL_ENV} unset: the suite then skips its large shapes in simulation mode",
    )
    parser.add_argument(
        "--rerun",
        default="",
        metavar="PATTERN",
        help="with --families: run again only the recorded failures whose 'id: message' matches PATTERN",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="with --families: run only the tests of those families not recorded yet (after an interrupted run)",
    )
    parser.add_argument(
        "--min-free-gib",
        type=float,
        default=MIN_FREE_GIB,
        help=f"refuse to start with less free disk space than this (default {MIN_FREE_GIB}; 0: no check)",
    )
    parser.add_argument(
        "--recover",
        action="store_true",
        help="record the tests finished by runs of --target whose script was stopped (their logs), then the document",
    )
    parser.add_argument("--doc-only", action="store_true", help="rewrite the document from recorded results")
    parser.add_argument("--no-doc", action="store_true", help="print the summary only; leave the document as it is")
    args = parser.parse_args(argv)
    if args.recover:
        for target in args.target.split(","):
            for record in recover(target):
                print_summary(record)
    elif not args.doc_only:
        if args.checkout is None or not (args.checkout / "test" / "integration").is_dir():
            parser.error("give the path of an nki-library checkout (with test/integration)")
        families = [f for f in args.families.split(",") if f]
        if (args.rerun or args.resume) and not families:
            parser.error("--rerun and --resume need --families")
        short = disk_room(args.checkout, args.min_free_gib)
        if short is not None:
            parser.error(short)
        for target in args.target.split(","):
            record = run_suite(
                args.checkout.resolve(),
                target,
                args.n,
                args.all,
                families,
                args.timeout,
                not args.suite_shape_skip,
                args.rerun,
                args.resume,
            )
            print_summary(record)
    if not args.no_doc:
        write_doc()
        print(f"\nwrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
