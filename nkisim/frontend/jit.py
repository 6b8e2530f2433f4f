"""``@nki.jit`` kernels and ``nkisim.run``: binding arguments, running the kernel, collecting outputs."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nkisim.errors import KernelError, OperandError, SourceLoc
from nkisim.frontend.context import KernelContext, enter, is_running, leave
from nkisim.hw import HwConfig, load_target
from nkisim.memory import Tensor, to_dtype
from nkisim.report import Profile


@dataclass(frozen=True)
class RunResult:
    """What a simulated kernel run gives back.

    Attributes:
        outputs: what the kernel returns, with tensors as numpy arrays (an array, a tuple of them, or None).
        profile: the simulated timeline and its summary.
        target: the hardware generation simulated.
    """

    outputs: Any
    profile: Profile
    target: str


class Kernel:
    """An NKI kernel: a Python function traced and simulated instruction by instruction.

    Call it with numpy arrays to get its outputs, or pass it to :func:`nkisim.run`
    for the profile too. Inside another kernel it is inlined.
    """

    def __init__(self, func: Callable[..., Any], platform_target: str | None = None, **options: Any) -> None:
        self.func = func
        self.platform_target = platform_target
        self.options = options
        functools.update_wrapper(self, func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if is_running():
            return self.func(*args, **kwargs)
        return run(self, _as_inputs(args, kwargs)).outputs

    def __repr__(self) -> str:
        return f"<nki kernel {self.func.__qualname__}>"


def jit(func: Callable[..., Any] | None = None, mode: str = "auto", **kwargs: Any) -> Any:
    """Decorate an NKI kernel: ``@nki.jit`` or ``@nki.jit(platform_target="trn2")``.

    The target is, in order: ``nkisim.run(target=)``, ``platform_target``, the
    ``NEURON_PLATFORM_TARGET_OVERRIDE`` environment variable, then ``trn1``.
    ``mode`` is accepted for compatibility; nkisim always simulates.
    """
    platform_target = kwargs.pop("platform_target", None)
    if platform_target is not None:
        load_target(platform_target)  # reject unknown names early
    if func is None:
        return lambda f: Kernel(f, platform_target, mode=mode, **kwargs)
    return Kernel(func, platform_target, mode=mode, **kwargs)


def _as_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if args and kwargs:
        return _Both(args, kwargs)
    return kwargs if kwargs else args


@dataclass
class _Both:
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def run(
    kernel: Kernel | Callable[..., Any],
    inputs: Sequence[Any] | Mapping[str, Any] = (),
    *,
    target: str | HwConfig | None = None,
) -> RunResult:
    """Simulate ``kernel`` on ``inputs`` and return its outputs and profile.

    Args:
        kernel: an ``@nki.jit`` kernel or a plain kernel function.
        inputs: positional arguments (a sequence) or keyword arguments (a mapping).
            Arrays are numpy arrays of NKI dtypes (ml_dtypes for bfloat16 and fp8);
            other values (ints, floats, None) are passed through unchanged.
        target: ``trn1``, ``inf2``, ``trn2``, ``trn3`` (or an ``HwConfig``); by default
            the kernel's ``platform_target``, the environment, then ``trn1``.
    """
    if not isinstance(kernel, Kernel):
        kernel = Kernel(kernel)
    hw = load_target(target if target is not None else kernel.platform_target)
    args, kwargs = _split(inputs)
    ctx = KernelContext(hw)
    bound = _bind(kernel, args, kwargs)
    for name, value in bound.arguments.items():
        bound.arguments[name] = _to_hbm(ctx, name, value, kernel)
    token = enter(ctx)
    try:
        returned = kernel.func(*bound.args, **bound.kwargs)
    finally:
        leave(token)
    outputs = _collect(returned)
    return RunResult(outputs, Profile(ctx.scheduler.timeline, hw.name, hw.reference_clock_ghz), hw.name)


def _split(inputs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(inputs, _Both):
        return inputs.args, inputs.kwargs
    if isinstance(inputs, Mapping):
        return (), dict(inputs)
    if isinstance(inputs, np.ndarray):
        return (inputs,), {}
    return tuple(inputs), {}


def _bind(kernel: Kernel, args: tuple[Any, ...], kwargs: dict[str, Any]) -> inspect.BoundArguments:
    signature = inspect.signature(kernel.func)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise KernelError(
            f"cannot bind inputs to {kernel.func.__qualname__}{signature}: {exc}", loc=_kernel_loc(kernel)
        ) from None
    return bound


def _kernel_loc(kernel: Kernel) -> SourceLoc:
    code = kernel.func.__code__
    return SourceLoc(code.co_filename, code.co_firstlineno, code.co_name)


def _to_hbm(ctx: KernelContext, name: str, value: Any, kernel: Kernel) -> Any:
    if isinstance(value, (tuple, list)) and any(isinstance(v, np.ndarray) for v in value):
        return type(value)(_to_hbm(ctx, f"{name}[{i}]", v, kernel) for i, v in enumerate(value))
    if not isinstance(value, np.ndarray):
        return value
    try:
        dtype = to_dtype(value.dtype)
    except TypeError as exc:
        raise OperandError(str(exc), loc=_kernel_loc(kernel), operand=f"input {name!r}") from None
    return ctx.memory.hbm_tensor_from(value, dtype, name)


def _collect(returned: Any) -> Any:
    if isinstance(returned, Tensor):
        return returned.array  # the run's own HBM bytes: nothing else refers to them
    if isinstance(returned, (tuple, list)):
        return tuple(_collect(item) for item in returned)
    if isinstance(returned, dict):
        return {key: _collect(item) for key, item in returned.items()}
    return returned
