"""Hardware generations as frozen, validated records loaded from packaged TOML.

Each generation is a file in ``nkisim/hw/generations/``. Every number that a cost
formula uses is a field here, with its unit in its name and its public source in a
comment of the TOML file.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import tomllib
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field, model_validator

from nkisim.hw.engines import Engine

#: The generation used when neither the kernel nor the environment names one.
DEFAULT_TARGET = "trn1"
TARGET_ENV_VAR = "NEURON_PLATFORM_TARGET_OVERRIDE"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OnChipMemoryConfig(_Frozen):
    """SBUF or PSUM: a 2-D memory of partitions by bytes."""

    partitions: int = Field(gt=0)
    bytes_per_partition: int = Field(gt=0)
    alignment_bytes: int = Field(gt=0)
    banks: int = Field(default=1, gt=0)
    #: An engine stream whose innermost stride exceeds this many bytes runs at half bandwidth.
    wide_stride_bytes: int = Field(default=16, gt=0)
    wide_stride_slowdown: float = Field(default=1.0, ge=1)

    @property
    def bank_bytes(self) -> int:
        return self.bytes_per_partition // self.banks


class HbmConfig(_Frozen):
    """Device memory visible to one NeuronCore."""

    capacity_bytes: int = Field(gt=0)
    bandwidth_bytes_per_ns: float = Field(gt=0)


class EngineConfig(_Frozen):
    """A compute engine's clock and its per-instruction cost parameters (engine cycles)."""

    clock_ghz: float = Field(gt=0)
    min_ii_cycles: int = Field(ge=0)
    cycles_per_element: float = Field(default=1.0, gt=0)
    startup_cycles: int = Field(default=0, ge=0)
    #: Vector: an element-wise op reading two SBUF tiles (not bf16 add/mul/sub) runs at half rate.
    two_sbuf_inputs_cycles_per_element: float = Field(default=1.0, gt=0)
    #: Vector: bf16 add/max reductions and memset of zero into 16-bit tiles run at double rate.
    fast_path_cycles_per_element: float = Field(default=1.0, gt=0)
    #: Vector: bn_aggr costs this many cycles per (count, mean, variance*count) group.
    bn_aggr_cycles_per_group: float = Field(default=13.0, gt=0)
    #: Vector: cycles per random 32-bit value (rng, rand2); XORWOW on NeuronCore-v4 makes 4 per cycle.
    prng_cycles_per_element: float = Field(default=1.0, gt=0)
    #: Vector: cycles per source element of quantize_mx (NeuronCore-v4 quantizes 4 per cycle).
    quantize_mx_cycles_per_element: float = Field(default=1.0, gt=0)
    #: GpSimd local_gather cost ``(overhead + t * n) / (t * n) / min(lane_bytes / dtype_bytes, n)``
    #: cycles per element: ``t`` indices per batch, a batch overhead and the bytes of one lane.
    local_gather_batch_indices: int = Field(default=1, gt=0)
    local_gather_batch_overhead_cycles: float = Field(default=0.0, ge=0)
    lane_bytes: int = Field(default=4, gt=0)
    #: GpSimd nc_n_gather runs as one group of instructions per this many gathered elements per partition.
    n_gather_group_elements: int = Field(default=512, gt=0)
    #: Vector: reciprocal runs at 1/8 of the element-wise rate.
    reciprocal_cycles_per_element: float = Field(default=1.0, gt=0)
    #: Vector: exponential (NeuronCore-v4) cycles per element.
    exponential_cycles_per_element: float = Field(default=1.0, gt=0)
    #: GpSimd: tensor_partition_reduce cycles per element per partition, after the startup.
    partition_reduce_cycles_per_element: float = Field(default=1.0, gt=0)
    #: Cycles from an instruction's last write until its result can be read (SBUF/PSUM access overhead).
    access_latency_cycles: int = Field(default=0, ge=0)
    #: Static overhead before an instruction that reads the result of the one just before it on this engine.
    dependent_overhead_cycles: int = Field(default=0, ge=0)
    #: Scalar: loading another activation function's table.
    table_switch_cycles: int = Field(default=0, ge=0)
    #: Fastest performance mode (elements per lane per cycle) for 16-bit SBUF-to-SBUF streams; 1 = none.
    perf_mode_max: int = Field(default=1, ge=1)


class TensorEngineConfig(_Frozen):
    """The systolic array and its matmul cost parameters (PE cycles)."""

    clock_ghz: float = Field(gt=0)
    rows: int = Field(gt=0)
    columns: int = Field(gt=0)
    moving_fmax: int = Field(gt=0)
    matmul_min_ii_cycles: int = Field(ge=0)
    fp32_cycle_factor: int = Field(gt=0)
    #: Fast LoadStationary: PE cycles per stationary column (a 128-wide load takes ~32 cycles).
    load_stationary_cycles_per_column: float = Field(default=0.25, ge=0)


class DmaConfig(_Frozen):
    """DMA engines, queues and transfer costs of one NeuronCore."""

    engines: int = Field(gt=0)
    queues: int = Field(gt=0)
    bytes_per_ns_per_engine: float = Field(gt=0)
    fixed_latency_ns: float = Field(ge=0)
    #: dma_transpose throughput as a fraction of a copy's, reading HBM and reading SBUF.
    transpose_hbm_efficiency: float = Field(gt=0, le=1)
    transpose_sbuf_efficiency: float = Field(gt=0, le=1)
    #: DMA compute (``dma_compute``, ``dma_copy`` with ``dst_rmw_op``) throughput as a fraction of a copy's.
    compute_efficiency: float = Field(gt=0, le=1)
    #: (contiguous bytes per packet, fraction of the nominal rate achieved) points, ascending;
    #: interpolated in log2(bytes) and flat beyond the ends (calibrated; see docs/timing.md).
    payload_efficiency: tuple[tuple[int, float], ...] = ((1, 1.0),)
    #: Partitions each DMA engine serves; a transfer over fewer partitions uses fewer engines.
    partitions_per_engine: int = Field(default=8, gt=0)

    @property
    def bytes_per_ns(self) -> float:
        """Aggregate bandwidth when a transfer is spread over every engine."""
        return self.engines * self.bytes_per_ns_per_engine

    def efficiency(self, run_bytes: float) -> float:
        """The achieved fraction of the nominal rate for packets of ``run_bytes`` contiguous bytes."""
        points = self.payload_efficiency
        if run_bytes <= points[0][0]:
            return points[0][1]
        for (lo, lo_eff), (hi, hi_eff) in itertools.pairwise(points):
            if run_bytes <= hi:
                t = (math.log2(run_bytes) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
                return lo_eff + t * (hi_eff - lo_eff)
        return points[-1][1]


class PortConfig(_Frozen):
    """A memory port that some engines cannot use at the same time (NeuronCore-v2)."""

    name: str
    engines: tuple[str, ...]
    memory: str


class SyncConfig(_Frozen):
    """Cross-engine synchronisation."""

    semaphore_latency_ns: float = Field(ge=0)
    #: A semaphore update sent to the other core of an LNC=2 pair (``core_barrier``).
    remote_semaphore_latency_ns: float = Field(ge=0)


class SequencerConfig(_Frozen):
    """Engine sequencers: control instructions on their 32-bit registers, at the issuing engine's clock."""

    #: ``register_move``: one register ALU instruction.
    register_op_cycles: int = Field(gt=0)
    #: ``register_load`` / ``register_store`` of SBUF: one tensor access request.
    register_sbuf_access_cycles: int = Field(gt=0)


class HwConfig(_Frozen):
    """One hardware generation (a NeuronCore version and its memories and engines).

    Attributes:
        name: canonical target name (``trn1``, ``trn2``, ``trn3``).
        aliases: other accepted target names (``inf2``, ``gen2``, ...).
        nc_version: NeuronCore version (2 for trn1/inf2, 3 for trn2, 4 for trn3).
        reference_clock_ghz: the clock at which profiles count ``total_cycles``.
    """

    name: str
    aliases: tuple[str, ...] = ()
    nc_version: int = Field(ge=2)
    reference_clock_ghz: float = Field(gt=0)
    sbuf: OnChipMemoryConfig
    psum: OnChipMemoryConfig
    hbm: HbmConfig
    dma: DmaConfig
    sync: SyncConfig
    tensor: TensorEngineConfig
    vector: EngineConfig
    scalar: EngineConfig
    gpsimd: EngineConfig
    sync_engine: EngineConfig
    ports: tuple[PortConfig, ...] = ()
    sequencer: SequencerConfig

    @model_validator(mode="after")
    def _check(self) -> HwConfig:
        if self.psum.bytes_per_partition % self.psum.banks:
            raise ValueError("psum bytes_per_partition must be a multiple of banks")
        if self.sbuf.partitions != self.psum.partitions:
            raise ValueError("sbuf and psum must have the same number of partitions")
        return self

    def engine(self, engine: Engine) -> EngineConfig:
        """The cost parameters of a non-Tensor compute engine."""
        return _ENGINE_FIELD[engine](self)

    def clock_ghz(self, engine: Engine) -> float:
        if engine is Engine.tensor:
            return self.tensor.clock_ghz
        return self.engine(engine).clock_ghz


_ENGINE_FIELD = {
    Engine.vector: lambda hw: hw.vector,
    Engine.scalar: lambda hw: hw.scalar,
    Engine.gpsimd: lambda hw: hw.gpsimd,
    Engine.sync: lambda hw: hw.sync_engine,
}


@functools.cache
def _all_generations() -> dict[str, HwConfig]:
    table: dict[str, HwConfig] = {}
    folder = resources.files("nkisim.hw") / "generations"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            hw = HwConfig.model_validate(tomllib.loads(entry.read_text()))
            for key in (hw.name, *hw.aliases):
                table[key] = hw
    return table


def generation_names() -> list[str]:
    """Every accepted target name, aliases included."""
    return sorted(_all_generations())


def load_target(target: str | HwConfig | None = None) -> HwConfig:
    """Resolve a target name (or ``None``: the environment, then the default) to its config."""
    if isinstance(target, HwConfig):
        return target
    name = target or os.environ.get(TARGET_ENV_VAR) or DEFAULT_TARGET
    table = _all_generations()
    try:
        return table[name.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown target {name!r}; choose one of {', '.join(sorted(table))}") from None
