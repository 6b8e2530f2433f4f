"""``nki.simulate(kernel)(*arrays)``: NKI 0.3's CPU-simulator entry point, run by nkisim.

The call takes numpy arrays or torch tensors (or JAX arrays) and returns the
kernel's outputs in the same kind. As in NKI's simulator, an input array is
updated in place when the kernel wrote to its HBM tensor, so kernels in the older
style that write their result into an argument work too::

    out = nki.simulate(my_kernel)(a, b)           # numpy in, numpy out
    nki.simulate(legacy_kernel)(x_np, y_np)        # y_np now holds the result

The profile of the run is available through :func:`nkisim.collect_profiles`.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from nkisim.frontend.frameworks import framework_of, from_numpy, to_numpy, write_back
from nkisim.frontend.jit import Kernel, RunResult, _as_inputs, run
from nkisim.memory import Tensor
from nkisim.memory.views import bytes_differ


def run_capturing(
    kernel: Kernel | Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    target: Any = None,
    **options: Any,
) -> tuple[RunResult, dict[str, Any]]:
    """Run ``kernel`` like :func:`nkisim.run` and also return the HBM tensor of each argument, by name.

    ``options`` are :func:`nkisim.run`'s keyword options (``check``, ``max_instructions``, ``timeout``).

    The tensors hold what the kernel left in them, so a caller can see which inputs it wrote.
    """
    base = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    func = base.func
    signature = inspect.signature(func)
    captured: dict[str, Any] = {}

    @functools.wraps(func)
    def capturing(*a: Any, **kw: Any) -> Any:
        captured.update(signature.bind(*a, **kw).arguments)  # the run has bound these once already
        return func(*a, **kw)

    wrapped = copy.copy(base)  # keeps every launch option of the kernel object
    wrapped.func = capturing
    result = run(wrapped, _as_inputs(args, kwargs), target=target, **options)
    return result, captured


def written_inputs(originals: dict[str, Any], tensors: dict[str, Any]) -> dict[str, tuple[Any, np.ndarray]]:
    """The arguments whose HBM bytes differ from the values passed in: name -> (original, new values)."""
    changed: dict[str, tuple[Any, np.ndarray]] = {}
    for name, original in originals.items():
        tensor = tensors.get(name)
        if isinstance(tensor, Tensor) and isinstance(original, np.ndarray):
            if bytes_differ(original, tensor.array):
                changed[name] = (original, tensor.array)
        elif isinstance(tensor, (tuple, list)) and isinstance(original, (tuple, list)):
            for i, (o, t) in enumerate(zip(original, tensor)):
                if isinstance(t, Tensor) and isinstance(o, np.ndarray) and bytes_differ(o, t.array):
                    changed[f"{name}[{i}]"] = (o, t.array)
    return changed


class Simulated:
    """A kernel wrapped by :func:`simulate`; call it with arrays or tensors.

    ``Simulated[...]`` forwards a launch grid (``nki.simulate(kernel)[2]``) to the
    kernel when it supports one.
    """

    def __init__(self, kernel: Any, target: Any = None) -> None:
        if not callable(kernel):
            raise TypeError(f"nki.simulate expects a kernel function or @nki.jit kernel, got {kernel!r}")
        self.kernel = kernel
        self.target = target
        functools.update_wrapper(self, getattr(kernel, "func", kernel), updated=())

    def __getitem__(self, grid: Any) -> Simulated:
        kernel = self.kernel if isinstance(self.kernel, Kernel) else Kernel(self.kernel)
        return Simulated(kernel[grid], self.target)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        framework = framework_of((*args, *kwargs.values()))
        np_args = tuple(to_numpy(a, framework) for a in args)
        np_kwargs = {k: to_numpy(v, framework) for k, v in kwargs.items()}
        result, tensors = run_capturing(self.kernel, np_args, np_kwargs, self.target)
        func = self.kernel.func if isinstance(self.kernel, Kernel) else self.kernel
        try:
            passed = inspect.signature(func).bind(*args, **kwargs).arguments
            converted = inspect.signature(func).bind(*np_args, **np_kwargs).arguments
        except TypeError:
            passed, converted = {}, {}
        for name, (_, values) in written_inputs(dict(converted), tensors).items():
            write_back(_lookup(passed, name), values, framework)
        return from_numpy(result.outputs, framework)


def _lookup(arguments: Any, name: str) -> Any:
    if name.endswith("]"):
        base, index = name[:-1].split("[")
        return arguments[base][int(index)]
    return arguments[name]


def simulate(kernel: Any, *, target: Any = None) -> Simulated:
    """A CPU-simulated version of ``kernel`` (NKI 0.3+ ``nki.simulate``).

    Args:
        kernel: an ``@nki.jit`` kernel or a plain kernel function.
        target: the hardware generation (nkisim extension); by default the kernel's
            ``platform_target``, then ``NEURON_PLATFORM_TARGET_OVERRIDE``, then trn1.

    Returns:
        A callable that runs the kernel on numpy arrays, torch tensors or JAX arrays
        and returns its outputs as the same kind.
    """
    return Simulated(kernel, target)
