"""``python -m nkisim bench``: a thin wrapper over benchmarks/bench_core.py (no timings are asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

import nkisim
from nkisim.__main__ import main


def test_bench_is_a_command_with_the_benchmark_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert all(option in text for option in ("--repeat", "--tutorial", "--clock"))


def test_bench_outside_a_checkout_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(nkisim, "__file__", str(tmp_path / "nkisim" / "__init__.py"))
    assert main(["bench"]) == 2
    assert "benchmarks/bench_core.py not found" in capsys.readouterr().err
