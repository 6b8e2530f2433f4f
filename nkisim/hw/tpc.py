"""Habana Gaudi generations as the TPC programming model sees them: engines, clock, memories, latencies.

One frozen record per generation, loaded from ``nkisim/hw/gaudi/<name>.toml`` (a folder of its own:
the files in ``generations/`` are NeuronCores). Every number has its public source, or says that it
is our estimate, in a comment of the TOML file; docs/tpc.md explains how the cycle model uses them.
"""

from __future__ import annotations

import functools
import tomllib
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field


class TpcLatencies(BaseModel):
    """Dependent-issue distances (cycles) of the TPC pipeline, by producer class and consumer operand.

    Attributes:
        vpu: VPU ADD/SUB/MIN/MAX/MOV/SEL/CONVERT/CALC_FP_SPECIAL -> a VPU source operand.
        fma: VPU f32/bf16 MUL, MAC, MADD -> a VPU non-accumulator source.
        fma_to_accumulator: MAC/MUL -> the next MAC's accumulator.
        cmp_to_predicate: a VPU CMP -> a vector predicate operand.
        shuffle: SHUFFLE, PACK, MOV_GROUP -> VPU.
        mov_dual_group: MOV_DUAL_GROUP -> VPU.
        ld_tnsr: LD_TNSR or LD_L_V -> VPU (bandwidth stalls come on top).
        lookup: LOOKUP_1C/2C -> VPU.
        lookup_issue_cycles: cycles a LOOKUP occupies the load slot.
        to_store_value: any VPU or load result -> the value of a store.
        default: every other producer/consumer pair.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    vpu: int = Field(ge=1)
    fma: int = Field(ge=1)
    fma_to_accumulator: int = Field(ge=1)
    cmp_to_predicate: int = Field(ge=1)
    shuffle: int = Field(ge=1)
    mov_dual_group: int = Field(ge=1)
    ld_tnsr: int = Field(ge=1)
    lookup: int = Field(ge=1)
    lookup_issue_cycles: int = Field(ge=1)
    to_store_value: int = Field(ge=1)
    default: int = Field(ge=1)


class TpcConfig(BaseModel):
    """One Gaudi generation's TPC constants.

    Attributes:
        name: canonical device name (``gaudi``, ``gaudi2``, ``gaudi3``).
        aliases: other accepted names.
        device_id: the GC2.0 ``DeviceId`` (GAUDI 1, GAUDI2 3, GAUDI3 4).
        tpc_engines: TPCs on the chip.
        clock_mhz: the TPC clock of the graph compiler's HAL.
        icache_bytes: TPC instruction cache.
        vector_bytes: the vector register width (2048 bits).
        hbm_bandwidth_gb_per_s: HBM bandwidth of the HAL model, shared by all TPCs.
        slm_bytes: scalar local memory per TPC.
        vlm_bytes: vector local memory per TPC.
        vlm_lookup_bytes: vector local memory left when the kernel uses LOOKUP or special functions.
        max_tensors: tensors per kernel (inputs, outputs and auxiliary together).
        max_scalar_params: 32-bit scalar parameter words per kernel.
        max_index_space_rank: dimensions of the index space and of tensors.
        vliw_slots: issue slots per bundle (load, SPU, VPU, store).
        ld_tnsr_in_store_slot: a tensor load may issue in the store slot (Gaudi2 ISA).
        launch_overhead_cycles: fixed cost of starting a kernel (our estimate).
        latency: the pipeline's dependent-issue distances.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    aliases: tuple[str, ...] = ()
    device_id: int = Field(ge=1)
    tpc_engines: int = Field(gt=0)
    clock_mhz: float = Field(gt=0)
    icache_bytes: int = Field(gt=0)
    vector_bytes: int = Field(gt=0)
    hbm_bandwidth_gb_per_s: float = Field(gt=0)
    slm_bytes: int = Field(gt=0)
    vlm_bytes: int = Field(gt=0)
    vlm_lookup_bytes: int = Field(gt=0)
    max_tensors: int = Field(gt=0)
    max_scalar_params: int = Field(gt=0)
    max_index_space_rank: int = Field(gt=0)
    vliw_slots: int = Field(gt=0)
    ld_tnsr_in_store_slot: bool
    launch_overhead_cycles: float = Field(ge=0)
    latency: TpcLatencies

    @property
    def clock_ghz(self) -> float:
        return self.clock_mhz / 1000.0

    def lanes(self, itemsize: int) -> int:
        """Vector lanes for elements of ``itemsize`` bytes (64 for fp32, 128 for bf16, 256 for int8)."""
        return self.vector_bytes // itemsize

    def hbm_bytes_per_cycle(self, active_tpcs: int | None = None) -> float:
        """Each TPC's share of HBM bandwidth, in bytes per TPC cycle, when ``active_tpcs`` stream at once.

        Capped at one vector per cycle (a TPC loads at most one vector per bundle).
        """
        active = self.tpc_engines if active_tpcs is None else max(1, active_tpcs)
        share = self.hbm_bandwidth_gb_per_s / (active * self.clock_ghz)
        return min(share, float(self.vector_bytes))


@functools.cache
def _devices() -> dict[str, TpcConfig]:
    table: dict[str, TpcConfig] = {}
    folder = resources.files("nkisim.hw") / "gaudi"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            cfg = TpcConfig.model_validate(tomllib.loads(entry.read_text()))
            for key in (cfg.name, *cfg.aliases):
                table[key] = cfg
    return table


def gaudi_names() -> list[str]:
    """The packaged Gaudi generations, oldest first (aliases not included)."""
    return sorted({cfg.name for cfg in _devices().values()}, key=lambda n: (len(n), n))


def load_gaudi(device: str | TpcConfig) -> TpcConfig:
    """The TPC constants of ``device`` (a name or alias, or a :class:`TpcConfig`, returned as is)."""
    if isinstance(device, TpcConfig):
        return device
    table = _devices()
    try:
        return table[device.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown Gaudi device {device!r}; choose one of {', '.join(sorted(table))}") from None
