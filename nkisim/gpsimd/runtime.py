"""``run(lib.op, inputs)``: call a custom operator on the simulated GPSIMD cores.

The steps, as the Neuron runtime takes them: check the arguments (types, dtypes, sizes), run the
shape function on shapes only, allocate the output, run the kernel once per core (8 cores with
``multicore=True``), check what the cores wrote, and flush ``printf``. Each core's work becomes a
few coarse records on its own track (``GpSimd 0`` .. ``GpSimd 7``) of the shared execution core
(:class:`nkisim.sim.Machine`, with the GPSIMD instruction set :data:`ISA`), so the profile is an
ordinary :class:`nkisim.report.Profile`: kernel time = launch overhead + the slowest core.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from nkisim.errors import KernelError, SourceLoc
from nkisim.gpsimd.context import CoreContext, kernel_loc
from nkisim.gpsimd.core import Core, Record
from nkisim.gpsimd.errors import (
    GpsimdArgumentError,
    GpsimdError,
    GpsimdLibraryError,
    GpsimdRaceError,
    GpsimdShapeFunctionError,
    GpsimdUndefinedBehavior,
)
from nkisim.gpsimd.tensor import DeviceTensor, ShapeTensor, check_dtype, check_sizes
from nkisim.hw import Engine, HwConfig, load_target
from nkisim.isa.spec import Cost, EngineState, InstructionSpec, Operands, instruction
from nkisim.memory import MemorySystem
from nkisim.report import Profile
from nkisim.sim import Instruction, Machine

if TYPE_CHECKING:
    from nkisim.gpsimd.library import Op

# -- the instruction set: coarse records with their accumulated cost --------------------


class RecordOperands(Operands):
    """A piece of one core's work: its cycles, the bytes it moved and the elements it touched."""

    cycles: float
    bytes: int = 0
    elements: int = 0


def _record_cost(ops: RecordOperands, hw: HwConfig, engine: Engine) -> Cost:
    """cycles / GpSimd clock (cycles accumulated by the core's counters, see docs/gpsimd.md)."""
    return Cost(busy_ns=ops.cycles / hw.clock_ghz(Engine.gpsimd), cycles=ops.cycles, bytes=ops.bytes)


#: The GPSIMD custom-operator instruction set: one opcode per kind of record.
ISA: dict[str, InstructionSpec] = {}
OPCODES = {
    "launch": "starting the operator on this core (launch overhead)",
    "element_access": "standard-accessor reads and writes since the previous record",
    "stream_access": "stream-accessor reads and writes since the previous record",
    "tcm_compute": "vector and scalar work on TCM buffers since the previous record",
    "stack_access": "work on stack arrays since the previous record",
    "aten": "factory functions and ATen operations since the previous record",
    "printf": "printf calls since the previous record",
    "tensor_to_tcm": "a bulk HBM -> TCM copy",
    "tcm_to_tensor": "a bulk TCM -> HBM copy",
}


def _noop(ops: RecordOperands, state: EngineState) -> None:
    """The work was done when the kernel ran; the record carries its cost."""


for _opcode, _doc in OPCODES.items():
    instruction(_opcode, RecordOperands, engines=(Engine.gpsimd,), cost=_record_cost, registry=ISA)(_noop)


# -- the result -------------------------------------------------------------------------


@dataclass
class GpsimdResult:
    """What :func:`run` returns.

    Attributes:
        outputs: the operator's output, as a numpy array.
        profile: the simulated timeline (``GpSimd <core>`` tracks), as for NKI runs.
        stdout: the ``printf`` text the runtime prints after the run.
        core_busy_ns: busy time of each core that ran, by core id.
        stack_bytes: the peak stack use of each core, by core id.
    """

    outputs: np.ndarray
    profile: Profile
    stdout: str
    core_busy_ns: dict[int, float]
    stack_bytes: dict[int, int]

    @property
    def total_ns(self) -> float:
        """The operator's simulated time: launch overhead plus the slowest core."""
        return self.profile.total_ns


class Scalar:
    """``torch::Scalar``: a number passed as a scalar argument."""

    def __init__(self, value: float | int) -> None:
        self.value = value

    def to_float(self) -> float:
        return float(self.value)

    def to_int(self) -> int:
        return int(self.value)

    def __repr__(self) -> str:
        return f"Scalar({self.value!r})"


# -- checking arguments -----------------------------------------------------------------


def _check_args(op: Op, inputs: list[Any], loc: SourceLoc) -> list[Any]:
    """The arguments as the operator receives them: tensors as numpy arrays, numbers as they are."""
    checked: list[Any] = []
    for i, x in enumerate(inputs):
        what = f"argument {i} of {op.qualname}"
        if isinstance(x, (list, tuple)):
            raise GpsimdArgumentError(
                f"{what} is a {type(x).__name__}: std::vector and std::tuple arguments are not supported",
                loc=loc,
                op=op.qualname,
            )
        if isinstance(x, (bool, np.bool_)):
            raise GpsimdArgumentError(f"{what} is a bool: use float (double) or int (int64_t)", loc=loc, op=op.qualname)
        if isinstance(x, (float, int, Scalar, np.floating, np.integer)):
            checked.append(x.item() if isinstance(x, np.generic) else x)
            continue
        if not isinstance(x, np.ndarray):
            raise GpsimdArgumentError(
                f"{what} is a {type(x).__name__}; arguments are Tensor (numpy array), Scalar, float (double) "
                "or int (int64_t)",
                loc=loc,
                op=op.qualname,
            )
        check_dtype(x.dtype, what, loc, op.qualname)
        check_sizes(x.shape, what, loc, op.qualname)
        checked.append(np.array(x, copy=True, order="C"))
    return checked


def output_spec(op: Op, inputs: list[Any], loc: SourceLoc | None = None) -> ShapeTensor:
    """Run the shape function on shapes only; the output's sizes and dtype."""
    if op.shape_fn is None or op.kernel_fn is None:
        missing = "shape function" if op.shape_fn is None else "kernel"
        raise GpsimdLibraryError(f"operator {op.name!r} has no {missing}", loc=loc or op.loc, op=op.qualname)
    shaped = [ShapeTensor(x.shape, x.dtype) if isinstance(x, np.ndarray) else x for x in inputs]
    try:
        out = op.shape_fn(*shaped)
    except TypeError as exc:
        if isinstance(exc, KernelError):
            raise
        raise GpsimdArgumentError(
            f"the shape function does not take these {len(inputs)} arguments: {exc}", loc=loc, op=op.qualname
        ) from None
    if not isinstance(out, ShapeTensor):
        raise GpsimdShapeFunctionError(
            f"the shape function must return exactly one tensor (gpsimd.zeros/empty), got {type(out).__name__}",
            loc=kernel_loc(op.shape_fn),
            op=op.qualname,
        )
    check_sizes(out.sizes(), "the output", kernel_loc(op.shape_fn), op.qualname)
    check_dtype(out.dtype, "the output", kernel_loc(op.shape_fn), op.qualname)
    return out


def _check_arity(op: Op, count: int, loc: SourceLoc) -> None:
    assert op.kernel_fn is not None
    try:
        inspect.signature(op.kernel_fn).bind(None, *range(count))
    except TypeError as exc:
        raise GpsimdArgumentError(
            f"the kernel does not take these {count} arguments (after ctx): {exc}", loc=loc, op=op.qualname
        ) from None


# -- running ----------------------------------------------------------------------------


class _Stdout:
    """The device's printf ring buffer: keeps the newest ``size`` bytes."""

    def __init__(self, size: int) -> None:
        env = os.environ.get("NEURON_RT_GPSIMD_STDOUT_QUEUE_SIZE_BYTES")
        if env is not None:
            value = int(env)
            if value < 0 or value > 131072 or (value & (value - 1)):
                raise ValueError("NEURON_RT_GPSIMD_STDOUT_QUEUE_SIZE_BYTES must be 0 or a power of two up to 131072")
            size = value
        self.size = size
        self.data = bytearray()

    def write(self, text: str) -> None:
        if self.size:
            self.data += text.encode()
            if len(self.data) > self.size:
                del self.data[: len(self.data) - self.size]

    def text(self) -> str:
        return self.data.decode(errors="replace")


def _run_core(op: Op, core: Core, args: list[Any], dst: DeviceTensor, stdout: _Stdout, kloc: SourceLoc) -> None:
    """Run the kernel on one core and check its result."""
    assert op.kernel_fn is not None
    ctx = CoreContext(core, dst, stdout.write)
    device_args = [DeviceTensor(a, core) if isinstance(a, np.ndarray) else a for a in args]
    try:
        returned = op.kernel_fn(ctx, *device_args)
    except GpsimdError:
        raise
    except KernelError:
        raise
    except Exception as exc:
        raise GpsimdError(
            f"the kernel raised {type(exc).__name__}: {exc}", loc=_exc_loc(exc, kloc), op=op.qualname, core=core.id
        ) from exc
    for stream in list(core.open_streams):  # destroyed at the end of the kernel: write streams flush
        stream._finish(kloc)
    core.flush(kloc)
    if ctx.dst_requested:
        return
    if core.count > 1:
        raise GpsimdUndefinedBehavior(
            "in multicore mode the kernel must write its output through get_dst_tensor()",
            loc=kloc,
            op=op.qualname,
            core=core.id,
        )
    if not isinstance(returned, DeviceTensor):
        raise GpsimdArgumentError(
            f"the kernel must return exactly one tensor (or use get_dst_tensor()), got {type(returned).__name__}",
            loc=kloc,
            op=op.qualname,
            core=core.id,
        )
    if returned.sizes() != dst.sizes() or returned.dtype != dst.dtype:
        raise GpsimdArgumentError(
            f"the kernel returned {returned.dtype.name}{list(returned.sizes())} but the shape function says "
            f"{dst.dtype.name}{list(dst.sizes())}",
            loc=kloc,
            op=op.qualname,
            core=core.id,
        )
    if returned is not dst:
        dst._data[...] = returned._data  # the runtime copies the returned tensor to the output
        core.aten_elements += dst.numel()
        core.flush(kloc)


def _exc_loc(exc: BaseException, default: SourceLoc) -> SourceLoc:
    """The innermost frame of the traceback that is the user's code."""
    from nkisim.errors import _EXAMPLES_DIR, _PACKAGE_DIR

    found = default
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        ours = name.startswith(_PACKAGE_DIR) and not name.startswith(_EXAMPLES_DIR)
        if not ours and "site-packages" not in name and "/numpy/" not in name:
            found = SourceLoc(name, tb.tb_lineno, tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return found


def _check_multicore_writes(op: Op, cores: list[Core], numel: int, kloc: SourceLoc) -> None:
    """Cores must write mutually exclusive parts of the output, and together all of it."""
    writes = sorted((start, end, core.id, loc) for core in cores for start, end, loc in core.dst_writes)
    covered_to, owner, owner_loc = 0, -1, kloc
    for start, end, cid, loc in writes:
        if start < covered_to and cid != owner:
            raise GpsimdRaceError(
                f"cores {owner} and {cid} both write output elements {start}..{min(end, covered_to) - 1} "
                f"(core {owner} at {owner_loc}); cores cannot synchronise, so their output parts must not overlap",
                loc=loc,
                op=op.qualname,
                core=cid,
            )
        if start > covered_to:
            raise GpsimdRaceError(
                f"output elements {covered_to}..{start - 1} were written by no core (undefined values)",
                loc=kloc,
                op=op.qualname,
            )
        if end > covered_to:
            covered_to, owner, owner_loc = end, cid, loc
    if covered_to < numel:
        raise GpsimdRaceError(
            f"output elements {covered_to}..{numel - 1} were written by no core (undefined values)",
            loc=kloc,
            op=op.qualname,
        )


#: At most this many records per run reach the timeline (split evenly among the cores) ...
MAX_RECORDS = 128
#: ... but at least this many per core.
MIN_RECORDS_PER_CORE = 16
_MEMORIES: dict[int, tuple[HwConfig, MemorySystem]] = {}


def _memory(hw: HwConfig) -> MemorySystem:
    """A memory system for the timeline-only machine (records touch no memory), made once per target."""
    found = _MEMORIES.get(id(hw))
    if found is None or found[0] is not hw:
        found = _MEMORIES[id(hw)] = (hw, MemorySystem(hw, poison=False))
    return found[1]


def coarsen(records: list[Record], limit: int) -> list[Record]:
    """At most about ``limit`` records with the same total cost: consecutive windows, one record per opcode.

    A kernel with thousands of transfers keeps its order at the window's grain and every cycle it
    was charged; the profile stays small and fast to build.
    """
    if len(records) <= limit:
        return records
    kinds = len({r.opcode for r in records})
    windows = max(1, limit // kinds)
    size = -(-len(records) // windows)
    merged: list[Record] = []
    for first in range(0, len(records), size):
        sums: dict[str, list[Any]] = {}
        for r in records[first : first + size]:
            acc = sums.get(r.opcode)
            if acc is None:
                sums[r.opcode] = [r.cycles, r.bytes, r.elements, r.loc]
            else:
                acc[0] += r.cycles
                acc[1] += r.bytes
                acc[2] += r.elements
        merged.extend(Record(op, c, b, e, loc) for op, (c, b, e, loc) in sums.items())
    return merged


def run(op: Op, inputs: Any = (), *, target: str | HwConfig = "trn1") -> GpsimdResult:
    """Run custom operator ``op`` on ``inputs`` on the simulated GPSIMD cores of ``target``.

    Args:
        op: an operator handle, ``lib.<op name>``.
        inputs: its arguments: numpy arrays (tensors), ``Scalar``, float (double), int (int64_t).
        target: the hardware generation (``trn1``, ``trn2``, ``trn3`` or an ``HwConfig``).

    Returns:
        The output (numpy), the profile, the printf text, per-core busy time and stack use.

    Raises:
        GpsimdError: a rule was broken; the message names the kernel line, the core and the rule.
    """
    from nkisim.errors import user_location

    loc = user_location()
    if not hasattr(op, "kernel_fn") or not hasattr(op, "library"):
        raise GpsimdArgumentError(f"run() expects an operator handle lib.<op>, got {type(op).__name__}", loc=loc)
    hw = target if isinstance(target, HwConfig) else load_target(target)
    cfg = hw.gpsimd_cores
    args = _check_args(op, list(inputs) if isinstance(inputs, (list, tuple)) else [inputs], loc)
    spec = output_spec(op, args, loc)
    _check_arity(op, len(args), loc)
    assert op.kernel_fn is not None
    kloc = kernel_loc(op.kernel_fn)
    lib = op.library
    remote = lib.stack_size is not None and lib.stack_size > cfg.local_stack_bytes
    limit = lib.stack_size if remote and lib.stack_size is not None else cfg.local_stack_bytes
    count = cfg.cores if lib.multicore else 1
    out = np.zeros(spec.sizes(), dtype=spec.dtype)
    stdout = _Stdout(cfg.stdout_queue_bytes)
    cores: list[Core] = []
    for cid in range(count):
        core = Core(cid, count, cfg, limit, remote, op.qualname)
        _run_core(op, core, args, DeviceTensor(out, core, is_dst=True), stdout, kloc)
        cores.append(core)
    if count > 1:
        _check_multicore_writes(op, cores, out.size, kloc)
    machine = Machine(hw, compute=False, registry=ISA, memory=_memory(hw))
    launch = Record("launch", cfg.launch_overhead_cycles, 0, 0, kloc)
    per_core = max(MIN_RECORDS_PER_CORE, MAX_RECORDS // count)
    for core in cores:
        for rec in (launch, *coarsen(core.records, per_core)):
            arguments = {"cycles": rec.cycles, "bytes": rec.bytes, "elements": rec.elements}
            machine.issue(Instruction(rec.opcode, arguments, rec.loc, unit=core.id))
    profile = Profile(machine.timeline, hw, op.qualname)
    tl = machine.timeline
    busy = {core.id: 0.0 for core in cores}
    for track, occupied in zip(tl.track, tl.busy_ns):
        busy[int(track.rsplit(" ", 1)[1])] += occupied
    return GpsimdResult(out, profile, stdout.text(), busy, {core.id: core.stack_peak for core in cores})
