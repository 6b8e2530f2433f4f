"""Run AWS's NKI kernel library test suite (aws-neuron/nki-library) in simulation mode on nkisim.

::

    cd nki-library
    PYTHONPATH=src pytest -p nkisim.compat.nkilib test/integration --test-mode simulation -m fast

The suite's simulation mode expects a package ``nki_cpu_simulator`` whose
``nki`` tree it installs as ``nki``, and calls
``nki.cpu_simulate(kernel)[lnc](**inputs)`` with ``NKI_NC_VERSION`` naming the
NeuronCore generation. Its helpers import ``neuron_dtypes`` and
``neuronxcc.nki.typing``. This plugin, active only when loaded with
``-p nkisim.compat.nkilib``, provides all of them from nkisim:

* ``nki`` (through :func:`nkisim.install_nki_alias`) and
  ``nki_cpu_simulator.nki.*`` are the *same* module objects (nkisim's ``nki``,
  ``nki.language``, ``nki.isa``, ``nki.isa.constants``, ``nki.typing``), so an
  enum reached by either name is one object;
* ``nki.cpu_simulate``: :func:`cpu_simulate`;
* ``neuron_dtypes``, ``neuronxcc.nki.typing`` and
  ``neuronxcc.starfish.support.dtype``: :mod:`nkisim.compat.nkilib_shims`;
* ``test.utils.perf_analysis_private`` and ``test.utils.scripts.remote_lock_scripts``,
  harness modules the public suite imports but does not ship (hardware-only; they
  are served only when the suite has no such file);
* a work-around for the suite's ``Orchestrator._compiled_kernel`` being read
  before it is ever set in simulation mode (a class default of ``None``);
* collective tests (``InferenceArgs(collective_ranks=N)``) run on N simulated ranks,
  each rank's outputs written where the suite's validator reads them
  (:mod:`nkisim.compat.nkilib_ranks`);
* ``--nkisim-prune-artifacts``: delete each passing test's output directory (the
  suite writes every input, golden and output to disk, tens of GB per run);
  ``--nkisim-prune-all-artifacts`` deletes every test's, failed or timed out too (a
  whole-suite run keeps several GB per failing large configuration otherwise).

It never shadows a real installation: if ``nki``, ``nki_cpu_simulator``,
``neuron_dtypes`` or ``neuronxcc`` is importable, it refuses with a usage error.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import shutil
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from nkisim.compat import alias, nkilib_shims
from nkisim.compat.nkilib_ranks import patch_collective_inference
from nkisim.frontend.simulate import Simulated, simulate
from nkisim.memory.dtypes import NKI_DTYPES

#: Packages the plugin provides and therefore refuses to shadow when really installed.
PROVIDED_ROOTS = ("nki_cpu_simulator", "neuron_dtypes", "neuronxcc")
#: ``NKI_NC_VERSION`` (a ``nisa.nc_version`` name) -> nkisim target.
TARGET_BY_NC_VERSION = {"gen2": "trn1", "gen3": "trn2", "gen4": "trn3"}
NC_VERSION_ENV_VAR = "NKI_NC_VERSION"

#: Names served as nkisim's own ``nki`` modules (through the ``nki`` alias).
_NKI_ALIASES = {
    "nki_cpu_simulator.nki": "nki",
    "nki_cpu_simulator.nki.language": "nki.language",
    "nki_cpu_simulator.nki.isa": "nki.isa",
    "nki_cpu_simulator.nki.collectives": "nki.collectives",
    "nki_cpu_simulator.nki.isa.constants": "nki.isa.constants",
    "nki_cpu_simulator.nki.typing": "nki.typing",
    "neuronxcc.nki.typing": "nki.typing",
}
#: Harness modules the public suite imports but does not ship.
_HARNESS = ("test.utils.perf_analysis_private", "test.utils.scripts", "test.utils.scripts.remote_lock_scripts")
_PACKAGES = {
    "nki_cpu_simulator",
    "nki_cpu_simulator.nki",
    "nki_cpu_simulator.nki.language",
    "nki_cpu_simulator.nki.isa",
    "neuronxcc",
    "neuronxcc.nki",
    "neuronxcc.starfish",
    "neuronxcc.starfish.support",
    "test.utils.scripts",
}


class CompatError(ImportError):
    """The plugin cannot be activated (a real package would be shadowed)."""


# -- nki.cpu_simulate -------------------------------------------------------------------


class CpuSimulated:
    """``nki.cpu_simulate(kernel)``: call it, or ``[lnc]`` then call it, with the kernel's arguments.

    The target follows ``NKI_NC_VERSION`` at call time (gen2 trn1, gen3 trn2,
    gen4 trn3); without it, nkisim's usual default applies.
    """

    def __init__(self, kernel: Any, lnc: int | None = None) -> None:
        self.kernel = kernel
        self.lnc = lnc

    def __getitem__(self, lnc: Any) -> CpuSimulated:
        return CpuSimulated(self.kernel, lnc)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        runner: Simulated = simulate(self.kernel, target=target_from_env())
        if self.lnc is not None:
            runner = runner[self.lnc]
        return runner(*args, **kwargs)


def cpu_simulate(kernel: Any) -> CpuSimulated:
    """NkiCpuSimulator's entry point, run by nkisim: ``nki.cpu_simulate(kernel)[lnc](**inputs)``."""
    return CpuSimulated(kernel)


def target_from_env() -> str | None:
    """The nkisim target named by ``NKI_NC_VERSION`` (``gen3`` -> ``trn2``), or None when unset."""
    value = os.environ.get(NC_VERSION_ENV_VAR)
    if not value:
        return None
    key = value.rsplit(".", 1)[-1].lower()
    if key not in TARGET_BY_NC_VERSION:
        raise ValueError(f"{NC_VERSION_ENV_VAR}={value!r}: expected one of {', '.join(TARGET_BY_NC_VERSION)}")
    return TARGET_BY_NC_VERSION[key]


# -- modules made here ------------------------------------------------------------------

_MADE: dict[str, types.ModuleType] = {}


def _module(name: str, doc: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name, doc)
    module.__dict__.update(attrs)
    return module


def _make(name: str) -> types.ModuleType:
    """The module served for ``name`` (made once, so each name is one object for the session)."""
    if name in _NKI_ALIASES:
        return importlib.import_module(_NKI_ALIASES[name])
    if name in _MADE:
        return _MADE[name]
    import nkisim.nki.language as nl
    from nkisim.memory import Tensor

    shims = {n: getattr(nkilib_shims, n) for n in nkilib_shims.NEURON_DTYPES_API}
    made = {
        "nki_cpu_simulator": lambda: _module(name, "NkiCpuSimulator's package, served by nkisim."),
        "nki_cpu_simulator.nki.language.dtypes": lambda: _module(
            name, "NKI data types (nkisim's).", **{n: getattr(nl, n) for n in NKI_DTYPES}
        ),
        "nki_cpu_simulator.nki.compiler": lambda: _module(name, "nki.compiler: nothing is compiled under nkisim."),
        "nki_cpu_simulator.nki.tensor": lambda: _module(name, "nki.tensor (nkisim's Tensor).", Tensor=Tensor),
        "nki_cpu_simulator.nki.builtin": lambda: _module(name, "NKI builtins (none are needed under nkisim)."),
        "neuron_dtypes": lambda: _module(name, "neuron_dtypes, implemented by nkisim.compat.nkilib_shims.", **shims),
        "neuronxcc": lambda: _module(name, "Stand-in package for the suite's neuronxcc imports (nkisim)."),
        "neuronxcc.nki": lambda: _module(name, "Stand-in for neuronxcc.nki (nkisim)."),
        "neuronxcc.starfish": lambda: _module(name, "Stand-in (nkisim)."),
        "neuronxcc.starfish.support": lambda: _module(name, "Stand-in (nkisim)."),
        "neuronxcc.starfish.support.dtype": lambda: _module(
            name, "static_cast, as neuron_dtypes'.", static_cast=nkilib_shims.static_cast
        ),
        "test.utils.perf_analysis_private": lambda: _module(
            name, "Hardware perf analysis (not available).", analyze_trace=nkilib_shims.analyze_trace
        ),
        "test.utils.scripts": lambda: _module(name, "Remote host scripts (hardware only)."),
        "test.utils.scripts.remote_lock_scripts": lambda: _module(
            name,
            "Core-lock results (hardware only).",
            LockStatus=nkilib_shims.LockStatus,
            LockResult=nkilib_shims.LockResult,
        ),
    }
    _MADE[name] = made[name]()
    return _MADE[name]


class _Finder(importlib.abc.MetaPathFinder):
    """Serves a fixed set of module names; ``None`` for anything else."""

    def __init__(self, names: set[str] | tuple[str, ...]) -> None:
        self.names = set(names)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        module = _make(fullname)
        is_package = fullname in _PACKAGES or hasattr(module, "__path__")
        if is_package and not hasattr(module, "__path__"):
            module.__path__ = []  # lets submodules of an aliased nkisim module be imported through it
        return importlib.util.spec_from_loader(fullname, alias._AliasLoader(module), is_package=is_package)


_SIM_NAMES = (
    *_NKI_ALIASES,
    "nki_cpu_simulator",
    "nki_cpu_simulator.nki.language.dtypes",
    "nki_cpu_simulator.nki.compiler",
    "nki_cpu_simulator.nki.tensor",
    "nki_cpu_simulator.nki.builtin",
    "neuron_dtypes",
    "neuronxcc",
    "neuronxcc.nki",
    "neuronxcc.starfish",
    "neuronxcc.starfish.support",
    "neuronxcc.starfish.support.dtype",
)
_FRONT: _Finder | None = None
_BACK: _Finder | None = None
_OWN_ALIAS = False


def refuse_if_installed() -> None:
    """Raise :class:`CompatError` if a real package of a name this plugin provides is importable."""
    for root in PROVIDED_ROOTS:
        if root in sys.modules and not is_active():
            raise CompatError(f"refusing to provide {root}: a module of that name is already imported")
        spec = importlib.util.find_spec(root) if root not in sys.modules else None
        if spec is not None:
            where = spec.origin or ", ".join(spec.submodule_search_locations or []) or "?"
            raise CompatError(
                f"refusing to shadow the installed {root} ({where}) with nkisim's stand-in; "
                "run the suite where it is not importable, or without -p nkisim.compat.nkilib"
            )


def activate() -> None:
    """Install the module aliases and shims (idempotent). Raises :class:`CompatError` when refused."""
    global _FRONT, _BACK, _OWN_ALIAS
    if _FRONT is not None:
        return
    refuse_if_installed()
    if not alias.is_installed():
        try:
            alias.install_nki_alias()
        except alias.NkiAliasError as exc:
            raise CompatError(str(exc)) from None
        _OWN_ALIAS = True
    _FRONT = _Finder(_SIM_NAMES)
    _BACK = _Finder(_HARNESS)  # last: only when the suite has no file of that name
    sys.meta_path.insert(0, _FRONT)
    sys.meta_path.append(_BACK)
    importlib.import_module("nki").cpu_simulate = cpu_simulate  # type: ignore[attr-defined]


def deactivate() -> None:
    """Undo :func:`activate`: remove the finders, the modules they served and ``nki.cpu_simulate``."""
    global _FRONT, _BACK, _OWN_ALIAS
    if _FRONT is None:
        return
    for finder in (_FRONT, _BACK):
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
    for name in (*_SIM_NAMES, *_HARNESS):
        if name in sys.modules and (name in _MADE or name in _NKI_ALIASES):
            del sys.modules[name]
    _MADE.clear()
    nki = sys.modules.get("nki")
    if nki is not None and getattr(nki, "cpu_simulate", None) is cpu_simulate:
        del nki.cpu_simulate
    if getattr(builtins, "builtin", None) is not None and getattr(builtins.builtin, "__name__", "").startswith(
        "nki_cpu_simulator"
    ):
        del builtins.builtin  # set by the suite's simulation setup
    if _OWN_ALIAS:
        alias.uninstall_nki_alias()
        for name in ("nki.compiler", "nki.dtype", "nki.tensor"):  # the suite's own aliases
            sys.modules.pop(name, None)
    _FRONT = _BACK = None
    _OWN_ALIAS = False


def is_active() -> bool:
    """True while the plugin's modules are installed."""
    return _FRONT is not None


def patch_orchestrator() -> int:
    """Give the suite's ``Orchestrator`` a ``_compiled_kernel = None`` default; returns how many classes were patched.

    In simulation mode the suite skips compilation, which is where the attribute is
    first set, and then reads it after inference, so every simulated test would fail
    with AttributeError.
    """
    patched = 0
    for name, module in list(sys.modules.items()):
        if not name.endswith("utils.test_orchestrator"):
            continue
        cls = getattr(module, "Orchestrator", None)
        if isinstance(cls, type) and "_compiled_kernel" not in vars(cls):
            cls._compiled_kernel = None  # type: ignore[attr-defined]
            patched += 1
    return patched


# -- pytest hooks -----------------------------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Install before the suite's conftest imports ``nki``."""
    try:
        activate()
    except CompatError as exc:
        raise pytest.UsageError(f"nkisim.compat.nkilib: {exc}") from None
    early_config.add_cleanup(deactivate)


#: Why the suite's ``trace_only`` tests are skipped: their marker overrides ``--test-mode simulation``.
TRACE_ONLY_REASON = "trace_only test: runs NKI's compiler tracer (nki.compiler.frontend), not a simulation"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason=TRACE_ONLY_REASON)
    for item in items:
        if item.get_closest_marker("trace_only") is not None:
            item.add_marker(skip)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--nkisim-prune-artifacts",
        action="store_true",
        help="delete each passing test's output directory (the suite writes every input and output to disk)",
    )
    parser.addoption(
        "--nkisim-prune-all-artifacts",
        action="store_true",
        help="delete every test's output directory, failed and timed-out ones too",
    )


_PASSED = pytest.StashKey[bool]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    """Remember whether the test passed (for ``--nkisim-prune-artifacts``), and report a failure whose traceback
    pytest cannot format as a plain failure.

    On Python 3.11 an exception raised into a frame at an instruction without a line number (pytest-timeout's
    signal, in the suite's long tests) has a traceback entry whose ``tb_lineno`` is None, and pytest's report
    then raises TypeError: in a pytest-xdist worker that is an internal error, which ends the whole run.
    """
    outcome = yield
    try:
        report = outcome.get_result()
    except TypeError as exc:
        if call.excinfo is None:
            raise
        failure = f"{call.excinfo.typename}: {call.excinfo.value} (pytest could not format its traceback: {exc})"
        report = pytest.TestReport(
            item.nodeid, item.location, dict.fromkeys(item.keywords, 1), "failed", failure, call.when,
            duration=call.duration, start=call.start, stop=call.stop,
        )  # fmt: skip
        outcome.force_result(report)
    if report.when == "call":
        item.stash[_PASSED] = report.passed


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Any:
    yield
    options = item.config.option
    if getattr(options, "nkisim_prune_all_artifacts", False) or (
        getattr(options, "nkisim_prune_artifacts", False) and item.stash.get(_PASSED, False)
    ):
        _remove_test_output(item.nodeid, item.config)


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched: Any) -> None:
    """A test whose pytest-xdist worker died (the OOM killer) is never torn down: with
    ``--nkisim-prune-all-artifacts`` remove its outputs here, in the controller, as teardown would have. The
    largest tests write several GiB each, and a long run's crashes filled a disk."""
    config = sched.config
    if getattr(config.option, "nkisim_prune_all_artifacts", False):
        _remove_test_output(crashitem, config)


def _remove_test_output(nodeid: str, config: pytest.Config) -> None:
    """Remove a test's output directory, named by the suite's own helper (which reads PYTEST_CURRENT_TEST)."""
    try:
        from test.utils.feature_flag_helper import (  # type: ignore[import-not-found]
            construct_test_output_directory_name,
            resolve_base_output_directory,
        )
    except ImportError:
        return
    saved = os.environ.get("PYTEST_CURRENT_TEST")
    os.environ["PYTEST_CURRENT_TEST"] = f"{nodeid} (teardown)"
    try:
        name = construct_test_output_directory_name()
    finally:
        if saved is None:
            del os.environ["PYTEST_CURRENT_TEST"]
        else:
            os.environ["PYTEST_CURRENT_TEST"] = saved
    shutil.rmtree(Path(resolve_base_output_directory(config)) / name, ignore_errors=True)


def pytest_sessionstart(session: pytest.Session) -> None:
    patch_orchestrator()
    patch_collective_inference(target_from_env)


def pytest_collection_finish(session: pytest.Session) -> None:
    patch_orchestrator()
    patch_collective_inference(target_from_env)


def pytest_report_header(config: pytest.Config) -> str | None:
    return "nkisim.compat.nkilib: nki_cpu_simulator, neuron_dtypes and nki are nkisim" if is_active() else None


__all__ = [
    "CompatError",
    "CpuSimulated",
    "activate",
    "cpu_simulate",
    "deactivate",
    "is_active",
    "patch_orchestrator",
    "refuse_if_installed",
    "target_from_env",
]
