"""Plans: what one instruction's operand geometry decides, worked out once per machine.

An instruction's engine, the outcome of its rules (the target's capabilities,
``check_common``, the spec's ``validate``), its cost and its operand summary depend only
on its opcode, its scalar arguments and the geometry of its tensor operands
(:attr:`~nkisim.memory.Tensor.geometry`: dtype, buffer, shape, strides, partition rows on chip),
never on the operands' byte addresses (within a partition, on chip) or their values. A kernel issues
the same few instructions with the same geometries many times over, so a :class:`Plans`
table keeps those results under a key made of exactly those inputs and hands them back,
with the tensors of the new call bound in, instead of working them out again.

Only calls whose every argument can be keyed exactly get a plan: tensors with a geometry
(not dynamic, not defective), and scalars of a few immutable kinds, told apart strictly
(``1``, ``1.0`` and ``True``; ``0.0`` and ``-0.0``; an isa operator and the ``nl`` constant
equal to it). Anything else (a register, a dynamic access pattern, a list holding tensors,
an array) takes the full path every time. A call whose rules fail raises before its plan
is kept, so a plan is the record of a call that passed.

A table belongs to one machine (one core of one run) and holds at most :data:`MAX_PLANS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from nkisim.errors import SourceLoc
from nkisim.hw import Engine
from nkisim.isa import Cost, InstructionSpec
from nkisim.isa.ops import Op
from nkisim.memory import ON_CHIP_BUFFERS, Region, Tensor

#: Plans one machine keeps; a kernel whose scalars change at every call stops adding past it.
MAX_PLANS = 4096

#: Scalar kinds keyed by (class, value): immutable, and equal only to values that behave alike.
_PLAIN = (int, bool, str, type(None))
#: Argument kinds keyed by (class, id): operators and enum members, told apart by identity (an isa operator and
#: the ``nl`` constant equal to it), without calling their Python-level ``__hash__`` at every call.
_PINNED = (Op, Enum)


@dataclass(frozen=True, slots=True)
class Plan:
    """What a call's operand geometry decided.

    Attributes:
        engine: the engine it runs on.
        cost: its cost, with ``setup_key`` to be rebound to the region of ``setup_operand``
            (None: the cost is worked out at every call).
        setup_operand: the tensor argument whose region is the cost's ``setup_key``, or None.
        summary: the operand summary for the timeline.
        template: the validated operand values without the tensor operands, from which the
            operand model is made without validating again; None: validated at every call.
        tensors: the arguments that are tensors (bound into ``template``).
        fields_set: the model's explicitly given fields.
        reads, writes: the tensor arguments read and written, in the spec's order (None: the operand
            model's ``accessed()`` gives views of its arguments, so each call asks it).
        adds: the spec's ``accumulates`` verdict (True, None: inferred, False), which reads only scalar arguments.
        direct: the call's regions are its tensor arguments' (the plain reads and writes, no extra accesses), its
            cost is the kept one and it meets no other core: it is queued with a row of the scheduler made once
            per site (:meth:`nkisim.sim.scheduler.Scheduler.row`).
        lazy: direct, with a template: nothing but the sanitizer's rare paths needs the call's operand model
            unless the run computes values, so a shapes-only run makes it only when asked.
        on_chip: every tensor it reads and writes is an SBUF or PSUM view (so no HBM tensor's poison waits on it).
        rows: a direct plan's scheduler rows (:meth:`nkisim.sim.scheduler.Scheduler.row`) by source line (and
            unit), each with its line, kept by the machine that owns the plan.
        pinned: the operator and enum arguments, kept alive so that no other object takes the ids the
            key names them by.
    """

    engine: Engine
    cost: Cost | None
    setup_operand: str | None
    summary: tuple[tuple[str, object], ...]
    template: dict[str, Any] | None
    tensors: tuple[str, ...]
    fields_set: frozenset[str]
    reads: tuple[str, ...] | None
    writes: tuple[str, ...] | None
    adds: bool | None = False
    direct: bool = False
    lazy: bool = False
    on_chip: bool = False
    pinned: tuple[object, ...] = ()
    rows: dict[object, tuple[SourceLoc, tuple[object, ...]]] = field(default_factory=dict, compare=False, repr=False)


def call_key(opcode: str, arguments: dict[str, Any]) -> tuple[object, ...] | None:
    """The key of a call's plan, or None when some argument cannot be keyed exactly."""
    key: list[object] = [opcode]
    append = key.append
    for name, value in arguments.items():
        cls = value.__class__
        if cls is Tensor:
            geometry = value._geometry  # worked out once per view (the property's memo)
            if geometry is None:
                geometry = value.geometry
                if geometry is None:
                    return None
            append(name)
            append(geometry)
            continue
        if cls in _PLAIN:
            append(name)
            append((cls, value))
            continue
        if isinstance(value, _PINNED):  # the very object, named by its id: the plan keeps it alive (Plan.pinned)
            append(name)
            append((cls, id(value)))
            continue
        scalar = _scalar_key(value, cls)
        if scalar is None:
            return None
        append(name)
        append(scalar)
    return tuple(key)


def _scalar_key(value: object, cls: type) -> tuple[object, ...] | None:
    if cls in _PLAIN:
        return (cls, value)
    if cls is float:
        if value != value:  # NaN: its payload is not told apart by equality
            return None
        return (cls, value, math.copysign(1.0, value))  # type: ignore[arg-type]
    if isinstance(value, (Enum, Op)):
        return (cls, id(value), value)  # the very object (kept alive by the key)
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return (cls, value.dtype, value.tobytes())
    if isinstance(value, np.dtype):
        return (cls, id(value), value)
    if cls is tuple or cls is list:
        items = []
        for item in value:  # type: ignore[attr-defined]
            if item.__class__ is Tensor:
                return None
            inner = _scalar_key(item, item.__class__)
            if inner is None:
                return None
            items.append(inner)
        return (cls, *items)
    return None


def make_plan(
    spec: InstructionSpec,
    arguments: dict[str, Any],
    ops: Any,
    engine: Engine,
    cost: Cost,
    summary: tuple[tuple[str, object], ...],
) -> Plan:
    """The plan of a call that has just passed its rules, with the results worked out for it."""
    values = ops.__dict__
    tensors = tuple(name for name, value in arguments.items() if value.__class__ is Tensor)
    template: dict[str, Any] | None = {k: v for k, v in values.items() if k not in tensors}
    if any(v.__class__ in (list, dict, set) or isinstance(v, np.ndarray) for v in template.values()):  # type: ignore[union-attr]
        template = None  # a mutable value: each call gets its own, from the model
    if spec.operands.__pydantic_post_init__ is not None or any(values.get(n) is not arguments[n] for n in tensors):
        template = None  # the model made something else of a tensor argument
    setup_operand = None
    kept: Cost | None = cost
    if cost.setup_key is not None:
        setup_operand = next((n for n in tensors if values[n].region is cost.setup_key), None)
        if setup_operand is None:
            kept = None
    reads, writes = ops.accessed()
    plain = all(t is arguments.get(n) for n, t in (*reads, *writes))  # else accessed() narrows operands: ask it
    direct = plain and kept is not None and spec.extra_accesses is None and spec.synchronise is None
    return Plan(
        engine=engine,
        cost=kept,
        setup_operand=setup_operand,
        summary=summary,
        template=template,
        tensors=tensors,
        fields_set=frozenset(ops.model_fields_set),
        reads=tuple(name for name, _ in reads) if plain else None,
        writes=tuple(name for name, _ in writes) if plain else None,
        adds=spec.accumulates(ops) if spec.accumulates is not None else False,
        direct=direct,
        lazy=direct and template is not None,
        on_chip=plain and all(t.buffer in ON_CHIP_BUFFERS for _, t in (*reads, *writes)),
        pinned=tuple(value for value in arguments.values() if isinstance(value, _PINNED)),
    )


def bind(plan: Plan, spec: InstructionSpec, arguments: dict[str, Any]) -> Any:
    """The operand model of a call with ``plan``: the template with this call's tensors."""
    values = dict(plan.template)  # type: ignore[arg-type]
    for name in plan.tensors:
        values[name] = arguments[name]
    model = spec.operands
    ops = model.__new__(model)
    _set(ops, "__dict__", values)
    _set(ops, "__pydantic_fields_set__", set(plan.fields_set))
    _set(ops, "__pydantic_extra__", None)
    _set(ops, "__pydantic_private__", None)
    return ops


def with_operands(ops: Any, values: dict[str, Any]) -> Any:
    """A copy of the operand model ``ops`` with some fields set to other values (no validation: same types)."""
    copy = ops.__class__.__new__(ops.__class__)
    _set(copy, "__dict__", {**ops.__dict__, **values})
    _set(copy, "__pydantic_fields_set__", ops.__pydantic_fields_set__)
    _set(copy, "__pydantic_extra__", None)
    _set(copy, "__pydantic_private__", None)
    return copy


def setup_region(plan: Plan, ops: Any, arguments: dict[str, Any]) -> Region:
    """The region of this call's ``setup_operand``, which the plan has (of ``arguments`` when ``ops`` is None: a
    lazy plan's template holds the very tensors of the arguments)."""
    name = plan.setup_operand
    assert name is not None  # the caller tests it: most specs have none
    return (arguments[name] if ops is None else getattr(ops, name)).region


def cost_of(plan: Plan, ops: Any) -> Cost:
    """The plan's cost, its setup tied to this call's operand."""
    cost = plan.cost
    assert cost is not None
    if plan.setup_operand is None:
        return cost
    return Cost(
        cost.busy_ns,
        cost.latency_ns,
        cost.cycles,
        cost.bytes,
        cost.flops,
        cost.setup_ns,
        getattr(ops, plan.setup_operand).region,
        cost.table,
        cost.dma_engines,
    )


_set = object.__setattr__
