"""Per-context recording closures of the most frequent intrinsics (tensor loads and stores, binary ops, macros).

``ctx.v_f32_ld_tnsr_b`` and the like are :class:`PerContext` descriptors: on a context, the first
access builds a closure bound to that context's trace columns and caches it on the context, so a
call is one Python frame that appends its opcode (as the trace's byte for it) and operands to flat
lists and returns the next handle of its result type.
A call the closure does not cover (predicated, a type error, a tensor with stores pending, other
coordinates than a numpy int32[5]) goes to the class's method, which checks and records it in full.
On the class, the attribute is that method. The closures do not record the calling line of a
tensor access: when a check needs it, the runner runs that member again on a trace that is
``locating`` (every call then takes the class's method, which records it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nkisim.tpc.trace import WIDE
from nkisim.tpc.types import VEC_OF, Vec

_I32 = np.dtype(np.int32)

#: ``maker(ctx, plain) -> closure``.
Maker = Callable[[Any, Callable[..., Any]], Callable[..., Any]]


class PerContext:
    """A context method whose common calls run in a closure made for each context (a non-data descriptor)."""

    def __init__(self, plain: Callable[..., Any], maker: Maker) -> None:
        self.plain = plain
        self.maker = maker
        self.__name__ = plain.__name__
        self.__doc__ = plain.__doc__

    def __get__(self, obj: Any, cls: type | None = None) -> Any:
        if obj is None:
            return self.plain
        if obj._t.locating:
            return self.plain.__get__(obj, cls)
        fn = self.maker(obj, self.plain)
        fn.__name__ = fn.__qualname__ = self.plain.__name__
        fn.__doc__ = self.plain.__doc__
        obj.__dict__[self.plain.__name__] = fn
        return fn


def _full(ctx: Any, plain: Callable[..., Any]) -> Callable[..., Any]:
    """Every call through the full method (the opcodes have no byte of their own in this trace)."""

    def full(*args: Any, **kwargs: Any) -> Any:
        return plain(ctx, *args, **kwargs)

    return full


def coords_view(ctx: Any, coords: Any) -> memoryview | None:
    """The bytes view of ``coords`` if it is a C-contiguous numpy int32[5] (cached on ``ctx``), else None."""
    cache = ctx._coords_ok
    if coords is cache[0]:
        return cache[1]
    if type(coords) is np.ndarray and coords.dtype is _I32 and coords.shape == (5,) and coords.flags.c_contiguous:
        cache[1] = memoryview(coords).cast("B")
        cache[0] = coords
        return cache[1]
    return None


def load_maker(vcode: int) -> Maker:
    """The closure maker of a vector load of type ``vcode``."""

    def make(ctx: Any, plain: Callable[..., Any]) -> Callable[..., Any]:
        t = ctx._t
        fast = t.ld_fast[vcode]
        push, coords_push = t.seq.append, t.cb.extend
        cache = ctx._coords_ok
        made, step = t.handles[vcode], next

        def load(
            coords: Any,
            tensor: int,
            switches: int = 0,
            income: Any = None,
            predicate: Any = True,
            polarity: Any = False,
        ) -> Vec:
            if coords is cache[0] and predicate is True and polarity is False:
                try:
                    push(fast[tensor])
                except KeyError:
                    pass
                else:
                    coords_push(cache[1])
                    return step(made)
            return plain(ctx, coords, tensor, switches, income, predicate, polarity)

        return load

    return make


def store_maker(vcode: int) -> Maker:
    """The closure maker of a vector store of type ``vcode``."""
    vec = VEC_OF[vcode]

    def make(ctx: Any, plain: Callable[..., Any]) -> Callable[..., Any]:
        t = ctx._t
        fast = t.st_fast[vcode]
        push, x_push, coords_push = t.seq.append, t.xs.append, t.cb.extend
        cache = ctx._coords_ok

        def store(
            coords: Any, tensor: int, value: Any, switches: int = 0, predicate: Any = True, polarity: Any = False
        ) -> None:
            if type(value) is vec and coords is cache[0] and predicate is True and polarity is False:
                try:
                    push(fast[tensor])
                except KeyError:
                    pass
                else:
                    x_push(value)
                    coords_push(cache[1])
                    return None
            return plain(ctx, coords, tensor, value, switches, predicate, polarity)

        return store

    return make


def binary_maker(vcode: int, ocode: int, op_vv: int, op_vs: int | None) -> Maker:
    """The closure maker of an unpredicated binary op on two vectors, or a vector and a Python float or int."""
    vec = VEC_OF[vcode]
    real, whole = (float, int) if op_vs is not None else (None, None)  # the Python scalars it takes

    def make(ctx: Any, plain: Callable[..., Any]) -> Callable[..., Any]:
        t = ctx._t
        code_vv, code_vs = t.code(op_vv), t.code(op_vs) if op_vs is not None else None
        if WIDE in (code_vv, code_vs):
            return _full(ctx, plain)
        push, x_push, f_push = t.seq.append, t.xs.append, t.fs.append
        made, step = t.handles[ocode], next

        def binary(
            a: Any, b: Any, switches: int = 0, income: Any = None, predicate: Any = True, polarity: Any = False
        ) -> Vec:
            if type(a) is vec and switches == 0 and predicate is True and polarity is False:
                tb = type(b)
                if tb is vec:
                    push(code_vv)
                    x_push(a)
                    x_push(b)
                    return step(made)
                if tb is real or tb is whole:
                    push(code_vs)
                    x_push(a)
                    f_push(b)
                    return step(made)
            return plain(ctx, a, b, switches, income, predicate, polarity)

        return binary

    return make


def unary_maker(vcode: int, op: int) -> Maker:
    """The closure maker of a macro on one vector (a reduction or special function) after its first call."""
    vec = VEC_OF[vcode]

    def make(ctx: Any, plain: Callable[..., Any]) -> Callable[..., Any]:
        t = ctx._t
        code = t.code(op)
        if code == WIDE:
            return _full(ctx, plain)
        push, x_push = t.seq.append, t.xs.append
        made, step = t.handles[vcode], next

        def macro(x: Any) -> Vec:
            if type(x) is vec and ctx.lookup_at is not None:
                push(code)
                x_push(x)
                return step(made)
            return plain(ctx, x)

        return macro

    return make
