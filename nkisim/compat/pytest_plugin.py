"""A pytest plugin that runs test suites written for NKI (``import nki``) on nkisim.

::

    pytest -p nkisim.compat.pytest_plugin --nki-alias tests/
    pytest -p nkisim.compat.pytest_plugin --nki-alias --nki-target trn2 tests/

``--nki-alias`` (or the ini option ``nki_alias = true``) installs
:func:`nkisim.install_nki_alias` before test modules are collected and removes it
when the session ends. It refuses, as a usage error, when a real NKI is installed.
``--nki-target`` sets ``NEURON_PLATFORM_TARGET_OVERRIDE`` for the session.
Kernel objects named ``test_*`` are not collected as tests.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from nkisim.compat.alias import NkiAliasError, install_nki_alias, is_installed, uninstall_nki_alias
from nkisim.hw.model import TARGET_ENV_VAR


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nkisim", "nkisim: simulate NKI kernels")
    group.addoption(
        "--nki-alias",
        action="store_true",
        default=False,
        help="alias 'import nki' to nkisim for the session (refused if a real NKI is installed)",
    )
    group.addoption("--nki-target", default=None, help="hardware generation (sets NEURON_PLATFORM_TARGET_OVERRIDE)")
    parser.addini("nki_alias", type="bool", default=False, help="alias 'import nki' to nkisim for the session")


def pytest_configure(config: pytest.Config) -> None:
    target = config.getoption("--nki-target")
    if target:
        previous = os.environ.get(TARGET_ENV_VAR)
        os.environ[TARGET_ENV_VAR] = target
        config.add_cleanup(lambda: _restore(previous))
    if not (config.getoption("--nki-alias") or config.getini("nki_alias")) or is_installed():
        return
    try:
        install_nki_alias()
    except NkiAliasError as exc:
        raise pytest.UsageError(f"--nki-alias: {exc}") from None
    config.add_cleanup(uninstall_nki_alias)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: Any, name: str, obj: Any) -> Any:
    """A kernel whose name starts with ``test`` (``@nki.jit def test_add(a)``) is a kernel, not a test."""
    from nkisim.frontend.jit import Kernel
    from nkisim.frontend.legacy_launch import LegacyKernel

    if isinstance(obj, (Kernel, LegacyKernel)):
        return []
    return None


def pytest_report_header(config: pytest.Config) -> Any:
    if is_installed():
        return "nkisim: 'import nki' is aliased to nkisim.nki"
    return None


def _restore(previous: str | None) -> None:
    if previous is None:
        os.environ.pop(TARGET_ENV_VAR, None)
    else:
        os.environ[TARGET_ENV_VAR] = previous
