"""Run unmodified kernel files that ``import nki``: an opt-in import alias to nkisim.

::

    import nkisim
    nkisim.install_nki_alias()
    import nki.language as nl          # nkisim.nki.language
    ...
    nkisim.uninstall_nki_alias()

The alias is a finder at the front of ``sys.meta_path`` that maps ``nki``,
``nki.language``, ``nki.isa``, ``nki.collectives``, ``nki.isa.constants`` (NKI's enums) and
``nki.typing`` to nkisim's modules, and the legacy API's ``neuronxcc.nki``,
``.language``, ``.isa``, ``.isa.constants``, ``.typing`` and ``.compiler`` to ``nkisim.nki.legacy``
(docs/legacy-api.md). Both APIs can be imported in one process. It is never installed implicitly, and it
refuses to shadow a real NKI installation: if ``import nki`` would find an
installed package, :func:`install_nki_alias` raises :class:`NkiAliasError`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

#: ``nki`` module names and the nkisim modules they stand for.
ALIASES: dict[str, str] = {
    "nki": "nkisim.nki",
    "nki.language": "nkisim.nki.language",
    "nki.isa": "nkisim.nki.isa",
    "nki.collectives": "nkisim.nki.collectives",
}
#: The legacy API (``import neuronxcc.nki``, Neuron 2.26 and earlier) and nkisim's modules for it.
LEGACY_ALIASES: dict[str, str] = {
    "neuronxcc.nki": "nkisim.nki.legacy",
    "neuronxcc.nki.language": "nkisim.nki.legacy.language",
    "neuronxcc.nki.isa": "nkisim.nki.legacy.isa",
    "neuronxcc.nki.isa.constants": "nkisim.nki.legacy.isa.constants",
    "neuronxcc.nki.typing": "nkisim.nki.legacy.typing",
    "neuronxcc.nki.compiler": "nkisim.nki.legacy.compiler",
}
#: Stand-ins for the XLA device packages the SDK's PyTorch samples import, aliased only when the real ones are
#: not importable (docs/legacy-api.md).
DEVICE_ALIASES: dict[str, str] = {
    "torch_xla.core.xla_model": "nkisim.compat.xla_cpu",
    "torch_neuronx": "nkisim.compat.xla_cpu",
}
#: Aliased modules made here rather than imported: NKI's enum module and type annotations.
_SYNTHETIC = ("nki.isa.constants", "nki.typing", "neuronxcc", "torch_xla", "torch_xla.core")
#: The device stand-ins this installation provides (the packages that were not importable).
_DEVICE_NAMES: frozenset[str] = frozenset()


class NkiAliasError(ImportError):
    """The ``nki`` alias cannot be installed: a real NKI is importable, or ``nki`` is already imported."""


class _AliasLoader(importlib.abc.Loader):
    """Hands the import system an existing module, keeping that module's own ``__spec__``."""

    def __init__(self, module: types.ModuleType) -> None:
        self.module = module
        self.spec = getattr(module, "__spec__", None)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return self.module

    def exec_module(self, module: types.ModuleType) -> None:
        if self.spec is not None:  # the import system set the alias spec on it; nkisim's module keeps its own
            module.__spec__ = self.spec


class _NkiAliasFinder(importlib.abc.MetaPathFinder):
    """Finds ``nki`` and its submodules as nkisim's modules."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in ALIASES:
            module = importlib.import_module(ALIASES[fullname])
        elif fullname in LEGACY_ALIASES:
            module = importlib.import_module(LEGACY_ALIASES[fullname])
        elif fullname in _DEVICE_NAMES:
            module = (
                importlib.import_module(DEVICE_ALIASES[fullname])
                if fullname in DEVICE_ALIASES
                else _synthetic(fullname)
            )
        elif fullname in _SYNTHETIC and not fullname.startswith("torch_xla"):
            module = _synthetic(fullname)
        else:
            return None
        is_package = hasattr(module, "__path__") or fullname in (
            "nki",
            "nki.isa",
            "neuronxcc",
            "neuronxcc.nki",
            "torch_xla",
            "torch_xla.core",
        )
        return importlib.util.spec_from_loader(fullname, _AliasLoader(module), is_package=is_package)


_FINDER: _NkiAliasFinder | None = None


def install_nki_alias(*, xla_device: bool = False) -> None:
    """Make ``import nki`` (and ``nki.language``, ``nki.isa``) import nkisim's NKI modules,
    and ``import neuronxcc.nki`` (``.language``, ``.isa``, ``.isa.constants``, ``.typing``, ``.compiler``)
    its legacy ones.

    With ``xla_device=True``, ``torch_xla.core.xla_model`` and ``torch_neuronx`` become CPU stand-ins
    (:mod:`nkisim.compat.xla_cpu`) when they are not importable, so that PyTorch samples written
    for the XLA device run unmodified. They are off by default: libraries that look for
    ``torch_xla`` would otherwise take it for a real one.

    Calling it again while installed does nothing.

    Raises:
        NkiAliasError: if a real ``nki`` package is importable (the alias never shadows
            one), or a module named ``nki`` that is not nkisim's is already imported.
    """
    global _FINDER, _DEVICE_NAMES
    if _FINDER is not None:
        return
    for top in ("nki", "neuronxcc"):
        _refuse_real(top)
    wanted = ("torch_xla", "torch_neuronx") if xla_device else ()
    missing = {top for top in wanted if top not in sys.modules and not _importable(top)}
    _DEVICE_NAMES = frozenset(
        name for name in (*DEVICE_ALIASES, "torch_xla", "torch_xla.core") if name.split(".")[0] in missing
    )
    _FINDER = _NkiAliasFinder()
    sys.meta_path.insert(0, _FINDER)


def uninstall_nki_alias() -> None:
    """Undo :func:`install_nki_alias`: remove the finder and the ``nki`` modules it provided."""
    global _FINDER
    if _FINDER is None:
        return
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    _FINDER = None
    ours = {*ALIASES.values(), *LEGACY_ALIASES.values(), *DEVICE_ALIASES.values()}
    for name in (*ALIASES, *LEGACY_ALIASES, *_SYNTHETIC, *DEVICE_ALIASES):
        module = sys.modules.get(name)
        if module is not None and (module.__name__ in ours or module is _MADE.get(name)):
            del sys.modules[name]


def _refuse_real(top: str) -> None:
    """Raise :class:`NkiAliasError` when ``top`` is imported already or a real package of that name is importable."""
    loaded = sys.modules.get(top)
    if loaded is not None:
        raise NkiAliasError(
            f"cannot alias {top} to nkisim: a module named {top} is already imported ({_where(loaded)}); "
            f"install the alias before anything imports {top}"
        )
    spec = importlib.util.find_spec(top)
    if spec is not None and spec.origin is not None:  # a namespace directory of that name is no installation
        raise NkiAliasError(
            f"refusing to alias {top} to nkisim: a real NKI is importable from {spec.origin}. "
            f"Use 'import nkisim.nki as nki' in the kernel, or run where that {top} is not on sys.path."
        )


def is_installed() -> bool:
    """True while the alias is installed."""
    return _FINDER is not None


def _where(module: types.ModuleType) -> str:
    return getattr(module, "__file__", None) or repr(module)


# -- modules made here ----------------------------------------------------------------


_MADE: dict[str, types.ModuleType] = {}


def _importable(top: str) -> bool:
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def _synthetic(name: str) -> types.ModuleType:
    if name not in _MADE:
        module = types.ModuleType(name)
        if name.startswith("torch_xla"):
            module.__doc__ = "A stand-in for the XLA device package, as far as kernel samples use it (nkisim: the CPU)."
        elif name == "neuronxcc":
            module.__doc__ = "The Neuron compiler package, as far as kernels import it: neuronxcc.nki (nkisim)."
        elif name == "nki.typing":
            module.__doc__ = "Type annotations for NKI kernel parameters (nkisim: accepted, not checked)."
            from nkisim.nki.legacy.typing import TensorAnnotation

            module.tensor = TensorAnnotation(name="nki.typing.tensor")  # type: ignore[attr-defined]
            module.mutable_tensor = TensorAnnotation(name="nki.typing.mutable_tensor")  # type: ignore[attr-defined]  # an output written in place
        else:
            from nkisim.nki import isa

            module.__doc__ = "NKI's ISA enums (``from nki.isa.constants import dge_mode``)."
            enums = ("dge_mode", "dma_engine", "engine", "matmul_perf_mode", "nc_version", "oob_mode", "reduce_cmd")
            for enum_name in enums:
                setattr(module, enum_name, getattr(isa, enum_name))
        _MADE[name] = module
    return _MADE[name]


__all__ = ["ALIASES", "LEGACY_ALIASES", "NkiAliasError", "install_nki_alias", "is_installed", "uninstall_nki_alias"]
