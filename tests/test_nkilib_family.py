"""One small nki-library family, end to end, when a checkout is given.

Set ``NKILIB_CHECKOUT`` to an aws-neuron/nki-library checkout (and install the packages
``benchmarks/nkilib_suite.py`` names) to run its cumulative-sum tests on nkisim under the
strict sanitizer; without a checkout the test is skipped with the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT = os.environ.get("NKILIB_CHECKOUT", "")
FAMILY = Path("test/integration/nkilib/core/cumsum")


@pytest.mark.skipif(not CHECKOUT, reason="set NKILIB_CHECKOUT to an nki-library checkout to run its cumsum family")
def test_the_cumsum_family_passes_on_nkisim():
    root = Path(CHECKOUT)
    if not (root / FAMILY).is_dir():
        pytest.fail(f"NKILIB_CHECKOUT={CHECKOUT} has no {FAMILY}")
    env = {**os.environ, "PYTHONPATH": str(root / "src"), "NKISIM_CHECK": "strict"}
    plugin = ["-p", "nkisim.compat.nkilib", "-p", "no:cacheprovider"]
    mode = ["--test-mode", "simulation", "-m", "fast", "--platform-target", "trn2", "-q"]
    cmd = [sys.executable, "-m", "pytest", *plugin, str(FAMILY), *mode, "-W", "error::nkisim.CheckWarning"]
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:]
    assert done.returncode == 0, summary
    assert " passed" in summary and "failed" not in summary, summary
