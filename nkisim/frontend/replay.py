"""``nkisim.compile``: run a kernel once, then replay its recorded program on new input values.

A kernel run with inputs of one signature (shapes, dtypes, the other arguments' values)
issues the same instructions at the same addresses, with the same timeline and the same
sanitizer findings about memory and access patterns, whatever the input values are,
unless an instruction makes them depend on values. :func:`compile` runs the kernel once
as :func:`~nkisim.run` does and records its program (:mod:`nkisim.sim.program`); calling
the :class:`CompiledKernel` with new values of the same signature replays the recorded
semantics on them. The result is bit-identical to ``nkisim.run`` on the new values:
outputs, profile and findings.

A kernel whose run depends on values (see :attr:`CompiledKernel.reason`) is run again in
full at every call: correct, not faster.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from nkisim.errors import OperandError, SignatureError
from nkisim.frontend.blas import single_threaded_blas
from nkisim.frontend.context import recording
from nkisim.frontend.jit import (
    _COLLECTORS,
    Kernel,
    RunResult,
    _as_spec,
    _check_call,
    _kernel_loc,
    _split,
    default_check,
    run,
)
from nkisim.frontend.legacy_launch import LegacyKernel
from nkisim.frontend.validate import check_inputs
from nkisim.hw import HwConfig
from nkisim.memory import dtype_name, to_dtype
from nkisim.report import Profile
from nkisim.sim.machine import DEFAULT_MAX_INSTRUCTIONS
from nkisim.sim.program import Program, Recorder

#: What one input of a signature is: ("array", shape, dtype), ("sequence", type, length) or ("value", value).
Entry = tuple[Any, ...]


class CompiledKernel:
    """A kernel compiled for one input signature: call it with new values to get a :class:`RunResult`.

    ``prog(inputs)`` takes inputs as :func:`nkisim.run` does (a sequence of positional
    arguments, a mapping of keyword arguments, or one array). Their shapes, dtypes and
    non-array arguments must be those the program was compiled with, else a
    :class:`~nkisim.errors.SignatureError` names the first difference.

    Calls from several threads are safe: a program replays over one memory image, so its
    replays take turns (a lock per program); outputs are always fresh arrays.

    Attributes:
        kernel: the kernel compiled.
        target: the hardware generation simulated.
        check: the sanitizer mode of every call (``"strict"``, ``"warn"`` or ``"off"``).
        profile: the profile of the compiling run; a replay whose findings are the same returns this object.
        replayable: whether calls replay the recorded program (else each call runs the kernel in full).
        reason: why not, naming the first value-dependent instruction and its kernel line; None when replayable.
    """

    def __init__(
        self,
        kernel: Kernel,
        signature: list[tuple[str, Entry]],
        first: RunResult,
        recorder: Recorder,
        options: dict[str, Any],
    ) -> None:
        self.kernel = kernel
        self.target = first.target
        self.check: str = options["check"]
        self.profile = first.profile
        self.reason = recorder.reason
        self._signature = signature
        self._options = options
        self._program = Program(recorder, first.outputs, self.check) if recorder.reason is None else None

    @property
    def replayable(self) -> bool:
        return self._program is not None

    @property
    def signature(self) -> list[tuple[str, Entry]]:
        """The compiled input signature: per input, by name (``b[1]`` for an item of a sequence)."""
        return list(self._signature)

    def __call__(self, inputs: Sequence[Any] | Mapping[str, Any] | np.ndarray = ()) -> RunResult:
        """Run on ``inputs``: replay the program, or (when not replayable) run the kernel in full."""
        signature, arrays = _signature_of(self.kernel, inputs, "the compiled program")
        self._check_signature(signature)
        program = self._program
        if program is None:
            return run(self.kernel, inputs, **self._options)
        with single_threaded_blas():  # as a run does: tile-sized products, no spin-waiting BLAS threads
            outputs, diagnostics = program.run(arrays)
        profile = self.profile
        if tuple(diagnostics) != profile.diagnostics:
            profile = Profile(profile.timeline, profile.hw, profile.kernel, diagnostics)
        result = RunResult(outputs, profile, self.target)
        for bucket in _COLLECTORS.get():
            bucket.append(profile)
        return result

    def _check_signature(self, got: list[tuple[str, Entry]]) -> None:
        expected = self._signature
        for (name, want), (_, have) in zip(expected, got):
            if not _same_entry(want, have):
                raise SignatureError(
                    f"input {name!r} is {_describe(have)}, but the program was compiled for {_describe(want)}; "
                    "compile again (nkisim.compile) for another signature",
                    loc=_kernel_loc(self.kernel),
                )
        if len(got) != len(expected):
            raise SignatureError(
                f"got {len(got)} inputs ({', '.join(n for n, _ in got)}), but the program was compiled for "
                f"{len(expected)} ({', '.join(n for n, _ in expected)})",
                loc=_kernel_loc(self.kernel),
            )

    def __repr__(self) -> str:
        how = "replays" if self.replayable else f"runs in full ({self.reason})"
        return f"<compiled {self.kernel!r} for {self.target}: {how}>"


def compile(
    kernel: Kernel | Callable[..., Any],
    inputs: Sequence[Any] | Mapping[str, Any] | np.ndarray = (),
    *,
    target: str | HwConfig | None = None,
    max_instructions: int | None = DEFAULT_MAX_INSTRUCTIONS,
    timeout: float | None = None,
    check: str | None = None,
    affine_order: str = "in-order",
    operands: bool = True,
) -> CompiledKernel:
    """Run ``kernel`` on ``inputs`` once and record it, to replay it on new values of the same signature.

    ``prog = nkisim.compile(kernel, example_inputs, target="trn2")`` then
    ``result = prog(new_inputs)`` gives what ``nkisim.run(kernel, new_inputs, target="trn2")``
    gives, bit for bit (outputs, profile, sanitizer findings), without tracing, validating,
    tracking and scheduling the instructions again. The arguments are those of
    :func:`nkisim.run`; ``check`` is resolved now (the kernel's ``check=``, ``NKISIM_CHECK``)
    and holds for every call.

    A kernel whose run can depend on input values (a register loaded from a tensor, a
    run-time offset, a gather that raises on out-of-range indices) or that runs on several
    NeuronCores (``kernel[2]``) is not replayed: each call runs it in full, and
    ``prog.replayable`` is False with ``prog.reason`` naming the first such instruction.

    Raises:
        KernelError: the first run fails (as :func:`nkisim.run` would).
        OperandError: ``kernel`` is a legacy ``neuronxcc.nki`` kernel (compile supports NKI 0.3+ kernels).
    """
    _check_call("nkisim.compile", kernel, inputs, target, max_instructions, timeout, check, affine_order, operands)
    if isinstance(kernel, LegacyKernel):
        raise OperandError(
            "nkisim.compile takes NKI kernels (nki.jit from nkisim.nki or nki 0.3+); a legacy neuronxcc.nki kernel "
            "writes its outputs into its arguments and launches on SPMD grids, which a compiled program does not "
            "record: call it directly, or use nkisim.nki",
            loc=_kernel_loc(kernel),  # type: ignore[arg-type]
        )
    if not isinstance(kernel, Kernel):
        kernel = Kernel(kernel)
    mode = check if check is not None else kernel.options.get("check", default_check())
    options = {
        "target": target,
        "max_instructions": max_instructions,
        "timeout": timeout,
        "check": mode,
        "affine_order": affine_order,
        "operands": operands,
    }
    signature, _ = _signature_of(kernel, inputs, "nkisim.compile")
    recorder = Recorder()
    with recording(recorder):
        first = run(kernel, inputs, **options)
    if recorder.reason is None and recorder.machine is None:
        recorder.refuse("issued no instruction on a recorded core")
    return CompiledKernel(kernel, signature, first, recorder, options)


# -- signatures -----------------------------------------------------------------------------


def _signature_of(kernel: Kernel, inputs: Any, entry: str) -> tuple[list[tuple[str, Entry]], list[np.ndarray]]:
    """The signature of ``inputs`` bound to ``kernel``, and its arrays in the order a run places them in HBM."""
    check_inputs(entry, inputs)
    args, kwargs = _split(inputs)
    try:
        bound = inspect.signature(kernel.func).bind(*args, **kwargs)
    except TypeError as exc:
        raise SignatureError(
            f"{entry}: cannot bind inputs to {kernel.func.__qualname__}: {exc}", loc=_kernel_loc(kernel)
        ) from None
    signature: list[tuple[str, Entry]] = []
    arrays: list[np.ndarray] = []
    for name, value in bound.arguments.items():
        _walk(name, value, signature, arrays)
    return signature, arrays


def _walk(name: str, value: Any, signature: list[tuple[str, Entry]], arrays: list[np.ndarray]) -> None:
    """As a run places inputs (``jit._to_hbm``): arrays, and sequences holding arrays item by item."""
    if _as_spec(value) is None and isinstance(value, (tuple, list)) and any(isinstance(v, np.ndarray) for v in value):
        signature.append((name, ("sequence", type(value), len(value))))
        for i, item in enumerate(value):
            _walk(f"{name}[{i}]", item, signature, arrays)
        return
    if isinstance(value, np.ndarray):
        try:
            dtype: Any = to_dtype(value.dtype)
        except TypeError:
            dtype = value.dtype
        signature.append((name, ("array", tuple(value.shape), dtype)))
        arrays.append(value)
        return
    signature.append((name, ("value", value)))


def _same_entry(want: Entry, have: Entry) -> bool:
    if want[0] != have[0]:
        return False
    if want[0] == "array":
        return want[1] == have[1] and want[2] == have[2] and want[2].metadata == have[2].metadata
    if want[0] == "sequence":
        return want[1] is have[1] and want[2] == have[2]
    return _same_value(want[1], have[1])


def _same_value(a: Any, b: Any) -> bool:
    """Whether two non-array arguments are the same value (of the same type: ``1``, ``1.0`` and ``True`` differ)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (a == b and math.copysign(1.0, a) == math.copysign(1.0, b)) or (a != a and b != b)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:  # a value without a plain equality
        return False


def _describe(entry: Entry) -> str:
    if entry[0] == "array":
        return f"an array {dtype_name(entry[2]) if _known(entry[2]) else entry[2]}{list(entry[1])}"
    if entry[0] == "sequence":
        return f"a {entry[1].__name__} of {entry[2]} items"
    text = repr(entry[1])
    return f"{type(entry[1]).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _known(dtype: Any) -> bool:
    try:
        to_dtype(dtype)
    except TypeError:
        return False
    return True
