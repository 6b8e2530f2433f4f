"""``tensor_copy_dynamic_src`` and ``tensor_copy_dynamic_dst``: on-chip copies at a run-time offset.

Neuron 2.26's ``neuronxcc.nki.isa`` documents them as copies on the Vector, Scalar or
GpSimd Engine whose source (``_src``) or destination (``_dst``) starts at an offset held
in a scalar SBUF value, within each partition. nkisim expresses that operand as a
``scalar_offset`` access pattern (``t.ap(pattern, offset, scalar_offset=s, indirect_dim=d)``),
which the legacy front end builds from ``t[i_p, s + i_f]``. The offset is read when the
instruction executes; a view that leaves its tile's partition raises ``BoundsError``.
"""

from __future__ import annotations

from nkisim.errors import OperandError
from nkisim.hw import Engine, HwConfig
from nkisim.isa.common import check_same_layout
from nkisim.isa.spec import Check, Cost, EngineState, engine_cost, instruction, require
from nkisim.isa.vector import TensorCopyOps, _choose_vector, tensor_copy


class TensorCopyDynamicOps(TensorCopyOps):
    """``tensor_copy``'s operands; one of ``src`` and ``dst`` is a run-time-offset view."""


def _validate(dynamic: str, ops: TensorCopyDynamicOps, chk: Check) -> None:
    for name in ("src", "dst"):
        t = getattr(ops, name)
        if not t.buffer.is_on_chip:
            chk.fail(OperandError, name, f"must be a tile in SBUF or PSUM, not {t.buffer.value} ({t!r})")
    if not getattr(ops, dynamic).is_dynamic:
        chk.fail(
            OperandError,
            dynamic,
            "must be indexed at a run-time offset (t.ap(..., scalar_offset=s) or t[i_p, s + i_f] in the "
            "legacy API); use nisa.tensor_copy for a static copy",
        )
    check_same_layout(chk, "src", ops.src, "dst", ops.dst)
    if chk.engine is Engine.scalar:
        require(chk, "scalar_tensor_copy", "engine", "a copy on the Scalar Engine needs NeuronCore-v3 or newer")


def _validate_src(ops: TensorCopyDynamicOps, chk: Check) -> None:
    _validate("src", ops, chk)


def _validate_dst(ops: TensorCopyDynamicOps, chk: Check) -> None:
    _validate("dst", ops, chk)


def _cost(ops: TensorCopyDynamicOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II_DYNAMIC, N)`` cycles of the Vector, Scalar or GpSimd Engine; MIN_II_DYNAMIC ~600."""
    return engine_cost(hw, engine, max(hw.engine(engine).min_ii_dynamic_cycles, ops.src.free_size))


_DTYPES = "any; equal dtypes copy bit-exactly, others cast through fp32; the offset is an integer (1, 1) SBUF value"


@instruction(
    "tensor_copy_dynamic_src",
    TensorCopyDynamicOps,
    engines=(Engine.vector, Engine.gpsimd, Engine.scalar),
    cost=_cost,
    validate=_validate_src,
    choose_engine=_choose_vector,
    dtypes=_DTYPES,
)
def tensor_copy_dynamic_src(ops: TensorCopyDynamicOps, state: EngineState) -> None:
    """Copy ``src``, read at its run-time offset, to ``dst`` (Neuron 2.26's ``neuronxcc.nki`` instruction)."""
    tensor_copy(ops, state)


@instruction(
    "tensor_copy_dynamic_dst",
    TensorCopyDynamicOps,
    engines=(Engine.vector, Engine.gpsimd, Engine.scalar),
    cost=_cost,
    validate=_validate_dst,
    choose_engine=_choose_vector,
    dtypes=_DTYPES,
)
def tensor_copy_dynamic_dst(ops: TensorCopyDynamicOps, state: EngineState) -> None:
    """Copy ``src`` to ``dst`` at its run-time offset (Neuron 2.26's ``neuronxcc.nki`` instruction)."""
    tensor_copy(ops, state)
