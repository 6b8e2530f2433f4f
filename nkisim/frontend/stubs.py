"""The ``nki.isa`` functions, made from the registry: same names, argument names and defaults as NKI."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from typing import Any

from pydantic_core import PydanticUndefined

from nkisim.errors import DtypeError, OperandError, user_location
from nkisim.frontend.context import current_context, running_context
from nkisim.frontend.handles import NkiInstruction
from nkisim.isa import REGISTRY, InstructionSpec
from nkisim.memory import Tensor, dtype_name, to_dtype
from nkisim.sim import Instruction


def make_stub(spec: InstructionSpec, module: str = "nkisim.nki.isa") -> Callable[..., NkiInstruction]:
    """A function ``nisa.<name>(dst, ..., name=None)`` that emits the instruction into the running kernel.

    It returns the instruction's :class:`~nkisim.frontend.handles.NkiInstruction` handle. ``module``
    is where the function is published (``nkisim.nki.collectives`` for ``ncc.all_gather``).
    """
    fields = spec.operands.model_fields
    order = [f for f in fields if f != "name"] + ["name"]
    params = [
        inspect.Parameter(
            f,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=inspect.Parameter.empty if fields[f].default is PydanticUndefined else fields[f].default,
        )
        for f in order
    ]
    name = spec.name
    qualname = spec.qualname
    known = frozenset(order)

    def stub(*args: Any, **kwargs: Any) -> NkiInstruction:
        loc = user_location(2)  # from the caller: this frame is never kernel code
        if args:
            if len(args) > len(order):
                raise OperandError(f"takes at most {len(order)} positional arguments", loc=loc, instruction=qualname)
            for fname, value in zip(order, args):
                if fname in kwargs:
                    raise OperandError(
                        "is given both by position and by keyword", loc=loc, instruction=qualname, operand=fname
                    )
                kwargs[fname] = value
        if "dtype" in kwargs:
            _drop_redundant_dtype(name, kwargs, loc)
        ctx = running_context() or current_context()
        if not known.issuperset(kwargs):
            _reject_unknown(qualname, order, kwargs, loc, ctx.hw.name)
        if ctx.deferred is None and not ctx.lazy_fills:  # what emit does then, without its call
            index = ctx.machine.issue(Instruction(name, kwargs, loc))
        else:
            index = ctx.emit(name, kwargs, loc)
        return NkiInstruction(ctx, index, qualname, loc)

    stub.__name__ = stub.__qualname__ = name
    stub.__doc__ = spec.doc
    try:
        signature = inspect.Signature(params)
    except ValueError:  # a NKI 0.2 positional argument that NKI 0.3 made optional (affine_select's offset)
        signature = inspect.Signature(params, __validate_parameters__=False)
    stub.__signature__ = signature  # type: ignore[attr-defined]
    stub.__module__ = module
    return stub


def _reject_unknown(qualname: str, order: list[str], kwargs: dict[str, Any], loc: Any, target: str) -> None:
    """Name a misspelled keyword itself, before the argument it was meant to be is reported missing."""
    for key in kwargs:
        if key not in order:
            close = difflib.get_close_matches(key, order, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise OperandError(
                f"is not an argument of this instruction{hint}",
                loc=loc,
                instruction=qualname,
                target=target,
                operand=key,
            )


def _drop_redundant_dtype(name: str, kwargs: dict[str, Any], loc: Any) -> None:
    """Accept NKI 0.1's ``dtype=`` when it agrees with ``dst`` (some 0.2 tutorials still pass it)."""
    if "dtype" not in kwargs:
        return
    dtype = kwargs.pop("dtype")
    dst = kwargs.get("dst")
    if dtype is None or not isinstance(dst, Tensor):
        return
    try:
        same = to_dtype(dtype) == dst.dtype
    except TypeError as exc:
        raise DtypeError(str(exc), loc=loc, instruction=f"nisa.{name}", operand="dtype") from None
    if not same:
        raise OperandError(
            f"{dtype_name(to_dtype(dtype))} differs from dst dtype {dtype_name(dst.dtype)}; dst sets the output type",
            loc=loc,
            instruction=f"nisa.{name}",
            operand="dtype",
        )


STUBS: dict[str, Callable[..., NkiInstruction]] = {name: make_stub(spec) for name, spec in REGISTRY.items()}
