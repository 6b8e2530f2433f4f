"""``run(glue_or_kernel, inputs)``: a TPC kernel over the index space on the simulated TPCs of a Gaudi.

The steps, as the graph compiler and runtime take them: call the glue (``GetGcDefinitions``), check
what it returned, lay out the tensors, split the index space among the TPCs, run the kernel once per
member (I0/I1 and the scalar parameters set), evaluate the trace, check every member's footprint
(access patterns, races, output coverage), then schedule each member's instructions into VLIW
bundles. Each TPC's members become records on its own track (``TPC 0`` .. ``TPC 23``) of the shared
execution core (:class:`nkisim.sim.Machine`), so the profile is an ordinary
:class:`nkisim.report.Profile`: kernel time = launch overhead + the slowest TPC.
"""

from __future__ import annotations

import functools
import gc
import inspect
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NewType

import numpy as np

from nkisim.errors import KernelError, SourceLoc, user_location
from nkisim.hw import Engine, HwConfig, load_target
from nkisim.hw.tpc import TpcConfig, load_gaudi
from nkisim.isa.spec import Cost, EngineState, InstructionSpec, Operands, instruction
from nkisim.memory import MemorySystem
from nkisim.report import Profile
from nkisim.sim import Instruction, Machine
from nkisim.tpc.checks import Footprint, partition
from nkisim.tpc.context import TpcContext
from nkisim.tpc.errors import TpcError, TpcGlueError, TpcSignatureError
from nkisim.tpc.glue import (
    DeviceId,
    Glue,
    HabanaKernelInstantiation,
    HabanaKernelParams,
    NodeParams,
    Tensor,
    TensorAccessPattern,
    TensorGeometry,
    data_type,
    elementwise_pattern,
    pack_params,
    unpack_word,
)
from nkisim.tpc.schedule import latency_matrix, schedule_member
from nkisim.tpc.semantics import SEMANTICS
from nkisim.tpc.trace import SLOT_NAMES, Trace, code_line
from nkisim.tpc.types import BY_DTYPE
from nkisim.tpc.values import TensorState

#: A tensor parameter of a kernel (an opaque int handle, as in TPC-C).
tensor = NewType("tensor", int)


def kernel_loc(func: Callable[..., Any]) -> SourceLoc:
    code = getattr(func, "__code__", None)
    return SourceLoc(code.co_filename, code.co_firstlineno, code.co_name) if code else SourceLoc("<unknown>", 0)


class Kernel:
    """A TPC kernel: ``fn(ctx, *tensors, *scalars)``; made by :func:`kernel`.

    Attributes:
        fn: the Python function.
        name: its name (the GUID when run without glue).
        loc: where it is defined.
        params: its parameters after ``ctx``.
    """

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.loc = kernel_loc(fn)
        self.params = list(inspect.signature(fn).parameters.values())[1:]
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def scalar_types(self, tensors: int) -> list[Any]:
        """The annotations of the scalar parameters (after the ``tensors`` tensor parameters)."""
        return [p.annotation for p in self.params[tensors:]]

    def __repr__(self) -> str:
        return f"<tpc.kernel {self.name} at {self.loc}>"


def kernel(fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
    """``@tpc.kernel``: mark ``def k(ctx, *tensors, *scalars)`` as a TPC kernel (tensors first)."""
    if fn is None:
        return lambda f: Kernel(f, name)
    return Kernel(fn, name)


# -- the instruction set of the execution core: one record per member ---------------------------


class MemberOperands(Operands):
    """One member's scheduled instructions on its TPC (or the launch): its cycles."""

    cycles: float
    instructions: int = 0


def _member_cost(ops: MemberOperands, hw: HwConfig, engine: Engine) -> Cost:
    """cycles at the TPC clock (the host config's reference clock is the TPC's)."""
    return Cost(busy_ns=ops.cycles / hw.reference_clock_ghz, cycles=ops.cycles)


def _noop(ops: MemberOperands, state: EngineState) -> None:
    """The member ran when the kernel was traced; the record carries its cycles."""


#: The TPC instruction set of the execution core.
ISA: dict[str, InstructionSpec] = {}
for _opcode in ("launch", "member"):
    instruction(_opcode, MemberOperands, engines=(Engine.gpsimd,), cost=_member_cost, registry=ISA)(_noop)


@dataclass
class TpcResult:
    """What :func:`run` returns.

    Attributes:
        outputs: the output tensors (numpy arrays, in the glue's order).
        profile: the timeline, one track per TPC (``TPC 3``); ``profile.to_perfetto(path)``.
        device: the Gaudi generation.
        cycles_per_tpc: cycles of each TPC that ran (its members one after another), launch excluded.
        member_cycles: cycles of each member, in run order.
        members: ``(tpc, offset, size)`` of each member, in run order.
        instructions: instructions executed (all TPCs); ``instructions_per_tpc`` by TPC.
        slot_utilisation: busy fraction of each VLIW slot over the TPCs' cycles.
        vector_loads: vector loads per tensor; ``vector_stores`` likewise.
        launch_cycles: the launch overhead.
        issue_cycles: each member's bundle schedule: the issue cycle of each of its instructions;
            ``issue_slots`` the slot each took (0 load, 1 SPU, 2 VPU, 3 store).
    """

    outputs: list[np.ndarray]
    profile: Profile
    device: TpcConfig
    cycles_per_tpc: dict[int, int]
    member_cycles: list[int]
    members: list[tuple[int, np.ndarray, np.ndarray]]
    instructions: int
    instructions_per_tpc: dict[int, int]
    slot_utilisation: dict[str, float]
    vector_loads: dict[int, int]
    vector_stores: dict[int, int]
    launch_cycles: float
    aux: list[np.ndarray] = field(default_factory=list)
    issue_cycles: list[np.ndarray] = field(default_factory=list)
    issue_slots: list[np.ndarray] = field(default_factory=list)

    @property
    def cycles(self) -> int:
        """Kernel cycles: launch overhead + the slowest TPC."""
        return int(self.launch_cycles + max(self.cycles_per_tpc.values(), default=0))

    @property
    def total_ns(self) -> float:
        return self.profile.total_ns

    def summary(self) -> str:
        util = ", ".join(f"{k} {100 * v:.0f}%" for k, v in self.slot_utilisation.items())
        return (
            f"{self.profile.kernel} on {self.device.name}: {self.cycles} cycles ({self.total_ns / 1000:.3f} us), "
            f"{len(self.cycles_per_tpc)} TPCs, {len(self.members)} members, {self.instructions} instructions; "
            f"slots: {util}"
        )


def _as_array(x: Any, what: str, loc: SourceLoc, name: str, copy: bool = True) -> np.ndarray:
    """``x`` as a C-contiguous TPC tensor (a copy, or, with ``copy=False``, possibly ``x`` itself)."""
    array = np.ascontiguousarray(x)
    if array.dtype not in BY_DTYPE or array.ndim > 5 or array.ndim == 0:
        raise TpcSignatureError(
            f"{what} is {array.dtype.name}{list(array.shape)}: TPC tensors have 1 to 5 dims of "
            f"{', '.join(sorted(str(d) for d in BY_DTYPE))}",
            loc=loc,
            kernel=name,
        )
    return array.copy() if copy else array


def _geometry(a: np.ndarray) -> TensorGeometry:
    return TensorGeometry(dims=a.ndim, maxSizes=list(a.shape[::-1]), dataType=data_type(a.dtype))


@dataclass
class _Plan:
    kern: Kernel
    name: str
    geometry: list[int]
    patterns: dict[int, TensorAccessPattern]
    scalars: list[Any]
    aux: list[np.ndarray]
    pads: list[float]


def _from_glue(glue: Glue, inputs: list[np.ndarray], outputs: list[np.ndarray], params: Any, cfg: TpcConfig) -> _Plan:
    guid = glue.GetKernelName()
    in_defs = HabanaKernelParams(
        deviceId=DeviceId(cfg.device_id),
        guid=guid,
        nodeParams=NodeParams(nodeParams=params, nodeParamsSize=len(pack_params(params)) * 4),
        inputTensors=[Tensor(geometry=_geometry(a)) for a in inputs],
        inputTensorNr=len(inputs),
        outputTensors=[Tensor(geometry=_geometry(a)) for a in outputs],
        outputTensorNr=len(outputs),
        maxAvailableTpc=cfg.tpc_engines,
    )
    out = HabanaKernelInstantiation()
    code = glue.GetGcDefinitions(in_defs, out)
    where = {"loc": kernel_loc(type(glue).GetGcDefinitions), "kernel": guid, "device": cfg.name}
    if code != 0:
        raise TpcGlueError(f"GetGcDefinitions returned {getattr(code, 'name', code)}", **where)
    kern = out.kernel.kernelElf
    if not isinstance(kern, Kernel):
        raise TpcGlueError(f"kernel.kernelElf must be a @tpc.kernel function, got {type(kern).__name__}", **where)
    n_in, n_out = len(inputs), len(outputs)
    if len(out.inputTensorAccessPattern) not in (0, n_in) or len(out.outputTensorAccessPattern) not in (0, n_out):
        raise TpcGlueError(
            f"{len(out.inputTensorAccessPattern)} input and {len(out.outputTensorAccessPattern)} output access "
            f"patterns for {n_in} inputs and {n_out} outputs",
            **where,
        )
    if out.kernel.paramsNr > cfg.max_scalar_params or len(out.kernel.scalarParams) > cfg.max_scalar_params:
        raise TpcGlueError(f"{out.kernel.paramsNr} scalar parameter words exceed {cfg.max_scalar_params}", **where)
    geometry = list(out.indexSpaceGeometry[: out.indexSpaceRank])
    if any(g < 1 for g in geometry):
        raise TpcGlueError(f"index space geometry {geometry} has an empty dimension", **where)
    patterns = dict(enumerate(out.inputTensorAccessPattern))
    patterns.update({n_in + i: p for i, p in enumerate(out.outputTensorAccessPattern)})
    aux = [
        np.array(a.pData, copy=True) if a.pData is not None else np.zeros(a.geometry.maxSizes[::-1], dtype=np.float32)
        for a in out.auxiliaryTensors
    ]
    n_tensors = n_in + n_out + len(aux)
    words = list(out.kernel.scalarParams[: out.kernel.paramsNr or len(out.kernel.scalarParams)])
    types = kern.scalar_types(n_tensors)
    scalars = [unpack_word(w, t) for w, t in zip(words, types)]
    pads = list(out.inputPadValues)
    return _Plan(kern, guid, geometry, patterns, scalars, aux, pads)


def _from_kernel(kern: Kernel, outputs: list[np.ndarray], params: Any, index_space: Any) -> _Plan:
    out0 = outputs[0]
    lanes = BY_DTYPE[out0.dtype].lanes
    if index_space is None:
        dims = out0.shape[::-1]
        index_space = [math.ceil(dims[0] / lanes), *dims[1:]]
    patterns: dict[int, TensorAccessPattern] = {}
    scalars = [] if params is None else list(params) if isinstance(params, (list, tuple)) else [params]
    return _Plan(kern, kern.name, list(index_space), patterns, scalars, [], [])


def _default_patterns(plan: _Plan, arrays: list[np.ndarray], out0: np.ndarray) -> None:
    """Without glue: tensors shaped like output 0 are elementwise, the others ``allRequired``."""
    for i, a in enumerate(arrays):
        if a.shape == out0.shape:
            plan.patterns[i] = elementwise_pattern(BY_DTYPE[a.dtype].lanes)
        else:
            plan.patterns[i] = TensorAccessPattern(allRequired=True)


def _check_signature(plan: _Plan, n_tensors: int, cfg: TpcConfig) -> None:
    kern = plan.kern
    where = {"loc": kern.loc, "kernel": plan.name, "device": cfg.name}
    if n_tensors > cfg.max_tensors:
        raise TpcSignatureError(
            f"{n_tensors} tensors (inputs, outputs and auxiliary): a TPC kernel takes at most {cfg.max_tensors}",
            **where,
        )

    def is_tensor(annotation: Any) -> bool:
        return annotation is tensor or (isinstance(annotation, str) and annotation.rsplit(".", 1)[-1] == "tensor")

    misplaced = [p for p in kern.params[:n_tensors] if p.annotation in (float, "float")]
    misplaced += [p for p in kern.params[n_tensors:] if is_tensor(p.annotation)]
    if misplaced:
        raise TpcSignatureError(
            f"parameter {misplaced[0].name!r} is out of place for {n_tensors} tensors: tensors come first "
            "(inputs, outputs, auxiliary), then scalars",
            **where,
        )
    if len(kern.params) != n_tensors + len(plan.scalars):
        raise TpcSignatureError(
            f"the kernel takes {len(kern.params)} parameters after ctx, but is given {n_tensors} tensors and "
            f"{len(plan.scalars)} scalar parameters",
            **where,
        )
    if len(plan.scalars) > cfg.max_scalar_params:
        raise TpcSignatureError(f"{len(plan.scalars)} scalar parameters exceed {cfg.max_scalar_params}", **where)


def _exc_loc(exc: BaseException, default: SourceLoc) -> SourceLoc:
    """The innermost traceback frame in the user's code."""
    from nkisim.errors import _EXAMPLES_DIR, _PACKAGE_DIR

    found, tb = default, exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if (not name.startswith(_PACKAGE_DIR) or name.startswith(_EXAMPLES_DIR)) and "site-packages" not in name:
            found = SourceLoc(name, tb.tb_lineno, tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return found


_HOSTS: dict[str, tuple[HwConfig, MemorySystem]] = {}


def _host(cfg: TpcConfig) -> tuple[HwConfig, MemorySystem]:
    """The execution core's configuration for a Gaudi: named after it, counting cycles at the TPC clock."""
    found = _HOSTS.get(cfg.name)
    if found is None or found[0].reference_clock_ghz != cfg.clock_ghz:
        hw = load_target("trn2").model_copy(
            update={"name": cfg.name, "aliases": (), "reference_clock_ghz": cfg.clock_ghz}
        )
        found = _HOSTS[cfg.name] = (hw, MemorySystem(hw, poison=False))
    return found


def _without_gc(fn: Callable[..., TpcResult]) -> Callable[..., TpcResult]:
    """Run ``fn`` with the cyclic garbage collector paused (restored after).

    A run allocates small objects per intrinsic call (vector handles and their column entries) and
    keeps them until the trace is evaluated; none forms a cycle, but the collector would rescan
    them again and again (it took about half the wall time of a 1M-element kernel).
    """

    @functools.wraps(fn)
    def paused(*args: Any, **kwargs: Any) -> TpcResult:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if enabled:
                gc.enable()

    return paused


@_without_gc
def run(
    glue_or_kernel: Glue | Kernel,
    inputs: Sequence[Any] = (),
    params: Any = None,
    *,
    device: str | TpcConfig = "gaudi2",
    outputs: Sequence[Any] | None = None,
    num_tpc: int | None = None,
    order: str = "contiguous",
    seed: int = 0,
    index_space: Sequence[int] | None = None,
    pad_value: float = 0.0,
    check_mapping: bool = True,
    memory_stalls: bool = True,
) -> TpcResult:
    """Run a TPC kernel (through its glue, or bare) on ``inputs`` on the simulated TPCs of ``device``.

    Args:
        glue_or_kernel: a :class:`~nkisim.tpc.Glue` object, or a :func:`kernel`.
        inputs: the input tensors (numpy arrays; the last axis is TPC dim0).
        params: the user parameters: for glue, the node-parameter struct (``ctypes.Structure``, bytes
            or numbers, packed into 32-bit words); for a bare kernel, its scalar arguments.
        device: ``gaudi``, ``gaudi2``, ``gaudi3`` or a :class:`~nkisim.hw.tpc.TpcConfig`.
        outputs: the output tensors: arrays, or ``(shape, dtype)`` pairs (default: one like input 0).
        num_tpc: TPCs to use (default: all of the device's).
        order: ``contiguous`` (one box per TPC, as the hardware splits) or ``shuffle`` (up to 32
            halved boxes in a random order, as Habana's test harness).
        seed: the shuffle's random seed.
        index_space: a bare kernel's index-space geometry (default: output 0 in vectors along dim0).
        pad_value: what out-of-bounds loads return (glue ``inputPadValues`` take precedence).
        check_mapping: check every member's accesses against the tensors' access patterns.
        memory_stalls: include the HBM bandwidth stall model in the cycles.

    Raises:
        TpcError: a rule was broken; the message names the kernel line, the TPC and member, and the rule.
    """
    loc = user_location()
    cfg = load_gaudi(device)
    tpcs = cfg.tpc_engines if num_tpc is None else int(num_tpc)
    if not 1 <= tpcs <= cfg.tpc_engines:
        raise ValueError(f"num_tpc={num_tpc}: {cfg.name} has {cfg.tpc_engines} TPCs")
    if order not in ("contiguous", "shuffle"):
        raise ValueError(f"order={order!r}: choose 'contiguous' or 'shuffle'")
    name = getattr(glue_or_kernel, "name", type(glue_or_kernel).__name__)
    ins = [_as_array(x, f"input {i}", loc, name, copy=False) for i, x in enumerate(inputs)]  # copied if stored to
    if outputs is None:
        if not ins:
            raise TpcSignatureError("no inputs and no outputs= given", loc=loc, kernel=name)
        outs = [np.zeros(ins[0].shape, dtype=ins[0].dtype)]  # calloc: pages are zeroed as they are first written
    else:
        outs = [
            np.zeros(o[0], dtype=o[1]) if isinstance(o, tuple) else _as_array(o, f"output {i}", loc, name)
            for i, o in enumerate(outputs)
        ]
    if isinstance(glue_or_kernel, Kernel):
        plan = _from_kernel(glue_or_kernel, outs, params, index_space)
        _default_patterns(plan, ins + outs, outs[0])
    elif isinstance(glue_or_kernel, Glue):
        plan = _from_glue(glue_or_kernel, ins, outs, params, cfg)
    else:
        raise TypeError(f"run() expects a tpc.Glue or a @tpc.kernel, got {type(glue_or_kernel).__name__}")
    arrays = ins + outs + [_as_array(a, f"auxiliary tensor {i}", loc, name) for i, a in enumerate(plan.aux)]
    n_tensors = len(arrays)
    _check_signature(plan, n_tensors, cfg)
    roles = ["input"] * len(ins) + ["output"] * len(outs) + ["aux"] * len(plan.aux)
    pads = [plan.pads[i] if i < len(plan.pads) else pad_value for i in range(n_tensors)]
    states = [
        TensorState.make(i, a, BY_DTYPE[a.dtype], pads[i], roles[i], owned=i >= len(ins)) for i, a in enumerate(arrays)
    ]
    trace = Trace(states, SEMANTICS)
    boxes = partition(plan.geometry, tpcs, order, seed)
    tpc_of = [k % tpcs for k in range(len(boxes))]
    member_entries: list[int] = []
    for m in range(len(boxes)):
        member_entries.append(len(trace.seq))
        _run_member(trace, plan, cfg, boxes, tpc_of, m, n_tensors).check_local_budget()
    trace.flush(last=True)
    bodies = trace.micro_ops(member_entries)
    first_uop = bodies[2].tolist()
    member_uops = list(itertools.pairwise(first_uop))
    lo = np.array([b[0] for b in boxes], dtype=np.int64)
    hi = lo + np.array([b[1] for b in boxes], dtype=np.int64)

    def locate(member: int, k: int) -> SourceLoc:
        """The kernel line of ``member``'s ``k``-th tensor access: its member run again, recording lines."""
        copies = [TensorState.make(s.index, s.data.copy(), s.vtype, s.pad, s.role) for s in states]
        again = Trace(copies, SEMANTICS, locating=True)
        try:
            _run_member(again, plan, cfg, boxes, tpc_of, member, n_tensors)
        except Exception:
            return plan.kern.loc
        if k >= len(again.codes):
            return plan.kern.loc  # the kernel did not run the same way twice
        code = again.codes[k]
        return SourceLoc(code.co_filename, code_line(code, again.lastis[k]), code.co_name)

    foot = Footprint(
        trace.access_log(member_entries, locate),
        states,
        {"kernel": plan.name, "device": cfg.name, "loc": plan.kern.loc, "tpc_of": tpc_of},
    )
    if check_mapping:
        foot.check_patterns(plan.patterns, lo, hi)
    written = foot.check_races()
    foot.check_coverage([i for i, r in enumerate(roles) if r == "output"], written)
    return _timed(
        bodies,
        plan,
        cfg,
        boxes,
        tpc_of,
        member_uops,
        foot,
        outs,
        arrays[len(ins) + len(outs) :],
        memory_stalls,
    )


def _run_member(
    trace: Trace,
    plan: _Plan,
    cfg: TpcConfig,
    boxes: list[tuple[np.ndarray, np.ndarray]],
    tpc_of: list[int],
    m: int,
    n_tensors: int,
) -> TpcContext:
    """Run the kernel once for member ``m`` of the index space, recording on ``trace``: its context."""
    offset, size = boxes[m]
    ctx = TpcContext(trace, cfg, plan.name, tpc_of[m], m, offset, size, n_tensors)
    try:
        plan.kern.fn(ctx, *range(n_tensors), *plan.scalars)
    except KernelError:
        raise
    except Exception as exc:
        raise TpcError(
            f"the kernel raised {type(exc).__name__}: {exc}",
            loc=_exc_loc(exc, plan.kern.loc),
            kernel=plan.name,
            tpc=tpc_of[m],
            member=m,
            device=cfg.name,
        ) from exc
    return ctx


def _timed(
    bodies: tuple[np.ndarray, list[tuple[np.ndarray, ...] | None], np.ndarray, list[int]],
    plan: _Plan,
    cfg: TpcConfig,
    boxes: list[tuple[np.ndarray, np.ndarray]],
    tpc_of: list[int],
    member_uops: list[tuple[int, int]],
    foot: Footprint,
    outs: list[np.ndarray],
    aux: list[np.ndarray],
    memory_stalls: bool,
) -> TpcResult:
    """Schedule every member, put the TPCs on the execution core's timeline, and collect the counters.

    ``bodies``: :meth:`Trace.micro_ops`; a member with the body of an earlier one takes its schedule.
    """
    lat = latency_matrix(cfg.latency)
    active = len(set(tpc_of))
    transfer = cfg.vector_bytes / cfg.hbm_bytes_per_cycle(active) if memory_stalls else 0.0
    member_cycles: list[int] = []
    per_tpc: dict[int, int] = {}
    instrs: dict[int, int] = {}
    slot_busy = np.zeros(4, dtype=np.int64)
    issues: list[np.ndarray] = []
    slots: list[np.ndarray] = []
    rep, per_member, _, mem_accesses = bodies
    schedules: dict[int, tuple[int, np.ndarray, np.ndarray, np.ndarray]] = {}  # cycles, issue, slots, slot use
    for m, (first, last) in enumerate(member_uops):
        same = schedules.get(int(rep[m]))
        if same is not None:
            cycles = same[0]
            slot_busy += same[3]
            issues.append(same[1].copy())
            slots.append(same[2].copy())
        elif last == first:
            cycles = 0
            issues.append(np.zeros(0, dtype=np.int64))
            slots.append(np.zeros(0, dtype=np.int64))
        else:
            arrays = per_member[m]
            n_mem = mem_accesses[m]
            horizon = (
                16
                + (last - first) * (int(lat.max()) + cfg.latency.lookup_issue_cycles + 2)
                + math.ceil(n_mem * transfer)
            )
            issue, used, end, mem_free = schedule_member(
                *arrays, lat, cfg.latency.lookup_issue_cycles, cfg.ld_tnsr_in_store_slot, transfer, horizon
            )
            cycles = max(int(end), math.ceil(mem_free))
            busy = np.bincount(used, minlength=4)
            slot_busy += busy
            issues.append(issue)
            slots.append(used)
            schedules[m] = (cycles, issue, used, busy)
        member_cycles.append(cycles)
        tpc = tpc_of[m]
        per_tpc[tpc] = per_tpc.get(tpc, 0) + cycles
        instrs[tpc] = instrs.get(tpc, 0) + last - first
    hw, memory = _host(cfg)
    machine = Machine(hw, compute=False, registry=ISA, memory=memory)
    launch = cfg.launch_overhead_cycles
    loc = plan.kern.loc
    for tpc in sorted(per_tpc):
        machine.issue(Instruction("launch", {"cycles": launch}, loc, unit=tpc))
    for m, cycles in enumerate(member_cycles):
        first, last = member_uops[m]
        machine.issue(Instruction("member", {"cycles": cycles, "instructions": last - first}, loc, unit=tpc_of[m]))
    timeline = machine.timeline
    timeline.rename_tracks(lambda track: "TPC " + track.rsplit(" ", 1)[1])
    profile = Profile(timeline, hw, plan.name)
    total = max(1, sum(per_tpc.values()))
    return TpcResult(
        outputs=outs,
        profile=profile,
        device=cfg,
        cycles_per_tpc=per_tpc,
        member_cycles=member_cycles,
        members=[(tpc_of[m], b[0], b[1]) for m, b in enumerate(boxes)],
        instructions=member_uops[-1][1] if member_uops else 0,
        instructions_per_tpc=instrs,
        slot_utilisation={SLOT_NAMES[s]: float(slot_busy[s]) / total for s in range(4)},
        vector_loads=foot.counts(False),
        vector_stores=foot.counts(True),
        launch_cycles=launch,
        aux=aux,
        issue_cycles=issues,
        issue_slots=slots,
    )
