"""The GPSIMD cores as custom C++ operators see them: memories, limits and per-element costs.

One record per generation, loaded from the ``[gpsimd_cores]`` table of the generation's TOML
file. The cores' clock is the GpSimd engine's (``[gpsimd] clock_ghz``). Every number has its
public source, or says it is our estimate or a value derived from published measurements, in a
comment of the TOML file.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class GpsimdConfig(BaseModel):
    """Constants of the GPSIMD custom-operator model (see docs/gpsimd.md for the calibration).

    Attributes:
        cores: GPSIMD processors per NeuronCore.
        simd_bits: vector width of each processor.
        tcm_bytes: local data RAM (TCM) of each processor.
        tcm_pool_bytes: the part of TCM that ``tcm_malloc`` and stream accessors share.
        tcm_latency_cycles: access latency of TCM.
        stream_buffer_bytes: TCM taken by each stream accessor.
        fast_streams: active stream accessors that run at stream speed; later ones are slow.
        local_stack_bytes: fast local memory for the stack.
        max_stack_bytes: the largest ``-DSTACK_SIZE`` a library may declare.
        max_functions: operators per library.
        launch_overhead_cycles: fixed cost of launching an operator.
        element_access_cycles: one read or write through the standard accessor.
        stream_access_cycles: one element through a stream accessor (refills included).
        tcm_dma_setup_cycles: fixed cost of each ``tensor_to_tcm`` / ``tcm_to_tensor``.
        tcm_dma_bytes_per_cycle: bytes per cycle of those transfers, per processor.
        simd_op_cycles: one vector instruction on TCM data.
        local_stack_access_cycles: one element of a stack array in local memory.
        remote_stack_access_cycles: one element of a stack array in NeuronCore memory.
        aten_cycles_per_element: an ATen operation or factory function, per element.
        printf_cycles: one ``printf`` call.
        stdout_queue_bytes: the printf ring buffer.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    cores: int = Field(gt=0)
    simd_bits: int = Field(gt=0)
    tcm_bytes: int = Field(gt=0)
    tcm_pool_bytes: int = Field(gt=0)
    tcm_latency_cycles: float = Field(ge=0)
    stream_buffer_bytes: int = Field(gt=0)
    fast_streams: int = Field(ge=0)
    local_stack_bytes: int = Field(gt=0)
    max_stack_bytes: int = Field(gt=0)
    max_functions: int = Field(gt=0)
    launch_overhead_cycles: float = Field(ge=0)
    element_access_cycles: float = Field(ge=0)
    stream_access_cycles: float = Field(ge=0)
    tcm_dma_setup_cycles: float = Field(ge=0)
    tcm_dma_bytes_per_cycle: float = Field(gt=0)
    simd_op_cycles: float = Field(ge=0)
    local_stack_access_cycles: float = Field(ge=0)
    remote_stack_access_cycles: float = Field(ge=0)
    aten_cycles_per_element: float = Field(ge=0)
    printf_cycles: float = Field(ge=0)
    stdout_queue_bytes: int = Field(ge=0)

    def lanes(self, itemsize: int) -> int:
        """SIMD lanes of one processor for elements of ``itemsize`` bytes (16 for fp32)."""
        return max(1, self.simd_bits // (8 * itemsize))
