"""The sanitizer catches each buggy kernel of the corpus at the line marked ``# @<kernel name>``.

Every case names the check that must fire (docs/checks.md); the expected line comes
from the marker in the kernel's source, never from nkisim. Error-severity findings
stop a ``check="strict"`` run with a :class:`~nkisim.CheckError`; warnings are
recorded in the profile and issued as :class:`~nkisim.CheckWarning`.
"""

from __future__ import annotations

import inspect
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import nkisim
from nkisim import CheckError, CheckWarning, KernelError, MemoryKindError

from . import loops, misuse, races, uninitialised

P, F = 128, 64


@dataclass(frozen=True)
class Case:
    module: ModuleType
    kernel: str
    check: str
    severity: str
    inputs: tuple[tuple[int, ...], ...] = ((3 * P, F),)
    target: str = "trn1"

    @property
    def id(self) -> str:
        return self.kernel

    def arrays(self) -> list[np.ndarray]:
        rng = np.random.default_rng(7)
        return [rng.uniform(0.5, 1.5, shape).astype(np.float32) for shape in self.inputs]

    def line(self) -> int:
        source = Path(inspect.getsourcefile(self.module)).read_text().splitlines()
        tag = f"# @{self.kernel}"
        hits = [n for n, text in enumerate(source, start=1) if text.rstrip().endswith(tag)]
        assert len(hits) == 1, f"marker {tag!r} is on {len(hits)} lines"
        return hits[0]

    def where(self) -> str:
        return f"{Path(self.module.__file__).name}:{self.line()}: "


SQUARE = ((P, P), (P, F))
MATMUL_LOOP = ((3 * P, P), (3 * P, F))
TILE = ((P, F),)
CASES = [
    # affine_range: loop-carried dependencies
    Case(loops, "carried_previous_tile", "loop-carried-dependency", "error"),
    Case(loops, "carried_prefix_scan", "loop-carried-dependency", "error", TILE),
    Case(loops, "carried_through_hbm", "loop-carried-dependency", "error"),
    Case(loops, "carried_decay", "loop-carried-dependency", "error"),
    Case(loops, "carried_in_inner_loop", "loop-carried-dependency", "error"),
    Case(loops, "carried_running_max_used", "race", "error"),
    Case(loops, "carried_through_a_python_variable", "loop-carried-dependency", "error"),
    Case(loops, "shifted_in_place", "race", "error", TILE),
    # races that only program order prevents
    Case(races, "hbm_same_rows", "race", "error"),
    Case(races, "hbm_overlapping_windows", "race", "error"),
    Case(races, "hbm_columns_modulo", "race", "error"),
    Case(races, "single_buffer_reused", "race", "error"),
    Case(races, "scalar_overwrites_shared", "race", "error"),
    Case(races, "matmul_over_partial_read", "race", "error", MATMUL_LOOP),
    Case(races, "hbm_first_column_every_iteration", "race", "error"),
    Case(races, "runtime_offset_same_columns", "race", "error"),
    # misuse the documentation calls undefined
    Case(misuse, "start_16_for_32_partitions", "partition-start", "error", TILE),
    Case(misuse, "start_32_for_64_partitions", "partition-start", "error", TILE),
    Case(misuse, "start_1_for_127_partitions", "partition-start", "error", TILE),
    Case(misuse, "start_8_for_8_partitions_dst", "partition-start", "error", TILE),
    Case(misuse, "pattern_five_free_dims", "access-pattern", "error", TILE),
    Case(misuse, "pattern_stride_too_long", "access-pattern", "error", TILE),
    Case(misuse, "pattern_prime_run_too_long", "access-pattern", "error", TILE),
    Case(misuse, "accumulate_onto_memset", "psum-accumulate", "warning", SQUARE),
    Case(misuse, "accumulate_onto_copy", "psum-accumulate", "warning", SQUARE),
    Case(misuse, "accumulate_onto_activation", "psum-accumulate", "warning", SQUARE, target="trn2"),
    Case(misuse, "matmul_across_banks", "psum-bank", "error", ((P, P), (P, 512))),
    Case(misuse, "transpose_across_banks", "psum-bank", "error", ((P, P),)),
    Case(misuse, "matmul_small_across_banks", "psum-bank", "error", SQUARE, target="trn2"),
    Case(misuse, "sin_beyond_pi", "activation-range", "warning", TILE),
    Case(misuse, "log_of_zero", "activation-range", "warning", TILE),
    Case(misuse, "arctan_beyond_half_pi", "activation-range", "warning", TILE, target="trn2"),
    Case(misuse, "int8_saturates", "saturation", "warning", TILE),
    Case(misuse, "nan_to_int32", "saturation", "warning", TILE),
    Case(misuse, "uint8_negative", "saturation", "warning", TILE),
    # uninitialised reads
    Case(uninitialised, "never_loaded", "uninitialized-read", "error", TILE),
    Case(uninitialised, "half_loaded_partitions", "uninitialized-read", "error", TILE),
    Case(uninitialised, "half_loaded_columns", "uninitialized-read", "error", TILE),
    Case(uninitialised, "psum_never_written", "uninitialized-read", "error", TILE),
    Case(uninitialised, "bias_never_written", "uninitialized-read", "error", TILE),
    Case(uninitialised, "matmul_moving_half_written", "uninitialized-read", "error", SQUARE),
    Case(uninitialised, "partly_copied_operand", "uninitialized-read", "error", TILE, target="trn3"),
    Case(uninitialised, "used_before_load_in_loop", "uninitialized-read", "error"),
    Case(uninitialised, "reduce_over_unwritten_tail", "uninitialized-read", "error", TILE),
]


def _kernel(case: Case):
    return getattr(case.module, case.kernel)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_warn_mode_records_the_finding_at_the_marked_line(case: Case):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profile = nkisim.run(_kernel(case), case.arrays(), target=case.target, check="warn").profile
    found = [d for d in profile.diagnostics if d.check == case.check]
    assert found, f"no {case.check} finding; found {[str(d) for d in profile.diagnostics]}"
    first = found[0]
    assert first.severity == case.severity
    assert first.loc.line == case.line()
    assert first.message.startswith(case.where())
    warned = [w for w in caught if issubclass(w.category, CheckWarning) and f"[{case.check}]" in str(w.message)]
    assert warned and warned[0].lineno == case.line()


@pytest.mark.parametrize("case", [c for c in CASES if c.severity == "error"], ids=lambda c: c.id)
def test_strict_mode_stops_at_the_marked_line(case: Case):
    with pytest.raises(CheckError, match="^" + re.escape(case.where())) as info:
        nkisim.run(_kernel(case), case.arrays(), target=case.target, check="strict")
    assert info.value.check == case.check


@pytest.mark.parametrize("case", [c for c in CASES if c.severity == "warning"], ids=lambda c: c.id)
def test_strict_mode_runs_through_a_warning(case: Case):
    with pytest.warns(CheckWarning, match=re.escape(f"[{case.check}]")):
        result = nkisim.run(_kernel(case), case.arrays(), target=case.target, check="strict")
    assert [d.check for d in result.profile.diagnostics].count(case.check) == 1


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_off_reports_nothing(case: Case):
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckWarning)
        profile = nkisim.run(_kernel(case), case.arrays(), target=case.target, check="off").profile
    assert profile.diagnostics == ()


def test_a_rule_every_generation_enforces_is_an_error_whatever_the_check_mode():
    a, b = (np.ones(s, np.float32) for s in SQUARE)
    line = Case(misuse, "both_inputs_in_psum", "", "").where()
    for mode in ("off", "warn", "strict"):
        with pytest.raises(MemoryKindError, match="^" + re.escape(line) + ".*must not both be in PSUM"):
            nkisim.run(misuse.both_inputs_in_psum, [a, b], check=mode)


def test_the_corpus_has_at_least_three_kernels_for_each_class():
    per_module = {m.__name__: sum(c.module is m for c in CASES) for m in (loops, races, misuse, uninitialised)}
    assert min(per_module.values()) >= 3, per_module
    assert len(CASES) + 1 >= 40
    assert issubclass(CheckError, KernelError)
