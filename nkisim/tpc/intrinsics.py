"""The TPC-C intrinsics under their real names: one table of specs, methods made from it by signature family.

Each :class:`IntrinsicSpec` says, for one name (``v_f32_add_b``, ``v_bf16_ld_tnsr_b``, ...): its
family (which fixes the Python signature, as in ``tpc-intrinsics.h``), the VLIW slot and latency
class of the instruction it becomes, its numpy semantics, and its operand and result types.
:func:`method` turns a spec into a method of :class:`nkisim.tpc.TpcContext`; nothing dispatches
on names. Every signature keeps the TPC-C tail ``(switches, income, predicate, polarity)``;
``_b`` takes a scalar predicate, ``_vb`` a vector predicate (``bool64/128/256``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nkisim.tpc.semantics import SEM, SPECIAL_FUNCTIONS, SW_RHNE
from nkisim.tpc.trace import (
    C_CMP,
    C_FMA,
    C_LD,
    C_LOOKUP,
    C_MDG,
    C_NONE,
    C_SHUF,
    C_VPU,
    COORDS,
    K_ACC,
    K_PRED,
    K_SRC,
    K_STV,
    LOAD,
    M_GLD,
    M_GST,
    M_LOOKUP,
    SCALAR,
    STORE,
    VPU,
)
from nkisim.tpc.types import BY_PREFIX, VTYPES, Pair, Vec, VType, code_of, node_of, predicate_type


@dataclass(frozen=True)
class IntrinsicSpec:
    """One intrinsic.

    Attributes:
        name: the TPC-C name.
        family: the signature family (``binary``, ``ld_tnsr``, ``sel``, ...).
        slot: the VLIW slot of its instruction (``LOAD``, ``VPU``, ``STORE`` codes).
        cls: its producer latency class.
        sem: the semantics id (-1: a tensor load).
        vtype: the operand element type.
        out: the result type (None: no result).
        vector_predicate: the ``_vb`` form.
        extra: family-specific constants (the other operand type of a select, a conversion target).
    """

    name: str
    family: str
    slot: int
    cls: int
    sem: int
    vtype: VType
    out: VType | None
    vector_predicate: bool = False
    extra: Any = None


#: Every intrinsic, by TPC-C name.
INTRINSICS: dict[str, IntrinsicSpec] = {}


def _add(spec: IntrinsicSpec) -> None:
    INTRINSICS[spec.name] = spec


_FLOATS = ("f32", "bf16", "f16")
_ALL = ("f32", "bf16", "f16", "i32", "u32", "i16", "u16", "i8", "u8")

for _p in _ALL:
    _vt = BY_PREFIX[_p]
    _add(IntrinsicSpec(f"v_{_p}_ld_tnsr_b", "ld_tnsr", LOAD, C_LD, -1, _vt, _vt))
    _add(IntrinsicSpec(f"v_{_p}_st_tnsr", "st_tnsr", STORE, C_NONE, -1, _vt, None))
    _add(IntrinsicSpec(f"v_{_p}_ld_l_v_b", "ld_l_v", LOAD, C_LD, SEM["mov"], _vt, _vt))
    _add(IntrinsicSpec(f"v_{_p}_st_l_v", "st_l_v", STORE, C_NONE, -1, _vt, None))
    _pred = predicate_type(_vt.lanes)
    for _op in ("add", "sub", "mul", "max", "min"):
        fma = _p in _FLOATS and (_op == "mul" or (_p == "f16" and _op in ("add", "sub")))
        for _vb in (False, True):
            _add(
                IntrinsicSpec(
                    f"v_{_p}_{_op}_{'vb' if _vb else 'b'}",
                    "binary",
                    VPU,
                    C_FMA if fma else C_VPU,
                    SEM[_op],
                    _vt,
                    _vt,
                    _vb,
                )
            )
    for _op in ("abs", "mov"):
        for _vb in (False, True):
            _add(IntrinsicSpec(f"v_{_p}_{_op}_{'vb' if _vb else 'b'}", "unary", VPU, C_VPU, SEM[_op], _vt, _vt, _vb))
    for _cond in ("eq", "neq", "less", "leq", "grt", "geq"):
        _add(IntrinsicSpec(f"v_{_p}_cmp_{_cond}_b", "binary", VPU, C_CMP, SEM[f"cmp_{_cond}"], _vt, _pred))
        for _q in _ALL:
            _qt = BY_PREFIX[_q]
            if _qt.lanes == _vt.lanes:  # v_<result>_sel_<cond>_<compared>_b(a, b, c, d)
                for _vb in (False, True):
                    _add(
                        IntrinsicSpec(
                            f"v_{_q}_sel_{_cond}_{_p}_{'vb' if _vb else 'b'}",
                            "sel",
                            VPU,
                            C_VPU,
                            SEM[f"sel_{_cond}"],
                            _vt,
                            _qt,
                            _vb,
                        )
                    )
    for _vb in (False, True):
        _add(
            IntrinsicSpec(
                f"v_{_p}_shuffle_{'vb' if _vb else 'b'}", "shuffle", VPU, C_SHUF, SEM["shuffle"], _vt, _vt, _vb
            )
        )
for _p in ("f32", "bf16"):
    for _vb in (False, True):
        _add(
            IntrinsicSpec(
                f"v_{_p}_mac_{'vb' if _vb else 'b'}", "mac", VPU, C_FMA, SEM["mac"], BY_PREFIX[_p], BY_PREFIX[_p], _vb
            )
        )
for _p in ("f32", "bf16", "i32"):
    for _op in ("add", "max", "min"):
        _add(
            IntrinsicSpec(
                f"v_{_p}_reduce_{_op}", "reduce", VPU, C_VPU, SEM[f"reduce_{_op}"], BY_PREFIX[_p], BY_PREFIX[_p]
            )
        )
for _fn in SPECIAL_FUNCTIONS:
    _add(IntrinsicSpec(f"v_{_fn}_f32", "special", VPU, C_VPU, SEM[_fn], VTYPES["float64"], VTYPES["float64"]))
for _src, _dst in (("f32", "i32"), ("bf16", "i16"), ("f16", "i16"), ("f32", "u32")):
    _add(
        IntrinsicSpec(
            f"v_convert_{_src}_to_{_dst}_b", "convert", VPU, C_VPU, SEM["to_int"], BY_PREFIX[_src], BY_PREFIX[_dst]
        )
    )
for _src, _dst in (("i32", "f32"), ("u32", "f32"), ("i16", "bf16"), ("i16", "f16")):
    _add(
        IntrinsicSpec(
            f"v_convert_{_src}_to_{_dst}_b", "convert", VPU, C_VPU, SEM["to_float"], BY_PREFIX[_src], BY_PREFIX[_dst]
        )
    )
for _bytes, _p in ((4, "u32"), (2, "u16"), (1, "u8")):
    _add(
        IntrinsicSpec(f"read_lane_id_{_bytes}b_b", "lane_id", VPU, C_VPU, SEM["lane_id"], BY_PREFIX[_p], BY_PREFIX[_p])
    )
for _name, _vt in VTYPES.items():
    if not _vt.is_predicate:
        _add(IntrinsicSpec(f"as_{_name}", "bits", VPU, C_NONE, SEM["bits"], _vt, _vt))
_add(
    IntrinsicSpec(
        "convert_bfloat128_to_float128", "widen", VPU, C_VPU, SEM["half"], VTYPES["bfloat128"], VTYPES["float64"]
    )
)
_add(
    IntrinsicSpec(
        "convert_float128_to_bfloat128", "narrow", VPU, C_VPU, SEM["join"], VTYPES["float64"], VTYPES["bfloat128"]
    )
)

#: Polynomial MACs after the table LOOKUP of each special function (nkisim's estimate of tpc-special.h).
SPECIAL_MACS = {"exp": 4, "log": 5, "sigmoid": 6, "tanh": 6, "reciprocal": 3, "sqrt": 3, "rsqrt": 3}

# -- making methods -------------------------------------------------------------------------------


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
    if type(x) is Vec:
        if x.vtype is not vt:
            raise _type_error(ctx, spec, name, x, vt.name)
    elif not scalar_ok or not isinstance(x, (int, float, np.integer, np.floating)) or isinstance(x, bool):
        raise _type_error(ctx, spec, name, x, vt.name + (" or a scalar" if scalar_ok else ""))


def _emit(
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
) -> Vec:
    """Record one intrinsic with a result: its node and its micro-op.

    ``types`` are the operands' element types where they differ from the spec's (for scalars).
    """
    t = ctx._t
    out = out or spec.out
    vb = None
    if spec.vector_predicate:
        if type(predicate) is not Vec or predicate.vtype is not predicate_type(out.lanes):
            raise _type_error(ctx, spec, "predicate", predicate, predicate_type(out.lanes).name)
        vb = bool(polarity)
        args = (*args, predicate, 0 if income is None else income)
        kinds = (*kinds, K_PRED, K_SRC)
        types = (*(types or (spec.vtype,) * (len(args) - 2)), predicate.vtype, out)
    elif not (bool(predicate) ^ bool(polarity)):  # predicated off: the result is the income
        return _emit(
            ctx,
            INTRINSICS[f"v_{out.prefix}_mov_b"],
            (0 if income is None else income,),
            (K_SRC,),
            (),
            1,
            0,
            None,
            out,
            spec.cls,
        )
    pattern = []
    ops = []
    srcs = []
    skinds = []
    level = 0
    base = t.base
    node_uop = t.node_uop
    for p, (x, k) in enumerate(zip(args, kinds)):
        if type(x) is Vec:
            i = x.id
            pattern.append(x.vtype.code)
            ops.append(i)
            srcs.append(node_uop[i])
            skinds.append(k)
            if i >= base and t.level[i] >= level:
                level = t.level[i] + 1
        else:
            pattern.append(SCALAR - (types[p] if p < len(types) else spec.vtype).code)
            ops.append(x)
    u = t.uop(spec.slot, spec.cls if cls is None else cls, tuple(srcs), tuple(skinds))
    return t.node((spec.sem, tuple(pattern), statics, out.code, spec.vtype.code, vb), tuple(ops), out, level, u)


_PLAIN_SCALARS = (float, int)


def _binary(spec: IntrinsicSpec) -> Callable[..., Vec]:
    vt, out, cls, sem = spec.vtype, spec.out, spec.cls, spec.sem
    assert out is not None
    key_vv = (sem, (vt.code, vt.code), (0,), out.code, vt.code, None)
    key_vs = (sem, (vt.code, SCALAR - vt.code), (0,), out.code, vt.code, None)
    vcode = vt.code
    fast_ok = not spec.vector_predicate

    def method(
        self: Any, a: Any, b: Any, switches: int = 0, income: Any = None, predicate: Any = True, polarity: Any = False
    ) -> Vec:
        if (
            fast_ok
            and predicate is True
            and polarity is False
            and switches == 0
            and type(a) is Vec
            and code_of(a, 15) == vcode
        ):
            # the common case, recorded without the generic path
            t = self._t
            base = t.base
            level = t.level
            nu = t.node_uop
            ia = node_of(a, 4)
            lv = level[ia] + 1 if ia >= base else 0
            tb = type(b)
            if tb is Vec and code_of(b, 15) == vcode:
                ib = node_of(b, 4)
                if ib >= base and level[ib] >= lv:
                    lv = level[ib] + 1
                key, ops, uop = key_vv, (ia, ib), (VPU, cls, nu[ia], nu[ib], -1, -1, 0, 0, 0, 0, 0, -1)
            elif tb in _PLAIN_SCALARS and tb is not bool:
                key, ops, uop = key_vs, (ia, b), (VPU, cls, nu[ia], -1, -1, -1, 0, 0, 0, 0, 0, -1)
            else:
                _operand(self, spec, "b", b, vt)
                raise AssertionError  # pragma: no cover (numpy scalars take the generic path)
            nu.append(len(t.uops))
            t.uops.append(uop)
            n = len(t.key)
            t.key.append(key)
            t.ops.append(ops)
            level.append(lv)
            return Vec(n, out)
        if type(a) is not Vec or a.vtype is not vt:
            _operand(self, spec, "a", a, vt)
        if type(b) is not Vec or b.vtype is not vt:
            _operand(self, spec, "b", b, vt)
        return _emit(self, spec, (a, b), (K_SRC, K_SRC), (switches,), predicate, polarity, income)

    return method


def _unary(spec: IntrinsicSpec) -> Callable[..., Vec]:
    vt = spec.vtype

    def method(
        self: Any, a: Any, switches: int = 0, income: Any = None, predicate: Any = True, polarity: Any = False
    ) -> Vec:
        _operand(self, spec, "a", a, vt, scalar_ok=spec.sem == SEM["mov"])
        return _emit(self, spec, (a,), (K_SRC,), (switches,), predicate, polarity, income)

    return method


def _mac(spec: IntrinsicSpec) -> Callable[..., Vec]:
    vt = spec.vtype

    def method(
        self: Any, a: Any, b: Any, accumulator: Any, switches: int = 0, predicate: Any = True, polarity: Any = False
    ) -> Vec:
        _operand(self, spec, "a", a, vt)
        _operand(self, spec, "b", b, vt)
        _operand(self, spec, "accumulator", accumulator, vt, scalar_ok=False)
        return _emit(
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
        return _emit(
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
        return _emit(self, spec, (a, inc), (K_SRC, K_SRC), (tuple(lanes.tolist()),), predicate, polarity, income)

    return method


def _convert(spec: IntrinsicSpec) -> Callable[..., Vec]:
    vt = spec.vtype
    target = spec.out.dtype.type if spec.out is not None else None

    def method(
        self: Any, a: Any, switches: int = SW_RHNE, income: Any = None, predicate: Any = True, polarity: Any = False
    ) -> Vec:
        _operand(self, spec, "a", a, vt, scalar_ok=False)
        return _emit(self, spec, (a,), (K_SRC,), (switches, target), predicate, polarity, income)

    return method


def _lane_id(spec: IntrinsicSpec) -> Callable[..., Vec]:
    lanes = spec.vtype.lanes

    def method(self: Any, switches: int = 0, income: Any = None, predicate: Any = True, polarity: Any = False) -> Vec:
        return _emit(self, spec, (), (), (lanes,), predicate, polarity, income)

    return method


def _bits(spec: IntrinsicSpec) -> Callable[..., Vec]:
    out = spec.out

    def method(self: Any, a: Any) -> Vec:
        if type(a) is not Vec or a.vtype.is_predicate:
            raise _type_error(self, spec, "a", a, "a vector")
        t = self._t
        level = t.level[a.id] + 1 if a.id >= t.base else 0
        return t.node(
            (spec.sem, (a.vtype.code,), (out.dtype,), out.code, a.vtype.code, None),
            (a.id,),
            out,
            level,
            t.node_uop[a.id],
        )

    return method


def _chain(ctx: Any, x: Vec, steps: list[tuple[int, int, int]], op_cls: int) -> int:
    """Micro-ops of a macro (reduction, special function): ``(slot, class, memory)`` steps, each on the last."""
    t = ctx._t
    uops = t.uops
    base = len(uops)
    (slot, cls, mem), rest = steps[0], steps[1:]
    uops.append((slot, cls, t.node_uop[x.id], -1, -1, -1, K_SRC, 0, 0, 0, mem, -1))
    kinds = [K_ACC if c == C_FMA and op_cls == C_FMA and i > 0 else K_SRC for i, (_, c, _) in enumerate(steps)]
    uops.extend([(sl, c, base + i, -1, -1, -1, kinds[i + 1], 0, 0, 0, m, -1) for i, (sl, c, m) in enumerate(rest)])
    return len(uops) - 1


def _reduce(spec: IntrinsicSpec) -> Callable[..., Vec]:
    vt = spec.vtype
    steps: list[tuple[int, int, int]] = [(LOAD, C_LOOKUP, M_LOOKUP)]  # the shuffle maps come from a LOOKUP
    movers = [C_MDG, C_MDG, C_SHUF] + [C_SHUF] * 5  # MOV_DUAL_GROUP, MOV_DUAL_GROUP, MOV_GROUP, then SHUFFLE
    for i in range(int(np.log2(vt.lanes))):
        steps += [(VPU, movers[i], 0), (VPU, C_VPU, 0)]

    def method(self: Any, x: Any) -> Vec:
        _operand(self, spec, "x", x, vt, scalar_ok=False)
        self._uses_lookup(spec.name)
        t = self._t
        u = _chain(self, x, steps, C_VPU)
        level = t.level[x.id] + 1 if x.id >= t.base else 0
        return t.node((spec.sem, (vt.code,), (), vt.code, vt.code, None), (x.id,), vt, level, u)

    return method


def _special(spec: IntrinsicSpec) -> Callable[..., Vec]:
    vt = spec.vtype
    macs = SPECIAL_MACS[spec.name.split("_")[1]]
    # GET_LUT_ENTRY_AND_INTERVAL_START, LOOKUP of the coefficients, the polynomial, CALC_FP_SPECIAL
    steps = [(VPU, C_VPU, 0), (LOAD, C_LOOKUP, M_LOOKUP)] + [(VPU, C_FMA, 0)] * macs + [(VPU, C_VPU, 0)]

    def method(self: Any, x: Any) -> Vec:
        _operand(self, spec, "x", x, vt, scalar_ok=False)
        self._uses_lookup(spec.name)
        t = self._t
        u = _chain(self, x, steps, C_FMA)
        level = t.level[x.id] + 1 if x.id >= t.base else 0
        return t.node((spec.sem, (vt.code,), (), vt.code, vt.code, None), (x.id,), vt, level, u)

    return method


def _widen(spec: IntrinsicSpec) -> Callable[..., Pair]:
    def method(self: Any, a: Any, switches: int = 0) -> Pair:
        _operand(self, spec, "a", a, spec.vtype, scalar_ok=False)
        halves = [_emit(self, spec, (a,), (K_SRC,), (h,), True, False, None) for h in (0, 1)]
        return Pair(halves[0], halves[1])

    return method


def _narrow(spec: IntrinsicSpec) -> Callable[..., Vec]:
    def method(self: Any, pair: Any, switches: int = SW_RHNE) -> Vec:
        if not isinstance(pair, Pair):
            raise _type_error(self, spec, "pair", pair, "a float128 Pair")
        _operand(self, spec, "pair.v1", pair.v1, spec.vtype, scalar_ok=False)
        _operand(self, spec, "pair.v2", pair.v2, spec.vtype, scalar_ok=False)
        return _emit(self, spec, (pair.v1, pair.v2), (K_SRC, K_SRC), (), True, False, None)

    return method


def _coords(coords: Any) -> tuple[int, ...]:
    c = coords.tolist() if type(coords) is np.ndarray else list(coords)
    return tuple(c) if len(c) == 5 else tuple(c[:5]) + (0,) * (5 - len(c))


def _ld_tnsr(spec: IntrinsicSpec) -> Callable[..., Vec]:
    vt = spec.vtype
    lanes = vt.lanes
    key_tail = (vt.code, vt.code, None)
    keys: dict[int, tuple[Any, ...]] = {}

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
        if tensor not in self._tensor_ok or t.tensors[tensor].vtype is not vt:
            self._bad_tensor(spec, tensor)
        if tensor in t.dirty:
            self._before_reload(tensor)
        if not (predicate is True and polarity is False) and not (bool(predicate) ^ bool(polarity)):
            # predicated off: the income, no memory access
            mov = INTRINSICS[f"v_{vt.prefix}_mov_b"]
            return _emit(self, mov, (0 if income is None else income,), (K_SRC,), (), True, False, None, None, C_LD)
        c = tuple(coords.tolist()) if type(coords) is np.ndarray and coords.shape == (5,) else _coords(coords)
        f = sys._getframe(1)
        t.access.append((tensor, self._member, c, lanes, False, f.f_code, f.f_lineno))
        key = keys.get(tensor)
        if key is None:
            key = keys[tensor] = (-1, (COORDS,), (tensor, lanes), *key_tail)
        u = len(t.uops)
        t.uops.append((LOAD, C_LD, -1, -1, -1, -1, 0, 0, 0, 0, M_GLD, tensor))
        n = len(t.key)
        t.key.append(key)
        t.ops.append((c,))
        t.level.append(0)
        t.node_uop.append(u)
        return Vec(n, vt)

    return method


def _st_tnsr(spec: IntrinsicSpec) -> Callable[..., None]:
    vt = spec.vtype
    lanes = vt.lanes
    vcode = vt.code

    def method(
        self: Any, coords: Any, tensor: int, value: Any, switches: int = 0, predicate: Any = True, polarity: Any = False
    ) -> None:
        t = self._t
        if tensor not in self._tensor_ok or t.tensors[tensor].vtype is not vt:
            self._bad_tensor(spec, tensor)
        if type(value) is not Vec or code_of(value, 15) != vcode:
            raise _type_error(self, spec, "value", value, vt.name)
        t.uops.append((STORE, C_NONE, t.node_uop[node_of(value, 4)], -1, -1, -1, K_STV, 0, 0, 0, M_GST, tensor))
        if not (predicate is True and polarity is False) and not (bool(predicate) ^ bool(polarity)):
            return
        c = tuple(coords.tolist()) if type(coords) is np.ndarray and coords.shape == (5,) else _coords(coords)
        f = sys._getframe(1)
        t.access.append((tensor, self._member, c, lanes, True, f.f_code, f.f_lineno))
        t.pending.append((tensor, c, node_of(value, 4), lanes))
        t.dirty.add(tensor)
        self._stored.add(tensor)

    return method


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
        if type(value) is not Vec or value.vtype is not spec.vtype:
            raise _type_error(self, spec, "value", value, spec.vtype.name)
        self._vlm_store(spec, int(addr), value, predicate, polarity)

    return method


#: The method maker of each signature family.
FAMILIES: dict[str, Callable[[IntrinsicSpec], Callable[..., Any]]] = {
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


def method(spec: IntrinsicSpec) -> Callable[..., Any]:
    """The context method of ``spec``, named and documented after it."""
    fn = FAMILIES[spec.family](spec)
    fn.__name__ = fn.__qualname__ = spec.name
    fn.__doc__ = f"TPC-C ``{spec.name}`` ({spec.family}; {['load', 'spu', 'vpu', 'store'][spec.slot]} slot)."
    return fn
