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
    rank_collectives,
    rank_permutes,
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
from nkisim.isa.rank_collectives import COLLECTIVES
from nkisim.isa.spec import REGISTRY, Check, Cost, EngineState, InstructionSpec, Operands

if set(REGISTRY) & set(COLLECTIVES):
    raise ValueError(f"nki.isa and nki.collectives share instruction names: {sorted(set(REGISTRY) & set(COLLECTIVES))}")
#: Everything an NKI kernel can issue: ``nki.isa`` (:data:`REGISTRY`) and ``nki.collectives`` (:data:`COLLECTIVES`).
NKI_INSTRUCTIONS: dict[str, InstructionSpec] = {**REGISTRY, **COLLECTIVES}

__all__ = [
    "COLLECTIVES",
    "NKI_INSTRUCTIONS",
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
