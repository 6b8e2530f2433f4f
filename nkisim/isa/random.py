"""Pseudo-random instructions: rng, rand2, dropout and the PRNG state instructions.

Each engine keeps its own generator state in :class:`~nkisim.isa.spec.EngineState`,
one state per compute lane (partition), so a kernel's random stream is a pure
function of its seeds and its instructions:

* the Vector Engine, as the target's ``vector_prng`` capability says: before NeuronCore-v4
  a 32-bit xorshift generator per lane (one word of state; the docs call it an LFSR
  without publishing its polynomial, and xorshift is an LFSR over GF(2)); on
  NeuronCore-v4 ``vector_prng_streams`` (4) XORWOW generators per lane (24 words);
  element ``e`` of a lane's output comes from generator ``e % streams``.
* the GpSimd Engine (``gpsimd_prng``, NeuronCore-v3+): one XORWOW generator per lane (6 words).

XORWOW is Marsaglia's (2003): five xorshift words ``x0..x4`` and a Weyl counter ``d``;
each step returns ``t + d`` after ``t = x4; t ^= t >> 2; t ^= t << 1; t ^= x0 ^ (x0 << 4)``,
shifting ``x0..x3`` up one place, storing ``t`` in ``x0`` and adding 362437 to ``d``. A
state row stores ``x0, x1, x2, x3, x4, d`` per generator. Lanes are absolute partitions:
an instruction on partitions 32..63 uses lanes 32..63. Before any seeding an engine is
in the state ``set_rng_seed`` gives for the seed 0.
"""

from __future__ import annotations

import numba
import numpy as np

from nkisim.errors import DtypeError, OperandError, ShapeError
from nkisim.hw import Engine, HwConfig
from nkisim.hw.model import Capabilities
from nkisim.isa.common import as_rows, check_in, check_same_layout, check_vector_operand, per_partition, write
from nkisim.isa.spec import Check, Cost, EngineState, In, Operands, Out, ScalarOrIn, instruction, require
from nkisim.isa.vector import per_element_cost
from nkisim.memory import Buffer, Tensor, dtype_name, is_float, is_integer

XORWOW_WORDS = 6
XORWOW_WEYL = 362437
#: The state an xorshift word must never hold (it would stay zero forever) is replaced by this.
_NONZERO = 0x6D2B79F5
_MASK32 = 0xFFFFFFFF

_INT_DTYPES = ("int8", "int16", "int32", "uint8", "uint16", "uint32")
_RAND2_DTYPES = (
    "float8_e4m3",
    "float8_e5m2",
    "float16",
    "bfloat16",
    "float32",
    "tfloat32",
    *_INT_DTYPES,
)


# -- generators -----------------------------------------------------------------------


def state_words(engine: Engine, capabilities: Capabilities) -> int:
    """uint32 words of PRNG state per lane of ``engine`` on a target with ``capabilities``."""
    if engine is Engine.gpsimd:
        return XORWOW_WORDS
    if capabilities.vector_prng == "xorwow":
        return XORWOW_WORDS * capabilities.vector_prng_streams
    return 1


def _fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finaliser on uint64 arrays holding 32-bit values."""
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _MASK32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _MASK32
    return h ^ (h >> 16)


def seeded_state(seed: int, lanes: int, words: int) -> np.ndarray:
    """The ``(lanes, words)`` state ``set_rng_seed(seed)`` loads: a hash of (seed, lane, word)."""
    counter = np.arange(1, lanes * words + 1, dtype=np.uint64).reshape(lanes, words)
    state = _fmix32((np.uint64(seed & _MASK32) + counter * np.uint64(0x9E3779B9)) & np.uint64(_MASK32))
    state[state == 0] = _NONZERO
    return state.astype(np.uint32)


def engine_prng(state: EngineState, engine: Engine) -> np.ndarray:
    """The ``(lanes, words)`` uint32 PRNG state of ``engine``, made from seed 0 on first use."""
    if engine not in state.prng:
        state.prng[engine] = seeded_state(0, state.partitions, state_words(engine, state.capabilities))
    return state.prng[engine]


@numba.njit(cache=True)
def _xorshift32_fill(state: np.ndarray, n: int) -> np.ndarray:  # pragma: no cover - compiled
    lanes = state.shape[0]
    out = np.empty((lanes, n), np.uint32)
    for lane in range(lanes):
        x = np.uint64(state[lane, 0])
        for e in range(n):
            x ^= (x << np.uint64(13)) & np.uint64(0xFFFFFFFF)
            x ^= x >> np.uint64(17)
            x ^= (x << np.uint64(5)) & np.uint64(0xFFFFFFFF)
            out[lane, e] = x
        state[lane, 0] = x
    return out


@numba.njit(cache=True)
def _xorwow_fill(state: np.ndarray, n: int, streams: int) -> np.ndarray:  # pragma: no cover - compiled
    lanes = state.shape[0]
    out = np.empty((lanes, n), np.uint32)
    mask = np.uint64(0xFFFFFFFF)
    for lane in range(lanes):
        for e in range(n):
            s = (e % streams) * 6
            x0 = np.uint64(state[lane, s])
            t = np.uint64(state[lane, s + 4])
            state[lane, s + 4] = state[lane, s + 3]
            state[lane, s + 3] = state[lane, s + 2]
            state[lane, s + 2] = state[lane, s + 1]
            state[lane, s + 1] = state[lane, s]
            t ^= t >> np.uint64(2)
            t ^= (t << np.uint64(1)) & mask
            t ^= x0 ^ ((x0 << np.uint64(4)) & mask)
            d = (np.uint64(state[lane, s + 5]) + np.uint64(362437)) & mask
            state[lane, s] = t
            state[lane, s + 5] = d
            out[lane, e] = (t + d) & mask
    return out


def random_words(state: EngineState, engine: Engine, lanes: slice, n: int) -> np.ndarray:
    """``n`` random uint32 values for each lane in ``lanes``, advancing the engine's generators."""
    full = engine_prng(state, engine)
    rows = np.ascontiguousarray(full[lanes])
    streams = rows.shape[1] // XORWOW_WORDS
    out = _xorwow_fill(rows, n, streams) if streams else _xorshift32_fill(rows, n)
    full[lanes] = rows
    return out


def unit_floats(words: np.ndarray) -> np.ndarray:
    """Uniform float32 values in [0, 1) from the top 24 bits of each random word."""
    return (words >> np.uint32(8)).astype(np.float32) * np.float32(2.0**-24)


def lanes_of(t: Tensor) -> slice:
    """The engine lanes (absolute partitions) an on-chip tensor occupies."""
    first = t.byte_offset // t.storage.row_bytes
    return slice(first, first + t.partitions)


# -- rng ------------------------------------------------------------------------------


class RngOps(Operands):
    dst: Out
    engine: Engine = Engine.unknown


def _rng_validate(ops: RngOps, chk: Check) -> None:
    if chk.engine is Engine.gpsimd:
        require(chk, "gpsimd_prng", "engine", "rng runs on the GpSimd Engine from NeuronCore-v3; use the Vector Engine")
    if dtype_name(ops.dst.dtype) not in _INT_DTYPES:
        chk.fail(DtypeError, "dst", f"dtype {dtype_name(ops.dst.dtype)} must be one of {', '.join(_INT_DTYPES)}")


def _prng_cost(n: int, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N)`` engine cycles; ``max(MIN_II, N/4)`` on the v4 Vector Engine (4 per lane per cycle)."""
    if engine is Engine.vector:
        return per_element_cost(engine, hw, n, hw.vector.prng_cycles_per_element)
    return per_element_cost(engine, hw, n)


def _rng_cost(ops: RngOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N)`` Vector or GpSimd cycles; ``max(MIN_II, N/4)`` on the v4 Vector Engine (estimate)."""
    return _prng_cost(ops.dst.free_size, hw, engine)


@instruction(
    "rng",
    RngOps,
    engines=(Engine.vector, Engine.gpsimd),
    cost=_rng_cost,
    validate=_rng_validate,
    choose_engine=lambda ops, hw: Engine.vector,
    dtypes="dst int8/16/32 or uint8/16/32 (the low bits of 32 random bits)",
)
def rng(ops: RngOps, state: EngineState) -> None:
    """32 random bits per element, truncated to the least significant bits of ``dst``'s integer type."""
    _fill_bits(ops.dst, state, ops.engine if ops.engine is not Engine.unknown else Engine.vector)


def _fill_bits(dst: Tensor, state: EngineState, engine: Engine) -> None:
    words = random_words(state, engine, lanes_of(dst), dst.free_size)
    bits = np.dtype(f"u{dst.itemsize}")
    dst.array[...] = words.astype(bits).view(dst.dtype).reshape(dst.shape)


# -- rand2 ----------------------------------------------------------------------------


class Rand2Ops(Operands):
    dst: Out
    min: ScalarOrIn
    max: ScalarOrIn


def _rand2_validate(ops: Rand2Ops, chk: Check) -> None:
    if dtype_name(ops.dst.dtype) not in _RAND2_DTYPES:
        chk.fail(DtypeError, "dst", f"dtype {dtype_name(ops.dst.dtype)} must be one of {', '.join(_RAND2_DTYPES)}")
    p = ops.dst.partitions
    check_vector_operand(chk, "min", ops.min, p)
    check_vector_operand(chk, "max", ops.max, p)
    if not isinstance(ops.min, Tensor) and not isinstance(ops.max, Tensor) and not ops.min < ops.max:
        chk.fail(OperandError, "min", f"{ops.min} must be less than max {ops.max}")


def _rand2_cost(ops: Rand2Ops, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N/4)`` Vector cycles: XORWOW makes 4 values per lane per cycle (estimate)."""
    return _prng_cost(ops.dst.free_size, hw, engine)


@instruction(
    "rand2",
    Rand2Ops,
    engines=(Engine.vector,),
    cost=_rand2_cost,
    validate=_rand2_validate,
    requires=("vector_rand2",),
    dtypes="dst fp8/fp16/bf16/fp32/tf32 or (u)int8/16/32; min, max fp32",
)
def rand2(ops: Rand2Ops, state: EngineState) -> None:
    """Uniform float32 values ``min + (max - min) * u`` with ``u`` in [0, 1), cast to ``dst``."""
    p = ops.dst.partitions
    u = unit_floats(random_words(state, Engine.vector, lanes_of(ops.dst), ops.dst.free_size))
    lo, hi = per_partition(ops.min, p), per_partition(ops.max, p)
    write(ops.dst, lo + (hi - lo) * u)


# -- dropout --------------------------------------------------------------------------


class DropoutOps(Operands):
    dst: Out
    data: In
    prob: ScalarOrIn


def _dropout_validate(ops: DropoutOps, chk: Check) -> None:
    check_same_layout(chk, "data", ops.data, "dst", ops.dst)
    if ops.dst.dtype != ops.data.dtype or dtype_name(ops.dst.dtype) != dtype_name(ops.data.dtype):
        chk.fail(
            DtypeError,
            "dst",
            f"dtype {dtype_name(ops.dst.dtype)} must match data's {dtype_name(ops.data.dtype)}",
        )
    check_vector_operand(chk, "prob", ops.prob, ops.data.partitions)
    if not isinstance(ops.prob, Tensor) and not 0.0 <= float(ops.prob) <= 1.0:  # NaN fails too
        chk.fail(OperandError, "prob", f"{ops.prob} is not a probability in [0, 1]")
    if isinstance(ops.prob, Tensor):
        prob_type = dtype_name(ops.prob.dtype)
        if is_integer(ops.data.dtype) and prob_type != "float32":
            chk.fail(DtypeError, "prob", f"dtype {prob_type} must be float32 when data is an integer type")
        if not is_float(ops.prob.dtype):
            chk.fail(DtypeError, "prob", f"dtype {prob_type} must be a float type")


def _dropout_cost(ops: DropoutOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, N)`` Vector cycles."""
    return per_element_cost(engine, hw, ops.data.free_size)


@instruction(
    "dropout",
    DropoutOps,
    engines=(Engine.vector,),
    cost=_dropout_cost,
    validate=_dropout_validate,
    dtypes="data any, dst = data dtype; prob fp32 for integer data, any float otherwise",
)
def dropout(ops: DropoutOps, state: EngineState) -> None:
    """Zero each element with probability ``prob`` (a random ``u`` in [0, 1) below it); keep the rest as is.

    Kept elements are copied bit for bit, with no ``1 / (1 - prob)`` rescaling.
    """
    p = ops.data.partitions
    u = unit_floats(random_words(state, Engine.vector, lanes_of(ops.dst), ops.data.free_size))
    keep = u >= per_partition(ops.prob, p)
    data = as_rows(ops.data.array, p)
    ops.dst.array[...] = np.where(keep, data, np.zeros((), ops.data.dtype)).reshape(ops.dst.shape)


# -- seeds and states -----------------------------------------------------------------


class SetRngSeedOps(Operands):
    src_seeds: In


def _set_rng_seed_validate(ops: SetRngSeedOps, chk: Check) -> None:
    check_in(chk, "src_seeds", ops.src_seeds, Buffer.sbuf, Buffer.psum)
    if ops.src_seeds.itemsize != 4:
        chk.fail(DtypeError, "src_seeds", f"dtype {dtype_name(ops.src_seeds.dtype)} must be a 32-bit type")
    if ops.src_seeds.shape != (1, 1):
        chk.fail(ShapeError, "src_seeds", f"shape {list(ops.src_seeds.shape)} must be [1, 1]")


def _set_rng_seed_cost(ops: SetRngSeedOps, hw: HwConfig, engine: Engine) -> Cost:
    """``MIN_II`` Vector cycles: one element (estimate)."""
    return per_element_cost(engine, hw, 1)


@instruction(
    "set_rng_seed",
    SetRngSeedOps,
    engines=(Engine.vector,),
    cost=_set_rng_seed_cost,
    validate=_set_rng_seed_validate,
    dtypes="src_seeds: one 32-bit value (its bits)",
)
def set_rng_seed(ops: SetRngSeedOps, state: EngineState) -> None:
    """Seed every lane of the Vector Engine's generator from one 32-bit value (its bits, not its value)."""
    seed = int(np.ascontiguousarray(ops.src_seeds.array).view(np.uint32).reshape(-1)[0])
    state.prng[Engine.vector] = seeded_state(seed, state.partitions, state_words(Engine.vector, state.capabilities))


class RandSetStateOps(Operands):
    src_seeds: In
    engine: Engine = Engine.unknown


class RandGetStateOps(Operands):
    dst: Out
    engine: Engine = Engine.unknown


RandStateOps = RandSetStateOps | RandGetStateOps


def _check_state_tensor(chk: Check, name: str, t: Tensor) -> None:
    if chk.engine is Engine.vector:
        require(
            chk,
            "vector_prng_state",
            "engine",
            "the Vector Engine's PRNG state is reachable from NeuronCore-v4; use GpSimd",
        )
    if dtype_name(t.dtype) != "uint32":
        chk.fail(DtypeError, name, f"dtype {dtype_name(t.dtype)} must be uint32")
    if t.ndim != 2:
        chk.fail(ShapeError, name, f"shape {list(t.shape)} must be 2-D: [lanes, state words]")
    words = state_words(chk.engine, chk.hw.capabilities)
    if t.shape[1] != words:
        chk.fail(
            ShapeError,
            name,
            f"has {t.shape[1]} state words per partition; XORWOW on the {chk.engine.title} Engine keeps {words}",
        )


def _rand_set_state_validate(ops: RandSetStateOps, chk: Check) -> None:
    _check_state_tensor(chk, "src_seeds", ops.src_seeds)


def _rand_get_state_validate(ops: RandGetStateOps, chk: Check) -> None:
    _check_state_tensor(chk, "dst", ops.dst)
    if not chk.hw.capabilities.rand_get_state_to_psum:
        check_in(chk, "dst", ops.dst, Buffer.sbuf)


def _state_engine(ops: RandStateOps, hw: HwConfig) -> Engine:
    return Engine.gpsimd


def _state_cost(t: Tensor, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, W)`` engine cycles, ``W`` the state words per partition (estimate)."""
    return per_element_cost(engine, hw, t.free_size)


def _chosen(ops: RandStateOps) -> Engine:
    return ops.engine if ops.engine is not Engine.unknown else Engine.gpsimd


def _rand_set_state_cost(ops: RandSetStateOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, W)`` GpSimd or Vector cycles, ``W`` the state words per partition (estimate)."""
    return _state_cost(ops.src_seeds, hw, engine)


def _rand_get_state_cost(ops: RandGetStateOps, hw: HwConfig, engine: Engine) -> Cost:
    """``max(MIN_II, W)`` GpSimd or Vector cycles, ``W`` the state words per partition (estimate)."""
    return _state_cost(ops.dst, hw, engine)


@instruction(
    "rand_set_state",
    RandSetStateOps,
    engines=(Engine.gpsimd, Engine.vector),
    cost=_rand_set_state_cost,
    validate=_rand_set_state_validate,
    choose_engine=_state_engine,
    requires=("gpsimd_prng",),
    dtypes="src_seeds uint32 (the state words)",
)
def rand_set_state(ops: RandSetStateOps, state: EngineState) -> None:
    """Load the PRNG state of the lanes of ``src_seeds``'s partitions verbatim (6 or 24 words each)."""
    engine = _chosen(ops)
    engine_prng(state, engine)[lanes_of(ops.src_seeds)] = as_rows(ops.src_seeds.array, ops.src_seeds.partitions)


@instruction(
    "rand_get_state",
    RandGetStateOps,
    engines=(Engine.gpsimd, Engine.vector),
    cost=_rand_get_state_cost,
    validate=_rand_get_state_validate,
    choose_engine=_state_engine,
    requires=("gpsimd_prng",),
    dtypes="dst uint32 (the state words)",
)
def rand_get_state(ops: RandGetStateOps, state: EngineState) -> None:
    """Store the PRNG state of the lanes of ``dst``'s partitions (6 or 24 uint32 words each)."""
    engine = _chosen(ops)
    ops.dst.array[...] = engine_prng(state, engine)[lanes_of(ops.dst)].reshape(ops.dst.shape)
