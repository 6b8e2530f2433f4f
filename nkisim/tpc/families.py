"""The intrinsics' methods, made from their specs by signature family, and how a call is recorded.

A call appends one entry to the run's tape (:mod:`nkisim.tpc.tape`): an opcode and its operands.
The common calls (tensor loads and stores, unpredicated binary operations on vectors or a vector
and a Python scalar, macros) run in per-context closures (:mod:`nkisim.tpc.fast`) that append
precomputed opcodes and operands to flat columns; every other call goes through :func:`emit`,
which builds the opcode from the call's operand pattern and interns it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from nkisim.tpc.fast import PerContext, binary_maker, coords_view, load_maker, store_maker, unary_maker
from nkisim.tpc.intrinsics import INTRINSICS, SPECIAL_MACS, IntrinsicSpec
from nkisim.tpc.semantics import SEM, SW_RHNE
from nkisim.tpc.tape import L_V, L_VS, L_VV, PREV, Op, opcode
from nkisim.tpc.trace import (
    C_FMA,
    C_LD,
    C_LOOKUP,
    C_MDG,
    C_NONE,
    C_SHUF,
    C_VPU,
    K_ACC,
    K_PRED,
    K_SRC,
    K_STV,
    LOAD,
    M_GST,
    M_LLD,
    M_LOOKUP,
    SCALAR,
    STORE,
    VPU,
    tensor_opcode,
)
from nkisim.tpc.types import Pair, Vec, VType, code_of, predicate_type

_getframe = sys._getframe
#: Files whose frames are not the caller of an intrinsic.
_OWN_FILES = frozenset({__file__, sys.modules["nkisim.tpc.fast"].__file__})


@functools.cache
def _value_opcode(key: tuple[Any, ...], uop: tuple[Any, ...]) -> int:
    """The opcode of a value of grouping key ``key`` made by the one micro-op ``uop`` (no :class:`Op` is built)."""
    return opcode(Op(key, (uop,)))


def _type_error(ctx: Any, spec: IntrinsicSpec, operand: str, got: object, want: str) -> Exception:
    from nkisim.tpc.errors import TpcTypeError

    kind = got.vtype.name if isinstance(got, Vec) else type(got).__name__
    return TpcTypeError(
        f"{spec.name}: {operand} is a {kind}, expected {want}",
        loc=ctx._loc(3),
        kernel=ctx._kernel,
        tpc=ctx._tpc,
        member=ctx._member,
        device=ctx._device,
    )


def _operand(ctx: Any, spec: IntrinsicSpec, name: str, x: object, vt: VType, scalar_ok: bool = True) -> None:
    if isinstance(x, Vec):
        if x.vtype is not vt:
            raise _type_error(ctx, spec, name, x, vt.name)
    elif not scalar_ok or not isinstance(x, (int, float, np.integer, np.floating)) or isinstance(x, bool):
        raise _type_error(ctx, spec, name, x, vt.name + (" or a scalar" if scalar_ok else ""))


def emit(
    ctx: Any,
    spec: IntrinsicSpec,
    args: tuple[Any, ...],
    kinds: tuple[int, ...],
    statics: tuple[Any, ...],
    predicate: Any,
    polarity: Any,
    income: Any,
    out: VType | None = None,
    cls: int | None = None,
    types: tuple[VType, ...] = (),
    local_load: tuple[int, ...] | None = None,
) -> Vec:
    """Record one intrinsic with a result: one entry, one micro-op reading its vector operands.

    ``types`` are the operands' element types where they differ from the spec's (for scalars).
    ``local_load``: the micro-op is instead a VLM load (``LD_L_V``) depending on these entries
    (the store that wrote the address, if any).
    """
    out = out or spec.out
    vb = None
    if spec.vector_predicate:
        if not isinstance(predicate, Vec) or predicate.vtype is not predicate_type(out.lanes):
            raise _type_error(ctx, spec, "predicate", predicate, predicate_type(out.lanes).name)
        vb = bool(polarity)
        args = (*args, predicate, 0 if income is None else income)
        kinds = (*kinds, K_PRED, K_SRC)
        types = (*(types or (spec.vtype,) * (len(args) - 2)), predicate.vtype, out)
    elif not (bool(predicate) ^ bool(polarity)):  # predicated off: the result is the income
        mov = INTRINSICS[f"v_{out.prefix}_mov_b"]
        income = 0 if income is None else income
        return emit(ctx, mov, (income,), (K_SRC,), (), 1, 0, None, out, spec.cls, (), local_load)
    pattern = []
    srcs = []
    skinds = []
    for p, (x, k) in enumerate(zip(args, kinds)):
        if isinstance(x, Vec):
            pattern.append(code_of(x, 15))
            srcs.append(p)
            skinds.append(k)
        else:
            pattern.append(SCALAR - (types[p] if p < len(types) else spec.vtype).code)
    key = (spec.sem, tuple(pattern), statics, out.code, spec.vtype.code, vb)
    if local_load is None:
        uop = (spec.slot, spec.cls if cls is None else cls, 0, -1, tuple(srcs), tuple(skinds))
    else:
        deps = tuple(range(len(args), len(args) + len(local_load)))
        uop = (LOAD, C_LD, M_LLD, -1, deps, (K_SRC,) * len(deps))
        args = (*args, *local_load)
    return ctx._t.value_entry(_value_opcode(key, uop), args, out.code)


def _binary(spec: IntrinsicSpec) -> PerContext:
    vt, out, sem = spec.vtype, spec.out, spec.sem
    assert out is not None

    def method(
        self: Any, a: Any, b: Any, switches: int = 0, income: Any = None, predicate: Any = True, polarity: Any = False
    ) -> Vec:
        if not isinstance(a, Vec) or a.vtype is not vt:
            _operand(self, spec, "a", a, vt)
        if not isinstance(b, Vec) or b.vtype is not vt:
            _operand(self, spec, "b", b, vt)
        return emit(self, spec, (a, b), (K_SRC, K_SRC), (switches,), predicate, polarity, income)

    if spec.vector_predicate:
        return method
    uop = ((VPU, spec.cls, 0, -1, (0, 1), (K_SRC, K_SRC)),)
    op_vv = opcode(Op((sem, (vt.code, vt.code), (0,), out.code, vt.code, None), uop, layout=L_VV))
    op_vs = None
    if vt.is_float:  # a Python int or float scalar converts to the vector type through float64
        uop = ((VPU, spec.cls, 0, -1, (0,), (K_SRC,)),)
        op_vs = opcode(Op((sem, (vt.code, SCALAR - vt.code), (0,), out.code, vt.code, None), uop, layout=L_VS))
    return PerContext(method, binary_maker(vt.code, out.code, op_vv, op_vs))


def _unary(spec: IntrinsicSpec) -> Callable[..., Vec]:
    vt = spec.vtype

    def method(
        self: Any, a: Any, switches: int = 0, income: Any = None, predicate: Any = True, polarity: Any = False
    ) -> Vec:
        _operand(self, spec, "a", a, vt, scalar_ok=spec.sem == SEM["mov"])
        return emit(self, spec, (a,), (K_SRC,), (switches,), predicate, polarity, income)

    return method


def _mac(spec: IntrinsicSpec) -> Callable[..., Vec]:
    vt = spec.vtype

    def method(
        self: Any, a: Any, b: Any, accumulator: Any, switches: int = 0, predicate: Any = True, polarity: Any = False
    ) -> Vec:
        _operand(self, spec, "a", a, vt)
        _operand(self, spec, "b", b, vt)
        _operand(self, spec, "accumulator", accumulator, vt, scalar_ok=False)
        return emit(
            self, spec, (a, b, accumulator), (K_SRC, K_SRC, K_ACC), (switches,), predicate, polarity, accumulator
        )

    return method


def _sel(spec: IntrinsicSpec) -> Callable[..., Vec]:
    vt, ot = spec.vtype, spec.out

    def method(
        self: Any,
        a: Any,
        b: Any,
        c: Any,
        d: Any,
        switches: int = 0,
        income: Any = None,
        predicate: Any = True,
        polarity: Any = False,
    ) -> Vec:
        _operand(self, spec, "a", a, vt)
        _operand(self, spec, "b", b, vt)
        _operand(self, spec, "c", c, ot)
        _operand(self, spec, "d", d, ot)
        return emit(
            self, spec, (a, b, c, d), (K_SRC,) * 4, (switches,), predicate, polarity, income, types=(vt, vt, ot, ot)
        )

    return method


def _shuffle(spec: IntrinsicSpec) -> Callable[..., Vec]:
    vt = spec.vtype

    def method(
        self: Any,
        a: Any,
        lane_map: Any,
        switches: int = 0,
        income: Any = None,
        predicate: Any = True,
        polarity: Any = False,
    ) -> Vec:
        _operand(self, spec, "a", a, vt, scalar_ok=False)
        lanes = np.broadcast_to(np.asarray(lane_map, dtype=np.int64), (vt.lanes,))
        inc = a if income is None else income
        return emit(self, spec, (a, inc), (K_SRC, K_SRC), (tuple(lanes.tolist()),), predicate, polarity, income)

    return method


def _convert(spec: IntrinsicSpec) -> Callable[..., Vec]:
    vt = spec.vtype
    target = spec.out.dtype.type if spec.out is not None else None

    def method(
        self: Any, a: Any, switches: int = SW_RHNE, income: Any = None, predicate: Any = True, polarity: Any = False
    ) -> Vec:
        _operand(self, spec, "a", a, vt, scalar_ok=False)
        return emit(self, spec, (a,), (K_SRC,), (switches, target), predicate, polarity, income)

    return method


def _lane_id(spec: IntrinsicSpec) -> Callable[..., Vec]:
    lanes = spec.vtype.lanes

    def method(self: Any, switches: int = 0, income: Any = None, predicate: Any = True, polarity: Any = False) -> Vec:
        return emit(self, spec, (), (), (lanes,), predicate, polarity, income)

    return method


def _bits(spec: IntrinsicSpec) -> Callable[..., Vec]:
    out = spec.out

    def method(self: Any, a: Any) -> Vec:
        if not isinstance(a, Vec) or a.vtype.is_predicate:
            raise _type_error(self, spec, "a", a, "a vector")
        op = opcode(Op((spec.sem, (a.vtype.code,), (out.dtype,), out.code, a.vtype.code, None), (), alias=True))
        return self._t.value_entry(op, (a,), out.code)

    return method


def _chain(steps: list[tuple[int, int, int]], op_cls: int) -> tuple[tuple[Any, ...], ...]:
    """Micro-ops of a macro (reduction, special function): ``(slot, class, memory)`` steps, each on the last."""
    kinds = [K_ACC if c == C_FMA and op_cls == C_FMA and i > 0 else K_SRC for i, (_, c, _) in enumerate(steps)]
    first = steps[0]
    uops = [(first[0], first[1], first[2], -1, (0,), (K_SRC,))]
    uops += [(sl, c, m, -1, (PREV,), (kinds[i + 1],)) for i, (sl, c, m) in enumerate(steps[1:])]
    return tuple(uops)


def _macro(spec: IntrinsicSpec, uops: tuple[tuple[Any, ...], ...]) -> PerContext:
    vt = spec.vtype
    op = opcode(Op((spec.sem, (vt.code,), (), vt.code, vt.code, None), uops))

    def method(self: Any, x: Any) -> Vec:
        _operand(self, spec, "x", x, vt, scalar_ok=False)
        self._uses_lookup(spec.name)
        return self._t.value_entry(op, (x,), vt.code)

    fast = opcode(Op((spec.sem, (vt.code,), (), vt.code, vt.code, None), uops, layout=L_V))
    return PerContext(method, unary_maker(vt.code, fast))


def _reduce(spec: IntrinsicSpec) -> PerContext:
    steps: list[tuple[int, int, int]] = [(LOAD, C_LOOKUP, M_LOOKUP)]  # the shuffle maps come from a LOOKUP
    movers = [C_MDG, C_MDG, C_SHUF] + [C_SHUF] * 5  # MOV_DUAL_GROUP, MOV_DUAL_GROUP, MOV_GROUP, then SHUFFLE
    for i in range(int(np.log2(spec.vtype.lanes))):
        steps += [(VPU, movers[i], 0), (VPU, C_VPU, 0)]
    return _macro(spec, _chain(steps, C_VPU))


def _special(spec: IntrinsicSpec) -> PerContext:
    macs = SPECIAL_MACS[spec.name.split("_")[1]]
    # GET_LUT_ENTRY_AND_INTERVAL_START, LOOKUP of the coefficients, the polynomial, CALC_FP_SPECIAL
    steps = [(VPU, C_VPU, 0), (LOAD, C_LOOKUP, M_LOOKUP)] + [(VPU, C_FMA, 0)] * macs + [(VPU, C_VPU, 0)]
    return _macro(spec, _chain(steps, C_FMA))


def _widen(spec: IntrinsicSpec) -> Callable[..., Pair]:
    def method(self: Any, a: Any, switches: int = 0) -> Pair:
        _operand(self, spec, "a", a, spec.vtype, scalar_ok=False)
        halves = [emit(self, spec, (a,), (K_SRC,), (h,), True, False, None) for h in (0, 1)]
        return Pair(halves[0], halves[1])

    return method


def _narrow(spec: IntrinsicSpec) -> Callable[..., Vec]:
    def method(self: Any, pair: Any, switches: int = SW_RHNE) -> Vec:
        if not isinstance(pair, Pair):
            raise _type_error(self, spec, "pair", pair, "a float128 Pair")
        _operand(self, spec, "pair.v1", pair.v1, spec.vtype, scalar_ok=False)
        _operand(self, spec, "pair.v2", pair.v2, spec.vtype, scalar_ok=False)
        return emit(self, spec, (pair.v1, pair.v2), (K_SRC, K_SRC), (), True, False, None)

    return method


def _coords(coords: Any) -> bytes:
    """Coordinates as the bytes of an int32[5] (other shapes padded with 0 or cut to 5)."""
    c = coords.tolist() if type(coords) is np.ndarray else list(coords)
    c = (list(c) + [0] * 5)[:5]
    return np.clip(np.array(c, dtype=np.int64), -(2**31), 2**31 - 1).astype(np.int32).tobytes()


def _record_access(ctx: Any, op: int, coords: Any, value: Any) -> int:
    """Record a tensor load (``value`` None) or store in full: its entry, coordinates and call site."""
    t = ctx._t
    view = coords_view(ctx, coords)
    t.cb.extend(_coords(coords) if view is None else view)
    n = t.push(op)
    if value is not None:
        t.xs.append(value)
    if t.locating:
        f = _getframe(2)
        while f.f_code.co_filename in _OWN_FILES and f.f_back is not None:
            f = f.f_back
        t.codes.append(f.f_code)
        t.lastis.append(f.f_lasti)
    return n


def _ld_tnsr(spec: IntrinsicSpec) -> PerContext:
    vt = spec.vtype
    vcode = vt.code

    def method(
        self: Any,
        coords: Any,
        tensor: int,
        switches: int = 0,
        income: Any = None,
        predicate: Any = True,
        polarity: Any = False,
    ) -> Vec:
        t = self._t
        if self._tensor_code.get(tensor) != vcode:
            self._bad_tensor(spec, tensor)
        if tensor in t.dirty:
            self._before_reload(tensor)
        if not (predicate is True and polarity is False) and not (bool(predicate) ^ bool(polarity)):
            # predicated off: the income, no memory access
            mov = INTRINSICS[f"v_{vt.prefix}_mov_b"]
            return emit(self, mov, (0 if income is None else income,), (K_SRC,), (), True, False, None, None, C_LD)
        _record_access(self, tensor_opcode(vt, tensor, False), coords, None)
        return next(t.handles[vcode])

    return PerContext(method, load_maker(vcode))


def _st_tnsr(spec: IntrinsicSpec) -> PerContext:
    vt = spec.vtype
    vcode = vt.code
    off: dict[int, int] = {}

    def method(
        self: Any, coords: Any, tensor: int, value: Any, switches: int = 0, predicate: Any = True, polarity: Any = False
    ) -> None:
        t = self._t
        if self._tensor_code.get(tensor) != vcode:
            self._bad_tensor(spec, tensor)
        if not isinstance(value, Vec) or code_of(value, 15) != vcode:
            raise _type_error(self, spec, "value", value, vt.name)
        if not (predicate is True and polarity is False) and not (bool(predicate) ^ bool(polarity)):
            op = off.get(tensor)  # predicated off: the instruction issues, nothing is written
            if op is None:
                op = off[tensor] = opcode(Op(None, ((STORE, C_NONE, M_GST, tensor, (0,), (K_STV,)),), refs=(0,)))
            t.entry(op, (value,))
            return
        _record_access(self, tensor_opcode(vt, tensor, True), coords, value)
        self._stored.add(tensor)
        t.mark_stored(tensor)

    return PerContext(method, store_maker(vcode))


def _ld_l_v(spec: IntrinsicSpec) -> Callable[..., Vec]:
    def method(
        self: Any, addr: int, switches: int = 0, income: Any = None, predicate: Any = True, polarity: Any = False
    ) -> Vec:
        return self._vlm_load(spec, int(addr), predicate, polarity, income)

    return method


def _st_l_v(spec: IntrinsicSpec) -> Callable[..., None]:
    def method(
        self: Any, addr: int, value: Any, switches: int = 0, predicate: Any = True, polarity: Any = False
    ) -> None:
        if not isinstance(value, Vec) or value.vtype is not spec.vtype:
            raise _type_error(self, spec, "value", value, spec.vtype.name)
        self._vlm_store(spec, int(addr), value, predicate, polarity)

    return method


#: The method maker of each signature family.
FAMILIES: dict[str, Callable[[IntrinsicSpec], Any]] = {
    "binary": _binary,
    "unary": _unary,
    "mac": _mac,
    "sel": _sel,
    "shuffle": _shuffle,
    "convert": _convert,
    "lane_id": _lane_id,
    "bits": _bits,
    "reduce": _reduce,
    "special": _special,
    "widen": _widen,
    "narrow": _narrow,
    "ld_tnsr": _ld_tnsr,
    "st_tnsr": _st_tnsr,
    "ld_l_v": _ld_l_v,
    "st_l_v": _st_l_v,
}


def method(spec: IntrinsicSpec) -> Any:
    """The context method of ``spec`` (or its :class:`PerContext` descriptor), named and documented after it."""
    made = FAMILIES[spec.family](spec)
    fn = made.plain if isinstance(made, PerContext) else made
    fn.__name__ = fn.__qualname__ = spec.name
    fn.__doc__ = f"TPC-C ``{spec.name}`` ({spec.family}; {['load', 'spu', 'vpu', 'store'][spec.slot]} slot)."
    if isinstance(made, PerContext):
        made.__name__, made.__doc__ = fn.__name__, fn.__doc__
    return made
