"""How the sanitizer is chosen and silenced, the iteration orders, and where findings are shown."""

from __future__ import annotations

import subprocess
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import nkisim
import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim import CheckError, CheckWarning

from . import loops, misuse, uninitialised

P, F = 128, 64
RNG = np.random.default_rng(3)


def rows(n: int = 3) -> np.ndarray:
    return RNG.uniform(0.5, 1.5, (n * P, F)).astype(np.float32)


def scaled_rows(a):
    """A correct affine_range kernel: every iteration has its own tiles and rows."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // P):
        t = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[i * P : (i + 1) * P])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=float(i + 1))
        nisa.dma_copy(dst=out[i * P : (i + 1) * P], src=t)
    return out


def summed_in_psum(a, b):
    """Matmuls accumulating into one PSUM tile across affine_range iterations: allowed."""
    out = nl.ndarray((P, F), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((P, F), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(a.shape[0] // P):
        lhs = nl.ndarray((P, P), a.dtype, buffer=nl.sbuf)
        rhs = nl.ndarray((P, F), b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=lhs, src=a[k * P : (k + 1) * P])
        nisa.dma_copy(dst=rhs, src=b[k * P : (k + 1) * P])
        nisa.nc_matmul(dst=acc, stationary=lhs, moving=rhs)
    res = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


# -- iteration orders ------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["in-order", "reversed", "shuffled"])
def test_a_correct_kernel_gives_the_same_outputs_in_any_order(order):
    a = rows(5)
    expected = a * np.repeat(np.arange(1, 6, dtype=np.float32), P)[:, None]
    result = nkisim.run(scaled_rows, [a], check="strict", affine_order=order)
    np.testing.assert_array_equal(result.outputs, expected)
    assert result.profile.diagnostics == ()


@pytest.mark.parametrize("order", ["reversed", "shuffled"])
def test_an_accumulation_gives_the_same_sum_in_any_order(order):
    a = RNG.integers(-3, 4, (4 * P, P)).astype(np.float32)
    b = RNG.integers(-3, 4, (4 * P, F)).astype(np.float32)
    expected = sum(a[k * P : (k + 1) * P].T @ b[k * P : (k + 1) * P] for k in range(4))
    got = nkisim.run(summed_in_psum, [a, b], check="strict", affine_order=order).outputs
    np.testing.assert_array_equal(got, expected)  # small integers: exact in any order


def test_reversing_the_iterations_exposes_a_loop_carried_dependency():
    a = rows(3)
    in_order = nkisim.run(loops.carried_previous_tile, [a], check="off").outputs
    reversed_ = nkisim.run(loops.carried_previous_tile, [a], check="off", affine_order="reversed").outputs
    # in order, block i receives a's block i - 1 (block 0 the zeros written before the loop)
    np.testing.assert_array_equal(in_order[P:], a[:-P])
    assert not np.array_equal(in_order, reversed_)


def test_the_shuffled_order_is_the_same_on_every_run():
    a = rows(6)
    first = nkisim.run(loops.carried_previous_tile, [a], check="off", affine_order="shuffled").outputs
    second = nkisim.run(loops.carried_previous_tile, [a], check="off", affine_order="shuffled").outputs
    np.testing.assert_array_equal(first, second)


def test_an_unknown_order_is_refused():
    with pytest.raises(ValueError, match=r"affine_order must be one of 'in-order', 'reversed', 'shuffled'"):
        nkisim.run(scaled_rows, [rows()], affine_order="random")


# -- choosing the mode ---------------------------------------------------------------------------


def test_the_jit_option_sets_the_mode_and_run_overrides_it():
    strict = nki.jit(uninitialised.never_loaded, check="strict")
    a = rows(1)
    with pytest.raises(CheckError):
        nkisim.run(strict, [a])
    with pytest.warns(CheckWarning, match=r"\[uninitialized-read\]"):
        nkisim.run(strict, [a], check="warn")


def test_the_environment_sets_the_default(monkeypatch):
    a = rows(1)
    monkeypatch.setenv("NKISIM_CHECK", "off")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckWarning)
        assert nkisim.run(uninitialised.never_loaded, [a]).profile.diagnostics == ()
    monkeypatch.setenv("NKISIM_CHECK", "strict")
    with pytest.raises(CheckError):
        nkisim.run(uninitialised.never_loaded, [a])
    monkeypatch.setenv("NKISIM_CHECK", "loud")
    with pytest.raises(ValueError, match=r"NKISIM_CHECK must be one of strict, warn, off, got 'loud'"):
        nkisim.run(uninitialised.never_loaded, [a])


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match=r"check"):
        nkisim.run(scaled_rows, [rows()], check="loud")


# -- silencing -----------------------------------------------------------------------------------


def test_ignore_checks_turns_off_one_check_and_keeps_the_others():
    a = rows(1)
    with nkisim.ignore_checks("uninitialized-read"):
        assert nkisim.run(uninitialised.never_loaded, [a], check="strict").profile.diagnostics == ()
        with pytest.raises(CheckError, match=r"\[trn1\]: src accesses partitions 16..47"):
            nkisim.run(misuse.start_16_for_32_partitions, [a], check="strict")
    with pytest.raises(CheckError):  # back on after the block
        nkisim.run(uninitialised.never_loaded, [a], check="strict")


def test_ignore_checks_is_local_to_its_thread():
    a = rows(1)
    errors: list[BaseException] = []
    inside, release = threading.Event(), threading.Event()

    def ignoring() -> None:
        with nkisim.ignore_checks("uninitialized-read"):
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=ignoring)
    thread.start()
    inside.wait(10)
    try:
        nkisim.run(uninitialised.never_loaded, [a], check="strict")
    except CheckError as exc:
        errors.append(exc)
    finally:
        release.set()
        thread.join()
    assert len(errors) == 1


def test_ignore_checks_names_the_checks_it_knows():
    with (
        pytest.raises(ValueError, match=r"unknown check 'uninitialised'; the checks are uninitialized-read, "),
        nkisim.ignore_checks("uninitialised"),
    ):
        pass


def test_a_warning_is_silenced_by_an_ordinary_warnings_filter():
    a = rows(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=CheckWarning, message=r".*\[saturation\]")
        result = nkisim.run(misuse.int8_saturates, [a], check="warn")
    assert [d.check for d in result.profile.diagnostics] == ["saturation"]


def _pipelined(loop):
    """Each iteration stores the tile the previous one loaded: correct in order, carried between iterations."""

    def kernel(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        prev = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        nisa.memset(dst=prev, value=0.0)
        for i in loop(a.shape[0] // P):
            cur = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=cur, src=prev)
            nisa.dma_copy(dst=prev, src=a[i * P : (i + 1) * P])
            nisa.dma_copy(dst=out[i * P : (i + 1) * P], src=cur)
        return out

    return kernel


@pytest.mark.parametrize("loop", ["range", "static_range", "sequential_range"])
def test_ordered_loops_nl_range_among_them_carry_values_without_a_finding(loop):
    a = rows(4)
    result = nkisim.run(_pipelined(getattr(nl, loop)), [a], check="strict")
    expected = np.concatenate([np.zeros((P, F), np.float32), a[:-P]])  # each block is the one before it
    np.testing.assert_array_equal(result.outputs, expected)
    assert not result.profile.diagnostics


def test_the_same_carried_loop_written_with_affine_range_is_a_finding():
    with pytest.raises(CheckError, match=r"loop-carried dependency"):
        nkisim.run(_pipelined(nl.affine_range), [rows(4)], check="strict")


# -- where findings are shown --------------------------------------------------------------------


def test_a_finding_repeated_in_a_loop_is_kept_once_with_the_first_iterations_and_a_count():
    a = rows(4)
    with pytest.warns(CheckWarning):
        (found,) = nkisim.run(loops.carried_previous_tile, [a], check="warn").profile.diagnostics
    assert found.count == 3  # iterations 1, 2 and 3 each read what the one before wrote
    assert "which iteration 0 " in found.message and "(iteration 1 reads it)" in found.message
    assert str(found).endswith("(3 times) [loop-carried-dependency]")


def test_findings_are_in_the_profile_summary_and_the_html_report(tmp_path: Path):
    with pytest.warns(CheckWarning):
        profile = nkisim.run(misuse.int8_saturates, [rows(1)], check="warn").profile
    assert "sanitizer: 0 errors, 1 warnings" in str(profile)
    page = tmp_path / "report.html"
    profile.to_html(page)
    text = page.read_text()
    assert "sanitizer findings (1)" in text
    assert "misuse.py:" in text and "saturated to int8&#x27;s range [-128, 127]" in text


def test_the_cli_runs_a_kernel_under_strict_and_prints_one_line(tmp_path: Path):
    kernel = tmp_path / "k.py"
    source = Path(uninitialised.__file__).read_text()
    kernel.write_text(source)
    line = next(n for n, text in enumerate(source.splitlines(), 1) if text.endswith("# @never_loaded"))
    np.save(tmp_path / "a.npy", rows(1))
    cmd = [sys.executable, "-m", "nkisim", "run", f"{kernel}:never_loaded", "--inputs", str(tmp_path / "a.npy")]
    done = subprocess.run([*cmd, "--check", "strict"], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    printed = [t for t in done.stderr.splitlines() if t.strip()]
    assert len(printed) == 1, done.stderr
    assert printed[0].startswith(f"error: k.py:{line}: nisa.tensor_tensor [trn1]: data2 reads 8192"), done.stderr
    quiet = subprocess.run(
        [*cmd, "--check", "off", "--affine-order", "reversed"], capture_output=True, text=True, timeout=120
    )
    assert quiet.returncode == 0, quiet.stderr


def test_the_report_table_lists_each_finding_once():
    with pytest.warns(CheckWarning):
        profile = nkisim.run(misuse.int8_saturates, [rows(1)], check="warn").profile
    assert profile.table().count("[saturation]") == 1
