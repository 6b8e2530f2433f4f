"""Engine-sequencer registers: ``register_alloc``, ``register_move``, ``register_load``, ``register_store``.

Each engine sequencer has 64 32-bit registers for control: dynamic loop bounds,
``while`` conditions and run-time offsets (``.ap(scalar_offset=register)``). NKI
allocates *virtual* registers and its compiler places them on the sequencers that
use them. nkisim keeps one :class:`VirtualRegister` per allocation and runs the
register instructions on the Sync Engine, the bare sequencer (documented choice).
A consumer on another engine waits for the register like for any producer there
(a semaphore), which stands for moving the value between sequencers.

Costs (sequencer cycles at the Sync Engine's clock, from ``hw.sequencer``):
``register_move`` is one register instruction; ``register_load``/``register_store``
of SBUF is one tensor access request; of HBM, the fixed DMA latency.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nkisim.errors import DtypeError, MemoryKindError, OperandError, ShapeError
from nkisim.hw import Engine, HwConfig
from nkisim.isa.spec import Check, Cost, EngineState, In, Operands, Out, engine_cost, instruction
from nkisim.memory import Buffer, Region, Storage, Tensor, dtype_name

#: Registers are 32 bits wide; an immediate may be given signed or unsigned.
REGISTER_MIN, REGISTER_MAX = -(2**31), 2**32 - 1
REGISTER_MEMORIES = (Buffer.sbuf, Buffer.hbm, Buffer.private_hbm, Buffer.shared_hbm)


class VirtualRegister:
    """A 32-bit sequencer register (``nisa.register_alloc``).

    Its value is set when the instruction that writes it executes, in program order,
    so a kernel can read it back: it is ``True`` when nonzero (``while reg:``), and
    ``nl.dynamic_range`` and ``.ap(scalar_offset=reg)`` read it. The 32 bits read as
    a signed integer. ``int(reg)`` raises ``TypeError``, as in NKI's tracer.
    """

    __slots__ = ("_bits", "name", "storage")

    def __init__(self, value: int | None = None, name: str = "") -> None:
        #: A 4-byte cell of its own, so the scheduler orders the register's writers and readers.
        self.storage = Storage("reg", 1, 4)
        self.name = name or f"r{self.storage.uid}"
        self._bits: int | None = None
        if value is not None:
            self.write(value)

    @classmethod
    def derived(cls, value: int, sources: tuple[Any, ...]) -> VirtualRegister:
        """A register holding ``value`` computed by the sequencer from ``sources`` (a loop's induction variable).

        It shares the dependency cell of the first register among ``sources``, so its
        readers wait for that register's writer.
        """
        reg = cls(value)
        source = next((s for s in sources if isinstance(s, VirtualRegister)), None)
        if source is not None:
            reg.storage = source.storage
        return reg

    @property
    def region(self) -> Region:
        return Region(self.storage, 0, 1, 0, 4)

    @property
    def is_set(self) -> bool:
        return self._bits is not None

    def write(self, value: int) -> None:
        """Store the low 32 bits of ``value``."""
        self._bits = int(value) & 0xFFFF_FFFF

    def read(self) -> int:
        """The value as a signed 32-bit integer.

        Raises:
            OperandError: the register was never written.
        """
        if self._bits is None:
            raise OperandError(f"register {self.name} is read before any nisa.register_move/register_load wrote it")
        return self._bits - (1 << 32) if self._bits >= 1 << 31 else self._bits

    def __bool__(self) -> bool:
        return self.read() != 0

    def __int__(self) -> int:
        raise TypeError(
            f"register {self.name} is a device register: use nl.dynamic_range(reg), nl.fori_loop or "
            "nisa.register_store, not int()"
        )

    def __repr__(self) -> str:
        value = self.read() if self._bits is not None else "unset"
        return f"VirtualRegister({self.name} = {value})"


def register_alloc(x: int | None = None) -> VirtualRegister:
    """Allocate a virtual register, optionally holding ``x``.

    Allocation and the initial value cost nothing in nkisim: the compiler sets up
    registers before the kernel's instructions run (documented choice).

    Raises:
        OperandError: ``x`` is not an integer or does not fit 32 bits.
    """
    if x is not None:
        _check_immediate(x, "nisa.register_alloc: x")
    return VirtualRegister(None if x is None else int(x))


def _check_immediate(value: Any, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise OperandError(f"{what} {value!r} must be an integer")
    if not REGISTER_MIN <= int(value) <= REGISTER_MAX:
        raise OperandError(f"{what} {int(value)} does not fit a 32-bit register")


def _sequencer_cost(hw: HwConfig, engine: Engine, cycles: int) -> Cost:
    return engine_cost(hw, engine, cycles)


def _memory_cost(hw: HwConfig, engine: Engine, t: Tensor) -> Cost:
    """One SBUF tensor access request; an HBM access is a small DMA (its fixed latency)."""
    if t.buffer.is_on_chip:
        return _sequencer_cost(hw, engine, hw.sequencer.register_sbuf_access_cycles)
    return Cost(busy_ns=hw.dma.fixed_latency_ns, bytes=t.itemsize)


def _check_scalar_tensor(chk: Check, name: str, t: Tensor) -> None:
    """One integer element of at most 32 bits, in SBUF or HBM."""
    if t.buffer not in REGISTER_MEMORIES:
        chk.fail(MemoryKindError, name, f"must be in SBUF or HBM, not {t.buffer.value.upper()} ({t.name})")
    if t.size != 1:
        chk.fail(ShapeError, name, f"must hold exactly one element (shape [1] or [1, 1]), got {list(t.shape)}")
    if t.dtype.kind not in "iu" or t.itemsize > 4:
        chk.fail(DtypeError, name, f"dtype {dtype_name(t.dtype)} must be an integer type of at most 32 bits (nkisim)")


# -- register_move --------------------------------------------------------------------


class RegisterMoveOps(Operands):
    dst: VirtualRegister
    imm: Any


def _register_move_accesses(ops: RegisterMoveOps) -> tuple[list[Region], list[Region]]:
    """The registers read and written (a register is a 4-byte cell of its own)."""
    reads = [ops.imm.region] if isinstance(ops.imm, VirtualRegister) else []
    return reads, [ops.dst.region]


def _register_move_validate(ops: RegisterMoveOps, chk: Check) -> None:
    if not isinstance(ops.imm, VirtualRegister):
        if isinstance(ops.imm, bool) or not isinstance(ops.imm, (int, np.integer)):
            chk.fail(OperandError, "imm", f"{ops.imm!r} must be a compile-time integer (or a register)")
        if not REGISTER_MIN <= int(ops.imm) <= REGISTER_MAX:
            chk.fail(OperandError, "imm", f"{int(ops.imm)} does not fit a 32-bit register")


def _register_move_cost(ops: RegisterMoveOps, hw: HwConfig, engine: Engine) -> Cost:
    """``register_op_cycles`` (4) Sync cycles: one register ALU instruction on the sequencer (estimate)."""
    return _sequencer_cost(hw, engine, hw.sequencer.register_op_cycles)


@instruction(
    "register_move",
    RegisterMoveOps,
    engines=(Engine.sync,),
    cost=_register_move_cost,
    validate=_register_move_validate,
    extra_accesses=_register_move_accesses,
    dtypes="imm: a 32-bit integer constant (or a register)",
)
def register_move(ops: RegisterMoveOps, state: EngineState) -> None:
    """``dst = imm``: a 32-bit immediate (or, as NKI 0.3+ allows, another register's value)."""
    ops.dst.write(ops.imm.read() if isinstance(ops.imm, VirtualRegister) else int(ops.imm))


# -- register_load --------------------------------------------------------------------


class RegisterLoadOps(Operands):
    dst: VirtualRegister
    src: In


def _load_accesses(ops: RegisterLoadOps) -> tuple[list[Region], list[Region]]:
    """Writes the register ``dst`` (the tensor ``src`` is an operand, which the sequencer reads itself)."""
    return [], [ops.dst.region]


def _store_accesses(ops: RegisterStoreOps) -> tuple[list[Region], list[Region]]:
    """Reads the register ``src`` (the tensor ``dst`` is an operand, which the sequencer writes itself)."""
    return [ops.src.region], []


def _register_load_validate(ops: RegisterLoadOps, chk: Check) -> None:
    _check_scalar_tensor(chk, "src", ops.src)


def _register_load_cost(ops: RegisterLoadOps, hw: HwConfig, engine: Engine) -> Cost:
    """SBUF: ``register_sbuf_access_cycles`` (60) Sync cycles, one access request; HBM: ``DMA_LAT`` ns (estimate)."""
    return _memory_cost(hw, engine, ops.src)


@instruction(
    "register_load",
    RegisterLoadOps,
    engines=(Engine.sync,),
    cost=_register_load_cost,
    validate=_register_load_validate,
    extra_accesses=_load_accesses,
    dtypes="src: one integer of at most 32 bits (e.g. int32)",
    value_dependent=lambda ops: "loads a register from tensor data, which can steer control flow and addresses",
)
def register_load(ops: RegisterLoadOps, state: EngineState) -> None:
    """``dst = src``: the tensor's one integer value (sign- or zero-extended to 32 bits)."""
    ops.dst.write(int(ops.src.array.reshape(-1)[0]))


# -- register_store -------------------------------------------------------------------


class RegisterStoreOps(Operands):
    dst: Out
    src: VirtualRegister


def _register_store_validate(ops: RegisterStoreOps, chk: Check) -> None:
    _check_scalar_tensor(chk, "dst", ops.dst)


def _register_store_cost(ops: RegisterStoreOps, hw: HwConfig, engine: Engine) -> Cost:
    """SBUF: ``register_sbuf_access_cycles`` (60) Sync cycles, one access request; HBM: ``DMA_LAT`` ns (estimate)."""
    return _memory_cost(hw, engine, ops.dst)


@instruction(
    "register_store",
    RegisterStoreOps,
    engines=(Engine.sync,),
    cost=_register_store_cost,
    validate=_register_store_validate,
    extra_accesses=_store_accesses,
    dtypes="dst: one integer of at most 32 bits (e.g. int32)",
)
def register_store(ops: RegisterStoreOps, state: EngineState) -> None:
    """``dst = src``: the register's low ``dst.itemsize`` bytes (its 32 bits for a 32-bit dst)."""
    bits = ops.src.read() & 0xFFFF_FFFF
    unsigned = np.array([bits], dtype=np.uint32).astype(np.dtype(f"u{ops.dst.itemsize}"))
    ops.dst.array[...] = unsigned.view(ops.dst.dtype).reshape(ops.dst.shape)
