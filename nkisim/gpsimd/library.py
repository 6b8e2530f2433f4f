"""``Library``: a set of custom operators, the analogue of ``custom_op.load`` and ``NEURON_LIBRARY``.

::

    lib = gpsimd.Library("my_ops", multicore=False, extra_cflags=["-DSTACK_SIZE=20000"])

    @lib.shape("tensor_negate")
    def negate_shape(t):                      # shapes and dtypes only
        return gpsimd.zeros(t.sizes(), t.dtype)

    @lib.kernel("tensor_negate")
    def negate(ctx, t):                       # runs on the GPSIMD core(s)
        ...

    out = gpsimd.run(lib.tensor_negate, [x]).outputs
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nkisim.errors import SourceLoc, user_location
from nkisim.gpsimd.errors import GpsimdLibraryError, GpsimdLoadError
from nkisim.hw import DEFAULT_TARGET, load_target

#: The library name the runtime reserves.
RESERVED_NAME = "builtin"
_STACK_FLAG = re.compile(r"^-DSTACK_SIZE=(.*)$")


@dataclass
class Op:
    """One operator of a library: its shape function and kernel, and ``lib.<name>`` is this handle.

    Attributes:
        library: the library it belongs to.
        name: the operator's name (``torch.ops.<library>.<name>``).
        shape_fn: the shape function (host side: sizes and dtypes only).
        kernel_fn: the kernel (device side), called with the per-core context first.
        backward: the operator computing the gradient, for autograd (see :meth:`Library.backward`).
        loc: where it was registered.
        last_result: the :class:`~nkisim.gpsimd.GpsimdResult` of its last call through torch.
    """

    library: Library
    name: str
    shape_fn: Callable[..., Any] | None = None
    kernel_fn: Callable[..., Any] | None = None
    backward: Op | None = None
    loc: SourceLoc = field(default_factory=user_location)
    #: The last run through ``torch.ops`` (its profile and printf text).
    last_result: Any = None

    @property
    def qualname(self) -> str:
        """``library.op``."""
        return f"{self.library.name}.{self.name}"

    def __call__(self, *args: Any, target: str = DEFAULT_TARGET) -> Any:
        """Run on the simulator and return the output (numpy); see :func:`nkisim.gpsimd.run`."""
        from nkisim.gpsimd.runtime import run

        return run(self, list(args), target=target).outputs

    def __repr__(self) -> str:
        return f"<gpsimd op {self.qualname}>"


class Library:
    """A custom-operator library (``custom_op.load(name, ..., multicore=, extra_cflags=)``).

    Args:
        name: the library's name; ops become ``torch.ops.<name>.<op>``. ``builtin`` is reserved.
        multicore: run every op of the library on all GPSIMD cores.
        extra_cflags: compiler flags; ``-DSTACK_SIZE=<bytes>`` declares the stack size.

    Raises:
        GpsimdLibraryError: a bad name or flag.
        GpsimdLoadError: a declared stack size above the maximum (400 KB).
    """

    def __init__(self, name: str, *, multicore: bool = False, extra_cflags: Sequence[str] = ()) -> None:
        loc = user_location()
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise GpsimdLibraryError(f"library name {name!r} must be a C/Python identifier", loc=loc)
        if name == RESERVED_NAME:
            raise GpsimdLibraryError(f"the library name {RESERVED_NAME!r} is reserved", loc=loc, op=name)
        if isinstance(extra_cflags, str):
            extra_cflags = [extra_cflags]
        self.name = name
        self.multicore = bool(multicore)
        self.extra_cflags = tuple(extra_cflags)
        self.loc = loc
        self.stack_size = self._stack_size(loc)
        self._ops: dict[str, Op] = {}

    def _stack_size(self, loc: SourceLoc) -> int | None:
        declared: int | None = None
        for flag in self.extra_cflags:
            m = _STACK_FLAG.match(str(flag))
            if m is None:
                continue
            try:
                declared = int(m.group(1), 0)
            except ValueError:
                raise GpsimdLibraryError(
                    f"-DSTACK_SIZE={m.group(1)} is not a number of bytes", loc=loc, op=self.name
                ) from None
            if declared <= 0:
                raise GpsimdLibraryError(f"-DSTACK_SIZE={declared} must be positive", loc=loc, op=self.name)
        cfg = load_target(DEFAULT_TARGET).gpsimd_cores
        if declared is not None and declared > cfg.max_stack_bytes:
            raise GpsimdLoadError(
                f"library fails to load: -DSTACK_SIZE={declared} exceeds the maximum stack size of "
                f"{cfg.max_stack_bytes} bytes (400 KB)",
                loc=loc,
                op=self.name,
            )
        return declared

    # -- registration -------------------------------------------------------------------

    def _op(self, name: str, role: str, loc: SourceLoc) -> Op:
        if not isinstance(name, str) or not name.isidentifier():
            raise GpsimdLibraryError(f"operator name {name!r} must be an identifier", loc=loc, op=self.name)
        if name in self._ops:
            op = self._ops[name]
            if getattr(op, f"{role}_fn") is not None:
                raise GpsimdLibraryError(
                    f"operator {name!r} already has a {role} function", loc=loc, op=f"{self.name}.{name}"
                )
            return op
        if hasattr(type(self), name) or name.startswith("_"):
            raise GpsimdLibraryError(f"operator name {name!r} clashes with a Library attribute", loc=loc, op=self.name)
        limit = load_target(DEFAULT_TARGET).gpsimd_cores.max_functions
        if len(self._ops) >= limit:
            raise GpsimdLibraryError(
                f"a library may register at most {limit} functions; {name!r} would be number {len(self._ops) + 1}",
                loc=loc,
                op=self.name,
            )
        op = Op(self, name, loc=loc)
        self._ops[name] = op
        return op

    def shape(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register the decorated function as operator ``name``'s shape function."""
        loc = user_location()

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self._op(name, "shape", loc).shape_fn = fn
            return fn

        return register

    def kernel(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register the decorated function as operator ``name``'s kernel (``ctx`` first, then the arguments)."""
        loc = user_location()

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self._op(name, "kernel", loc).kernel_fn = fn
            return fn

        return register

    def backward(self, forward: str, backward: str) -> None:
        """Make op ``backward`` the gradient of op ``forward`` for autograd.

        ``backward`` is called with the output's gradient followed by ``forward``'s arguments and
        returns the gradient of ``forward``'s first tensor argument.
        """
        loc = user_location()
        for name in (forward, backward):
            if name not in self._ops:
                raise GpsimdLibraryError(f"no operator {name!r} in library {self.name!r}", loc=loc, op=self.name)
        self._ops[forward].backward = self._ops[backward]

    @property
    def ops(self) -> dict[str, Op]:
        """The registered operators, by name."""
        return dict(self._ops)

    def __getattr__(self, name: str) -> Op:
        ops = self.__dict__.get("_ops", {})
        if name in ops:
            return ops[name]
        raise AttributeError(f"library {self.__dict__.get('name', '?')!r} has no operator {name!r}")

    def register_torch(self) -> Any:
        """Register every op as ``torch.ops.<library>.<op>`` (one library per process)."""
        from nkisim.gpsimd.frameworks import register_torch

        return register_torch(self)

    def __repr__(self) -> str:
        mode = "multicore" if self.multicore else "single-core"
        return f"<gpsimd Library {self.name!r} ({mode}, {len(self._ops)} ops)>"
