"""The instruction registry: one :class:`InstructionSpec` per NKI instruction.

A spec declares, in one place:

* ``operands``: a pydantic model whose field names and defaults are NKI's arguments.
  Tensor fields are annotated :data:`In`, :data:`Out` or :data:`InOut`, which tells
  the scheduler what each instruction reads and writes.
* ``engines``: the engines it may run on (the first is the default).
* ``validate``: the documented rules, raising :class:`~nkisim.errors.KernelError`.
* ``semantics``: pure numpy over the operands' memory views, with no timing.
* ``cost``: a formula over operand shapes whose every constant comes from ``hw``.

Dispatch is by name through :data:`REGISTRY`, never by ``if`` over names.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Annotated, Any, ClassVar, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from nkisim.errors import KernelError, SourceLoc, TargetError
from nkisim.hw import Engine, HwConfig
from nkisim.hw.model import Capabilities, capability_holders
from nkisim.isa.carriers import CarrierRule
from nkisim.memory import Region, Tensor


class Access(Enum):
    """How an instruction uses a tensor operand."""

    read = "read"
    write = "write"
    read_write = "read_write"


In = Annotated[Tensor, Access.read]
Out = Annotated[Tensor, Access.write]
InOut = Annotated[Tensor, Access.read_write]
OptIn = Annotated[Tensor | None, Access.read]
OptOut = Annotated[Tensor | None, Access.write]
#: Lists of tensors (``nki.collectives``' coalesced ``srcs``/``dsts``), and lists of such lists (per channel).
InList = Annotated[list[Tensor], Access.read]
OutList = Annotated[list[Tensor], Access.write]
InLists = Annotated[list[list[Tensor]], Access.read]
OutLists = Annotated[list[list[Tensor]], Access.write]
#: A compile-time scalar or a per-partition ``(P, 1)`` tensor.
ScalarOrIn = Annotated[Tensor | float | int, Access.read]
OptScalarOrIn = Annotated[Tensor | float | int | None, Access.read]


class Operands(BaseModel):
    """Base of every operand model. Misspelled or extra arguments are rejected."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    name: str | None = None
    #: (field, access) pairs for the tensor fields, filled in by :func:`instruction`.
    tensor_fields: ClassVar[tuple[tuple[str, Access], ...]] = ()
    #: The fields that take numbers or bools and no text, filled in by :func:`instruction`.
    number_fields: ClassVar[frozenset[str]] = frozenset()

    @field_validator("*", mode="before")
    @classmethod
    def _no_text_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """Refuse text where a number or bool is meant: pydantic would read ``"3"`` as 3 and ``"no"`` as False."""
        if info.field_name in cls.number_fields and _holds_text(value):
            raise PydanticCustomError("text_for_number", "text where a number or a bool is required")
        return value

    def accessed(self) -> tuple[list[tuple[str, Tensor]], list[tuple[str, Tensor]]]:
        """The tensors read and written, each with its argument name (``srcs[1]`` for one of a list)."""
        reads: list[tuple[str, Tensor]] = []
        writes: list[tuple[str, Tensor]] = []
        for fname, access in self.tensor_fields:
            value = getattr(self, fname)
            if isinstance(value, Tensor):
                named = [(fname, value)]
            elif isinstance(value, list):
                named = list(_listed(fname, value))
            else:
                continue
            if access is not Access.write:
                reads.extend(named)
            if access is not Access.read:
                writes.extend(named)
        return reads, writes


def _listed(fname: str, values: list[Any]) -> typing.Iterator[tuple[str, Tensor]]:
    for i, value in enumerate(values):
        if isinstance(value, Tensor):
            yield f"{fname}[{i}]", value
        elif isinstance(value, list):
            yield from _listed(f"{fname}[{i}]", value)


@dataclass(frozen=True, slots=True)
class Cost:
    """What an instruction costs.

    Attributes:
        busy_ns: how long it occupies its engine, or each DMA engine it uses (the initiation interval).
        latency_ns: extra time after that until its results are visible (DMA trigger latency).
        cycles: the engine cycles behind ``busy_ns``, for reports.
        bytes: bytes moved by a DMA.
        flops: floating-point operations done by the Tensor Engine.
        setup_ns: Tensor Engine LoadStationary time, which can overlap the previous matmul.
        setup_key: the memory region the setup loads (the stationary tile); loading the same, unchanged
            region as the previous Tensor Engine instruction needs no setup.
        table: the activation table a Scalar Engine instruction needs (switching tables costs time).
        dma_engines: ``(first, count)`` of the DMA engines a transfer is spread over.
    """

    busy_ns: float
    latency_ns: float = 0.0
    cycles: float = 0.0
    bytes: int = 0
    flops: float = 0.0
    setup_ns: float = 0.0
    setup_key: object = None
    table: str | None = None
    dma_engines: tuple[int, int] | None = None


def engine_cost(hw: HwConfig, engine: Engine, cycles: float, **extra: Any) -> Cost:
    """A cost of ``cycles`` at ``engine``'s clock."""
    return Cost(busy_ns=cycles / hw.clock_ghz(engine), cycles=cycles, **extra)


@dataclass
class EngineState:
    """State that lives inside engines across instructions.

    Attributes:
        scalar_reduce_regs: the Scalar Engine's 128 fp32 accumulators (``activation``).
        vector_reduce_regs: the Vector Engine's own accumulators (``exponential``,
            ``select_reduce``, ``range_select``, ``tensor_scalar_reduce``,
            ``tensor_scalar_cumulative``).
        prng: each engine's pseudo-random generator state, ``(partitions, words)`` uint32
            per engine, made on first use by :mod:`nkisim.isa.random`.
        capabilities: what the target has (the generators' kinds, for instance).
    """

    partitions: int
    capabilities: Capabilities
    scalar_reduce_regs: np.ndarray = field(init=False)
    vector_reduce_regs: np.ndarray = field(init=False)
    prng: dict[Engine, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.scalar_reduce_regs = np.zeros(self.partitions, dtype=np.float32)
        self.vector_reduce_regs = np.zeros(self.partitions, dtype=np.float32)


@dataclass(frozen=True)
class Check:
    """Raises errors that name the kernel line, the instruction, the engine and the target."""

    instruction: str
    engine: Engine
    hw: HwConfig
    loc: SourceLoc
    #: How kernels name the instruction's module (``nisa``, ``ncc`` for ``nki.collectives``).
    namespace: str = "nisa"

    def fail(self, error: type[KernelError], operand: str, rule: str) -> typing.NoReturn:
        raise error(
            rule,
            loc=self.loc,
            instruction=f"{self.namespace}.{self.instruction}",
            engine=self.engine.title,
            target=self.hw.name,
            operand=operand,
        )


Semantics = Callable[[Any, EngineState], None]
CostFn = Callable[[Any, HwConfig, Engine], Cost]
Validator = Callable[[Any, Check], None]
EngineChooser = Callable[[Any, HwConfig], Engine]
#: ``(operands) -> (reads, writes)``: memory an instruction touches besides its tensor operands.
ExtraAccesses = Callable[[Any], tuple[list[Region], list[Region]]]


class Peer(Protocol):
    """The other programs of a multi-program launch, as a synchronising instruction sees them.

    ``program_id`` is the core within its rank (``num_programs`` cores, the LNC size);
    ``rank`` is the rank within ``num_ranks`` (``nkisim.run(..., ranks=N)``).
    """

    program_id: int
    num_programs: int
    rank: int
    num_ranks: int

    def exchange(self, key: tuple[Any, ...], payload: Any, loc: SourceLoc | None) -> list[Any]:
        """Block until every core of this rank reaches ``key``; their payloads, by core."""
        ...

    def exchange_ranks(
        self, ranks: tuple[int, ...], key: tuple[Any, ...], payload: Any, loc: SourceLoc | None
    ) -> list[Any]:
        """Block until this core of every rank in ``ranks`` reaches ``key``; their payloads, in ``ranks`` order."""
        ...


#: ``(operands) -> True | None | False``: whether the instruction adds onto ``dst``'s values
#: (an associative accumulation): always, depending on what wrote them before, or never.
Accumulates = Callable[[Any], "bool | None"]
#: ``(operands) -> reason or None``: why what the instruction does besides computing values (the control
#: flow, addresses or errors that follow it) can depend on the values it reads, in words that follow the
#: instruction's name (``"loads a register from tensor data, which can steer ..."``); None when it cannot.
ValueDependence = Callable[[Any], "str | None"]
#: ``(operands) -> bool``: True when the instruction sets every element of its ``dst`` operand and reads none of
#: ``dst``'s old values (no accumulation, mask or skipped element), so a new tile's poison under it is never seen.
Overwrites = Callable[[Any], bool]
#: ``(operands) -> (dst, src) or None``: the two views when the instruction does nothing but copy ``src``'s bits
#: into ``dst`` (static views, no arithmetic), so the copy may wait (:mod:`nkisim.memory.deferred`).
Copies = Callable[[Any], "tuple[Any, Any] | None"]
#: ``(operands) -> bool``: True when the semantics give the same bits from any views holding the same values,
#: wherever those lie and however they are laid out (and the checks read no values), so a tile whose load waits
#: may be read from the HBM view it waits in.
ReadsValues = Callable[[Any], bool]


def sets_all_of_dst(ops: Any) -> bool:
    """:data:`Overwrites` of an element-wise instruction: it always sets every element of ``dst``."""
    return True


def values_only(ops: Any) -> bool:
    """:data:`ReadsValues` of a copy or cast: element by element, whatever the layout."""
    return True


#: ``(operands, peer, arrival_ns, cost, compute, check) -> (not_before_ns, cost)``: meet the other cores.
Synchronise = Callable[[Any, "Peer | None", float, Cost, bool, Check], tuple[float, Cost]]


@dataclass(frozen=True)
class InstructionSpec:
    """Everything nkisim knows about one instruction."""

    name: str
    operands: type[Operands]
    engines: tuple[Engine, ...]
    semantics: Semantics
    cost: CostFn
    validate: Validator | None = None
    choose_engine: EngineChooser | None = None
    #: Registers, or HBM that a sequencer instruction reads: accesses the tensor operands do not show.
    extra_accesses: ExtraAccesses | None = None
    #: Multi-core instructions (``core_barrier``, ``sendrecv``): meets the other cores before being placed.
    synchronise: Synchronise | None = None
    #: Accumulating instructions (matmul into PSUM, DMA with ``dst_rmw_op``): the sanitizer lets
    #: ``affine_range`` iterations accumulate into one tile with them. It reads only scalar arguments: a plan
    #: (nkisim.sim.plans) works it out once for every call with the same scalars and operand geometries.
    accumulates: Accumulates | None = None
    #: Instructions that move never-written input elements to ``dst`` rather than use them
    #: (:mod:`nkisim.isa.carriers`): the sanitizer reports those elements where they are used.
    carries: CarrierRule | None = None
    #: Instructions that set all of ``dst`` without reading it: a new tile they write whole needs no poison fill
    #: first (:meth:`nkisim.memory.system.MemorySystem.settle_poison`). None: the fill is always made.
    overwrites: Overwrites | None = None
    #: Plain copies (``dma_copy``): a load of a whole new SBUF tile from HBM may keep its values in HBM until the
    #: tile is used (:mod:`nkisim.memory.deferred`). None: never a plain copy.
    copies: Copies | None = None
    #: Instructions that may read a waiting load's tile from HBM. None: every waiting copy is made before it.
    reads_values: ReadsValues | None = None
    #: Instructions whose effect beyond the values they write depends on values (``register_load``
    #: feeds control flow; gathers raise on out-of-range indices): a recorded program that contains one
    #: is not replayed on new inputs but run again (:mod:`nkisim.sim.program`).
    value_dependent: ValueDependence | None = None
    #: The boolean :class:`~nkisim.hw.model.Capabilities` a target needs to have this instruction.
    requires: tuple[str, ...] = ()
    #: The operand data types, in words, for docs/isa.md.
    dtypes: str = "any NKI dtype"
    doc: str = ""
    #: How kernels name the instruction's module: ``nisa`` (``nki.isa``), ``ncc`` (``nki.collectives``).
    namespace: str = "nisa"

    @functools.cached_property
    def qualname(self) -> str:
        """The name kernels call it by, as error messages give it (``nisa.tensor_tensor``, ``ncc.all_gather``)."""
        return f"{self.namespace}.{self.name}"

    @property
    def cost_formula(self) -> str:
        """The first line of the cost function's docstring (the published formula)."""
        return (self.cost.__doc__ or "").strip().splitlines()[0] if self.cost.__doc__ else ""

    @property
    def engine_names(self) -> str:
        return "/".join(e.title for e in self.engines)


REGISTRY: dict[str, InstructionSpec] = {}


def instruction(
    name: str,
    operands: type[Operands],
    engines: tuple[Engine, ...],
    cost: CostFn,
    validate: Validator | None = None,
    choose_engine: EngineChooser | None = None,
    requires: tuple[str, ...] = (),
    dtypes: str = "any NKI dtype",
    extra_accesses: ExtraAccesses | None = None,
    synchronise: Synchronise | None = None,
    registry: dict[str, InstructionSpec] | None = None,
    accumulates: Accumulates | None = None,
    carries: CarrierRule | None = None,
    value_dependent: ValueDependence | None = None,
    namespace: str = "nisa",
    overwrites: Overwrites | None = None,
    copies: Copies | None = None,
    reads_values: ReadsValues | None = None,
) -> Callable[[Semantics], Semantics]:
    """Register the decorated semantics function as instruction ``name``.

    ``requires`` names the boolean capabilities a target must have (``("mx_formats",)``);
    ``registry`` is the instruction set it joins: by default NKI's (:data:`REGISTRY`); another
    kind of engine keeps its own and hands it to :class:`nkisim.sim.Machine`. ``namespace`` is
    the module kernels call it from, as messages name it (``nisa``; ``ncc`` for ``nki.collectives``).
    """
    table = REGISTRY if registry is None else registry
    unknown = [c for c in requires if c not in Capabilities.features()]
    if unknown:
        raise ValueError(f"instruction {name} requires {unknown}, which are not boolean capabilities")

    def register(semantics: Semantics) -> Semantics:
        if name in table:
            raise ValueError(f"instruction {name} is registered twice")
        operands.tensor_fields = _tensor_fields(operands)
        operands.number_fields = _number_fields(operands)
        table[name] = InstructionSpec(
            name=name,
            operands=operands,
            engines=engines,
            semantics=semantics,
            cost=cost,
            validate=validate,
            choose_engine=choose_engine,
            extra_accesses=extra_accesses,
            synchronise=synchronise,
            accumulates=accumulates,
            carries=carries,
            value_dependent=value_dependent,
            overwrites=overwrites,
            copies=copies,
            reads_values=reads_values,
            requires=requires,
            dtypes=dtypes,
            doc=(semantics.__doc__ or "").strip(),
            namespace=namespace,
        )
        return semantics

    return register


def missing_capability(spec: InstructionSpec, hw: HwConfig) -> str | None:
    """The first capability ``spec`` requires that ``hw`` lacks, or ``None`` when it has them all."""
    return next((name for name in spec.requires if not getattr(hw.capabilities, name)), None)


def needs(capability: str) -> str:
    """The rule a target without ``capability`` breaks, naming the packaged generations that have it.

    ``needs mx_formats, which trn3 (NeuronCore-v4) has``.
    """
    holders = [f"{hw.name} ({hw.core_name})" for hw in capability_holders(capability)]
    if not holders:
        return f"needs {capability}, which no packaged generation has"
    listed = holders[0] if len(holders) == 1 else ", ".join(holders[:-1]) + " and " + holders[-1]
    return f"needs {capability}, which {listed} {'has' if len(holders) == 1 else 'have'}"


def require(chk: Check, capability: str, operand: str, rule: str) -> None:
    """Fail with ``rule`` (a :class:`TargetError`, naming ``capability``) unless the target has ``capability``."""
    if not getattr(chk.hw.capabilities, capability):
        chk.fail(TargetError, operand, f"{rule} (capability {capability})")


def _number_fields(model: type[Operands]) -> frozenset[str]:
    """The fields whose type holds int, float or bool (in a union or a container) and neither text nor an enum."""
    numbers = []
    for fname, info in model.model_fields.items():
        kinds = _leaf_types(info.annotation)
        if kinds & {int, float, bool} and not kinds & {str, Any} and not any(_is_enum(k) for k in kinds):
            numbers.append(fname)
    return frozenset(numbers)


def _leaf_types(annotation: Any) -> set[Any]:
    """The plain types an annotation is made of, through ``Annotated``, unions and containers' items."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is None or not args:
        return {annotation}
    leaves: set[Any] = set()
    for arg in args[:1] if typing.get_origin(annotation) is Annotated else args:
        if arg is not Ellipsis:
            leaves |= _leaf_types(arg)
    return leaves


def _is_enum(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, Enum)


def _holds_text(value: Any) -> bool:
    if isinstance(value, (str, bytes)):
        return True
    return isinstance(value, (list, tuple)) and any(_holds_text(v) for v in value)


def _tensor_fields(model: type[Operands]) -> tuple[tuple[str, Access], ...]:
    hints = typing.get_type_hints(model, include_extras=True)
    fields = []
    for fname in model.model_fields:
        meta = getattr(hints.get(fname), "__metadata__", ())
        access = next((m for m in meta if isinstance(m, Access)), None)
        if access is not None:
            fields.append((fname, access))
    return tuple(fields)
