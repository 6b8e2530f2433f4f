"""The conformance document (docs/nkilib-conformance.md) and the printed summaries of nki-library suite runs.

Pure functions of the recorded results that ``nkilib_suite.py`` keeps: per-family tables, skips by reason,
the triage of failures (:mod:`nkilib_triage`), pass rates with and without the suite's own failures, and the
expected time of a whole run.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from nkilib_triage import skip_reason, triage

OUTCOMES = ("passed", "failed", "error", "skipped")

#: Tests of the whole suite (``--all``: ``test/integration/nkilib``) per target, as ``pytest --collect-only
#: --platform-target T`` counts them at nki-library commit d2ad3a5 (trn2: 8,998 less the 593 the suite deselects
#: for that platform; five files fail to collect on both, each recorded as one error), for the share of the suite
#: recorded and the expected time of a whole run.
SUITE_TESTS = {"trn2": 8_405, "trn3": 8_996}


def expected_time(runs: list[dict], tests: int, target: str) -> str:
    """The whole suite's expected wall time on ``target`` at the rate of the family runs so far (re-runs left
    out); a target whose count is not known is given the largest."""
    wall = sum(run["wall_s"] for run in runs if "tests" not in run)
    rate = wall / max(tests, 1)
    whole = SUITE_TESTS.get(target, max(SUITE_TESTS.values()))
    hours = round(rate * whole / 3600)
    return (
        f"At the {rate:.1f} s of wall time per test of these runs, the {whole:,} tests of the whole suite "
        f"take about {hours} hour{'' if hours == 1 else 's'} on {target} with `-n 2` on 2 cores (skipped tests "
        "included; a lower bound while the families not run yet, which hold the largest MoE and transformer "
        "tests, are left out)."
    )


def crash_lines(runs: list[dict]) -> list[str]:
    """What the kernel's log said of the worker crashes of ``runs`` (those that could read it), for the doc."""
    counted = [run for run in runs if "oom_kills" in run]
    if not counted:
        return []
    crashes, kills = sum(run["crashes"] for run in counted), sum(run["oom_kills"] for run in counted)
    return [
        f"Worker crashes in the {len(counted)} run{'' if len(counted) == 1 else 's'} that read the kernel's log: "
        f"{crashes}; out-of-memory kills in that log while they ran: {kills} (any process's).",
        "",
    ]


def family_seconds(rows: list[dict]) -> dict[str, float]:
    """Summed test durations per family (both workers' time), for families whose rows record it."""
    totals: dict[str, float] = defaultdict(float)
    timed = {row["family"] for row in rows if "seconds" in row}
    for row in rows:
        if row["family"] in timed:
            totals[row["family"]] += row.get("seconds", 0.0)
    return {family: round(value, 1) for family, value in totals.items()}


def counts(rows: list[dict[str, str]]) -> dict[str, Counter]:
    table: dict[str, Counter] = defaultdict(Counter)
    for row in rows:
        table[row["family"]][row["outcome"]] += 1
    return dict(sorted(table.items()))


def print_summary(record: dict) -> None:
    table = counts(record["tests"])
    print(f"\n{record['target']} ({record['subset']}), wall {record['wall_s']} s")
    print(f"{'family':32} " + " ".join(f"{o:>7}" for o in OUTCOMES))
    total: Counter = Counter()
    for family, c in table.items():
        total.update(c)
        print(f"{family:32} " + " ".join(f"{c[o]:7d}" for o in OUTCOMES))
    print(f"{'total':32} " + " ".join(f"{total[o]:7d}" for o in OUTCOMES))
    skips = skip_counts(record["tests"])
    if skips:
        print("\nskipped, by reason:")
        for reason, n in skips.most_common():
            print(f"{n:7d}  {reason}")


def skip_counts(rows: list[dict[str, str]]) -> Counter:
    """Skipped tests per reason (:func:`skip_reason`)."""
    return Counter(skip_reason(row) for row in rows if row["outcome"] == "skipped")


def _rate(c: Counter) -> str:
    """passed / (passed + failed + error), rounded down to a tenth of a per cent (94.96% must not read as 95%)."""
    ran = c["passed"] + c["failed"] + c["error"]
    return f"{1000 * c['passed'] // ran / 10:.1f}%" if ran else "-"


def _run_text(run: dict) -> str:
    """One family run of a whole-suite record: its families, wall time and what kind of run it was."""
    notes = [f"{run['wall_s']} s"]
    if run.get("workers", 2) != 2:  # runs recorded before the count was kept used -n 2
        notes.append(f"`-n {run['workers']}`")
    if "interrupted_after" in run:
        notes.append(f"interrupted after {run['interrupted_after']} tests")
    if "tests" in run:
        how = f"with {run['timeout']} s per test" if run.get("timeout") else "after a fix"
        notes.append(f"a re-run of {run['tests']} recorded failures {how}")
        if run.get("not_collected"):
            notes.append(f"{run['not_collected']} of them not collected again (unseeded sweeps), their outcome kept")
    if "resumed_after" in run:
        notes.append(f"resumed after the {run['resumed_after']} tests recorded")
    return f"{', '.join(run['families'])} ({', '.join(notes)})"


VERDICTS = ("suite", "memory", "disk", "timeout", "unmodelled", "nkisim", "untriaged")


def verdict_counts(rows: list[dict[str, str]]) -> Counter:
    """How many of ``rows``' failures and errors each verdict of ``nkilib_triage.TRIAGE`` holds (untriaged too)."""
    return Counter(triage(row)[0] for row in rows if row["outcome"] in ("failed", "error"))


def summary_lines(records: list[dict]) -> list[str]:
    """The summary section: a row per record with the tests it holds, its totals, its pass rate, the rate
    without the failures triaged as the suite's own (the checkout's defects and golden differences, which fail
    on any runtime), and the count of each verdict."""
    out = [
        "## Summary",
        "",
        "Recorded: the tests a record holds, skipped ones included (a whole-suite record holds the families run",
        "so far, of the suite's tests). Without \"suite\": the pass rate with the failures triaged as the suite's",
        "own (below) counted neither as passed nor as run.",
        "",
        '| target | subset | recorded | passed | failed + errors | pass rate | without "suite" | '
        + " | ".join(VERDICTS)
        + " |",
        "|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(VERDICTS),
    ]
    for record in records:
        rows = record["tests"]
        outcomes = Counter(row["outcome"] for row in rows)
        verdicts = verdict_counts(rows)
        assert set(verdicts) <= set(VERDICTS), f"a verdict the summary has no column for: {set(verdicts)}"
        failed = outcomes["failed"] + outcomes["error"]
        without_suite = Counter(passed=outcomes["passed"], failed=failed - verdicts["suite"])
        whole = SUITE_TESTS.get(record["target"]) if record["subset"] == "all" else None
        recorded = f"{len(rows):,}" + ("" if record["subset"] != "all" else f" of {whole:,}" if whole else " of ?")
        cells = [
            record["target"],
            record["subset"],
            recorded,
            f"{outcomes['passed']:,}",
            f"{failed:,}",
            _rate(outcomes),
            _rate(without_suite),
            *(f"{verdicts[v]:,}" for v in VERDICTS),
        ]
        out.append("| " + " | ".join(cells) + " |")
    return [*out, ""]


def document(records: list[dict]) -> str:
    """The conformance document of ``records`` (each target's recorded results), as Markdown."""
    out = [
        "# nkisim on AWS's NKI kernel library test suite",
        "",
        "Generated by `python benchmarks/nkilib_suite.py PATH_TO_NKI_LIBRARY [--target T]` from the suite's",
        "`test/integration` in simulation mode (`--test-mode simulation`, fast subset `-m fast` unless noted),",
        "with `-p nkisim.compat.nkilib` standing in for NkiCpuSimulator, `neuron_dtypes` and the missing",
        "harness modules. Skipped tests are the suite's own skips (its large-shape simulation skip,",
        "unsupported platforms), plus the suite's `trace_only` tests (83, in core/utils' TensorView tests): their",
        "marker forces the NKI compiler's tracer, which a simulation run does not have, so the plugin skips them.",
        "Pass rate = passed / (passed + failed + error). Runs used `--timeout 150` (pytest-timeout) per test and",
        "`--nkisim-prune-all-artifacts`. Test time is the sum of the family's test durations over both workers",
        "(pytest's own timing, including the suite's reference computation); `-` where a run predates it.",
        "A whole-suite run (`--all`) is recorded family by family as it is made; the families listed under its",
        "heading are those run so far. core/rmsnorm's `test_rmsnorm_row_quant_sweep` draws its sequence lengths,",
        "hidden sizes and bounds with Python's unseeded `random` when its module is imported",
        "(test_rmsnorm_quant.py:390-392 at nki-library commit d2ad3a5), so each collection names other tests: a",
        "resumed run runs that sweep's new draws, and a record keeps every draw it ran.",
        "",
        "The fast-subset runs of trn1, trn2 and trn3 of 2026-11-22, whose per-test records were not kept, are in",
        "[nkilib-conformance-2026-11-22.md](nkilib-conformance-2026-11-22.md).",
        "",
        *summary_lines(records),
    ]
    for record in records:
        table = counts(record["tests"])
        total: Counter = Counter()
        shapes = {True: ", large shapes included", False: ", the suite's large-shape skip on"}.get(
            record.get("run_all"), ""
        )
        out += [f"## {record['target']} ({record['subset']} subset{shapes})", ""]
        scope = ", ".join(record["families"]) if record.get("families") else "every family"
        commit = f" at nki-library commit {record['commit']}" if record.get("commit") else ""
        reruns = record.get("reruns", [])
        if record["subset"] == "all" and record.get("families"):  # made a few families at a time
            runs = [{"families": record["families"], "wall_s": record["wall_s"]}, *reruns]
            made = "; ".join(_run_text(run) for run in runs)
            out += [f"Run family by family (2 cores, `-n 2` unless noted, wall time){commit}: {made}.", ""]
            out += [expected_time(runs, len(record["tests"]), record["target"]), ""]
            reruns = []
        else:
            how = f"2 cores, `-n {record.get('workers', 2)}`" + (", interrupted" if record.get("interrupted") else "")
            out += [f"Wall time ({how}): {record['wall_s']} s for {scope}{commit}.", ""]
        for rerun in reruns:
            out += [f"Re-run after fixes: {', '.join(rerun['families'])} in {rerun['wall_s']} s.", ""]
        out += crash_lines([record, *record.get("reruns", [])])
        seconds = family_seconds(record["tests"])
        out += [
            "| family | passed | failed | error | skipped | pass rate | test time (s) |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for family, c in table.items():
            total.update(c)
            out.append(
                f"| {family} | {c['passed']} | {c['failed']} | {c['error']} | {c['skipped']} | {_rate(c)} | "
                f"{seconds.get(family, '-')} |"
            )
        out.append(
            f"| **total** | {total['passed']} | {total['failed']} | {total['error']} | {total['skipped']} | "
            f"{_rate(total)} | {round(sum(v for v in seconds.values()), 1) if seconds else '-'} |"
        )
        out.append("")
        skips = skip_counts(record["tests"])
        if skips:
            out += ["Skipped, by reason:", "", "| reason | tests |", "|---|---:|"]
            out += [f"| {reason.replace('|', '/')} | {n} |" for reason, n in skips.most_common()]
            out.append("")
    out += [
        "## Triage",
        "",
        "Verdicts: **nkisim** (nkisim is wrong), **unmodelled** (the kernel relies on something nkisim does",
        "not model yet), **suite** (the test or its reference is broken), **timeout** (slower than the",
        "per-test limit), **memory** (the machine ran out of memory), **disk** (the machine's disk was full),",
        "**untriaged** (not yet diagnosed; the message is shown).",
        "",
    ]
    for record in records:
        groups: dict[tuple[str, str], list[str]] = defaultdict(list)
        for row in record["tests"]:
            if row["outcome"] in ("failed", "error"):
                verdict, why = triage(row)
                groups[verdict, why].append(row["id"].split("::")[-1])
        if not groups:
            continue
        out += [f"### {record['target']} ({record['subset']} subset)", ""]
        for (verdict, why), ids in sorted(groups.items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
            shown = ", ".join(f"`{i}`" for i in ids[:4]) + (f" and {len(ids) - 4} more" if len(ids) > 4 else "")
            out.append(f"- **{verdict}** ({len(ids)}): {why.replace('|', '/')} — {shown}")
        out.append("")
    return "\n".join(out)
