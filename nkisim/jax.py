"""Simulated NKI kernels called from JAX (needs the ``nkisim[jax]`` extra).

``nkisim.jax.call(kernel, *arrays)`` works inside ``jax.jit``: the kernel is traced
on shapes alone to give the output shapes and dtypes (so an illegal kernel fails at
trace time, naming its line), and runs on the host through ``jax.pure_callback``.
It composes with ``jax.custom_vjp`` for gradients. Calling an ``@nki.jit`` kernel on
JAX arrays does the same.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

try:
    import jax
except ModuleNotFoundError as exc:  # pragma: no cover - exercised in a subprocess without jax
    raise ImportError("nkisim.jax needs JAX, which is not installed: pip install 'nkisim[jax]'") from exc

from nkisim.frontend.jit import ArraySpec, Kernel, output_specs, run
from nkisim.frontend.validate import check_kernel, check_target

__all__ = ["call", "from_numpy", "to_numpy", "write_back"]


def call(kernel: Kernel, *arrays: Any, target: str | None = None, **static: Any) -> Any:
    """Run ``kernel`` on JAX arrays (or tracers) and return JAX arrays of its outputs.

    ``static`` keyword arguments (tile sizes, flags: ``pool_size=2``) reach the kernel as
    Python values, fixed when JAX traces the call; only ``arrays`` are traced.
    """
    check_kernel("nkisim.jax.call", kernel)
    check_target("nkisim.jax.call", target)
    if not isinstance(kernel, Kernel):
        kernel = Kernel(kernel)
    inputs = _binder(kernel, static)
    specs = [ArraySpec(tuple(a.shape), np.dtype(a.dtype)) if hasattr(a, "shape") else a for a in arrays]
    outputs = output_specs(kernel, inputs(specs), target=target)
    result_shapes = _shape_structs(outputs)

    def host(*values: Any) -> Any:
        host_args = [np.asarray(v) if hasattr(v, "shape") else v for v in values]
        return run(kernel, inputs(host_args), target=target).outputs

    return jax.pure_callback(host, result_shapes, *arrays, vmap_method="sequential")


def _binder(kernel: Kernel, static: dict[str, Any]) -> Any:
    """How the traced values and the static keyword arguments become the kernel's inputs."""
    if not static:
        return lambda values: list(values)
    signature = inspect.signature(kernel.func)
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in signature.parameters.values()):
        raise TypeError("nkisim.jax.call: static keyword arguments need a kernel without *args")

    def bind(values: list[Any]) -> dict[str, Any]:
        try:
            return dict(signature.bind(*values, **static).arguments)
        except TypeError as exc:
            raise TypeError(f"nkisim.jax.call: {exc} (kernel {kernel.func.__name__})") from None

    return bind


def _shape_structs(outputs: Any) -> Any:
    if isinstance(outputs, ArraySpec):
        return jax.ShapeDtypeStruct(outputs.shape, np.dtype(outputs.dtype))
    if isinstance(outputs, tuple):
        return tuple(_shape_structs(o) for o in outputs)
    raise TypeError(f"a kernel called from JAX must return arrays, not {outputs!r}")


def to_numpy(array: Any) -> np.ndarray:
    """A JAX array's values on the host."""
    return np.asarray(array)


def from_numpy(array: np.ndarray) -> Any:
    """A JAX array with the array's values."""
    import jax.numpy as jnp

    return jnp.asarray(array)


def write_back(passed: Any, values: np.ndarray) -> None:
    """JAX arrays are immutable: a kernel's writes into an argument stay in the simulation."""
