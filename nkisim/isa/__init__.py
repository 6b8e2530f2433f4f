"""The instruction set: one registry of instruction specs (operands, engines, semantics, cost)."""

from nkisim.isa import (  # noqa: F401 - they register instructions
    activate2,
    collectives,
    dma,
    dynamic_copy,
    gpsimd,
    gpsimd_misc,
    movement,
    mx,
    random,
    registers,
    scalar,
    select,
    stats,
    tensor_engine,
    topk,
    vector,
    vector_reduce,
)
from nkisim.isa.enums import dge_mode, matmul_perf_mode, oob_mode, reduce_cmd
from nkisim.isa.ops import OPS, Op
from nkisim.isa.spec import REGISTRY, Check, Cost, EngineState, InstructionSpec, Operands

__all__ = [
    "OPS",
    "REGISTRY",
    "Check",
    "Cost",
    "EngineState",
    "InstructionSpec",
    "Op",
    "Operands",
    "dge_mode",
    "matmul_perf_mode",
    "oob_mode",
    "reduce_cmd",
]
