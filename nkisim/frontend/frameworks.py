"""Arrays of other frameworks at the kernel boundary: which framework a call uses, and its adapter.

A kernel called with torch tensors or JAX arrays is run through that framework's
adapter module, :mod:`nkisim.torch` or :mod:`nkisim.jax`. Each provides ``call(kernel,
*args, **kwargs)``, ``to_numpy(value)``, ``from_numpy(array)`` and ``write_back(passed,
values)``. They sit above the front end and are imported by name when first needed, so
the front end neither imports them nor needs torch or JAX installed.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import numpy as np

#: The adapter module of each framework.
ADAPTERS = {"torch": "nkisim.torch", "jax": "nkisim.jax"}


def framework_of(values: tuple[Any, ...]) -> str:
    """``torch`` or ``jax`` when an argument (or an item of a tuple or list argument) is one of
    their arrays, else ``numpy``; neither framework is imported."""
    for value in values:
        for item in value if isinstance(value, (tuple, list)) else (value,):
            framework = _framework_of_type(item)
            if framework != "numpy":
                return framework
    return "numpy"


def _framework_of_type(value: Any) -> str:
    module = type(value).__module__
    if module.startswith("torch"):
        return "torch"
    if module.startswith(("jax", "jaxlib")):
        return "jax"
    return "numpy"


def adapter(framework: str) -> ModuleType:
    """The adapter module of ``framework`` (``torch`` or ``jax``)."""
    return importlib.import_module(ADAPTERS[framework])


def to_numpy(value: Any, framework: str) -> Any:
    """``value`` (or the items of a tuple or list) as numpy when it is an array of ``framework``."""
    if isinstance(value, (tuple, list)):
        return type(value)(to_numpy(v, framework) for v in value)
    if framework != "numpy" and _framework_of_type(value) == framework and hasattr(value, "dtype"):
        return adapter(framework).to_numpy(value)
    return value


def from_numpy(outputs: Any, framework: str) -> Any:
    """A kernel's outputs (arrays, tuples or dicts of them) as arrays of ``framework``."""
    if isinstance(outputs, tuple):
        return tuple(from_numpy(o, framework) for o in outputs)
    if isinstance(outputs, dict):
        return {k: from_numpy(v, framework) for k, v in outputs.items()}
    if not isinstance(outputs, np.ndarray) or framework == "numpy":
        return outputs
    return adapter(framework).from_numpy(outputs)


def write_back(passed: Any, values: np.ndarray, framework: str) -> None:
    """Store the kernel's writes into the caller's array or tensor, as NKI's simulator does."""
    if isinstance(passed, np.ndarray):
        if passed.flags.writeable:
            passed[...] = values
        return
    if framework != "numpy" and _framework_of_type(passed) == framework:
        adapter(framework).write_back(passed, values)
