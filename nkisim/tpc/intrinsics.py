"""The TPC-C intrinsics under their real names: one table of specs, methods made from it by signature family.

Each :class:`IntrinsicSpec` says, for one name (``v_f32_add_b``, ``v_bf16_ld_tnsr_b``, ...): its
family (which fixes the Python signature, as in ``tpc-intrinsics.h``), the VLIW slot and latency
class of the instruction it becomes, its numpy semantics, and its operand and result types.
:func:`nkisim.tpc.families.method` turns a spec into a method of :class:`nkisim.tpc.TpcContext`;
nothing dispatches on names. Every signature keeps the TPC-C tail ``(switches, income, predicate, polarity)``;
``_b`` takes a scalar predicate, ``_vb`` a vector predicate (``bool64/128/256``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nkisim.tpc.semantics import SEM, SPECIAL_FUNCTIONS
from nkisim.tpc.trace import C_CMP, C_FMA, C_LD, C_NONE, C_SHUF, C_VPU, LOAD, STORE, VPU
from nkisim.tpc.types import BY_PREFIX, VTYPES, VType, predicate_type


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
