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
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, model_validator

from nkisim.hw.engines import Engine
from nkisim.hw.gpsimd import GpsimdConfig

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
    #: MIN_II_DYNAMIC: the minimum initiation interval of an instruction with a run-time (dynamic)
    #: source or destination offset (tensor_copy_dynamic_src/_dst).
    min_ii_dynamic_cycles: int = Field(default=0, ge=0)
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
    #: Scalar: loading an activation function's table (ACT_TABLE_LOAD), before the first
    #: activation that needs one and whenever the function needs another.
    table_load_ns: float = Field(default=0.0, ge=0)
    #: Fastest performance mode (elements per lane per cycle) for 16-bit SBUF-to-SBUF streams; 1 = none.
    perf_mode_max: int = Field(default=1, ge=1)


class TensorEngineConfig(_Frozen):
    """The systolic array and its matmul cost parameters (PE cycles)."""

    clock_ghz: float = Field(gt=0)
    rows: int = Field(gt=0)
    columns: int = Field(gt=0)
    #: Moving free size for a float32 dst; the limit is ``moving_fmax * 4`` bytes of dst per
    #: partition, so a 2-byte dst (where the generation allows one) takes twice as many.
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


class CollectivesConfig(_Frozen):
    """The links ``nki.collectives`` move data over, as a ring of ranks sees them (docs/collectives.md).

    A ring step sends one chunk to the next rank over one link: ``link_bytes_per_ns`` is one
    link's bandwidth, ``hop_latency_ns`` the fixed time a step takes besides its bytes.
    """

    #: One device-to-device link's bandwidth, in bytes per ns (GB/s).
    link_bytes_per_ns: float = Field(gt=0)
    #: The fixed time of one ring step (one hop to the next rank).
    hop_latency_ns: float = Field(ge=0)
    #: Channels ``collective_permute_implicit`` may use at once.
    max_channels: int = Field(ge=1)


class LaunchConfig(_Frozen):
    """What a NEFF execution costs around the kernel's own instructions.

    A device profile of one execution (neuron-profile's timeline, the runtime's cycle count of
    the graph) starts ``startup_ns`` before the kernel's first instruction and ends
    ``teardown_ns`` after its last: "every NEFF execution involves certain start-up and
    tear-down overhead" (NKI fused Mamba tutorial). The kernel timeline leaves them out.
    """

    startup_ns: float = Field(ge=0)
    teardown_ns: float = Field(ge=0)

    @property
    def overhead_ns(self) -> float:
        """Start-up plus tear-down."""
        return self.startup_ns + self.teardown_ns


class SequencerConfig(_Frozen):
    """Engine sequencers: control instructions on their 32-bit registers, at the issuing engine's clock."""

    #: ``register_move``: one register ALU instruction.
    register_op_cycles: int = Field(gt=0)
    #: ``register_load`` / ``register_store`` of SBUF: one tensor access request.
    register_sbuf_access_cycles: int = Field(gt=0)


#: Data types the Tensor Engine may read or write (NKI names).
MatmulDtype = Literal["float8_e4m3", "float8_e5m2", "float8_e4m3fn", "bfloat16", "float16", "tfloat32", "float32"]
#: Reductions ``activation_reduce`` may fuse.
ActivationReduceOp = Literal["add", "maximum", "minimum"]


class Capabilities(_Frozen):
    """What a generation has, by name. Instruction specs ask these, never the NeuronCore version.

    Every field is required (there are no defaults): a generation file states each one,
    or inherits it from the generation it names with ``base =``, so a new or what-if
    generation never silently takes another generation's behaviour. Booleans are features,
    and the names an instruction's ``requires`` may list; the other fields carry the
    generation's value. The TOML files say what each means and where it is published.
    """

    # Whole instructions (InstructionSpec.requires).
    #: Two NeuronCores per logical core (LNC=2): ``core_barrier``, ``sendrecv`` (and ``kernel[2]``).
    lnc2_collectives: StrictBool
    #: ``nki.collectives`` between the ranks of a replica group (all_reduce, all_gather, ...).
    replica_collectives: StrictBool
    #: MXFP8/MXFP4 micro-scaling: ``quantize_mx``, ``nc_matmul_mx`` and the packed x4 dtypes.
    mx_formats: StrictBool
    #: The Vector Engine's ``exponential`` instruction.
    vector_exponential: StrictBool
    #: The Vector Engine's ``range_select`` instruction.
    vector_range_select: StrictBool
    #: The GpSimd Engine's ``nonzero_with_count`` instruction.
    gpsimd_nonzero_with_count: StrictBool
    #: The Vector Engine's ``rand2`` (uniform floats from its XORWOW generators).
    vector_rand2: StrictBool
    #: A per-lane XORWOW generator on GpSimd: ``rng(engine=gpsimd)``, ``rand_set_state``, ``rand_get_state``.
    gpsimd_prng: StrictBool
    #: The Scalar Engine's ``activate2`` (two tensor-scalar stages, activation, reduction).
    scalar_activate2: StrictBool
    # Rules inside instructions.
    #: ``activation``/``activation_reduce`` take a compile-time scalar ``bias`` (else only a (P, 1) tile).
    activation_scalar_bias: StrictBool
    #: The reductions ``activation_reduce`` fuses.
    activation_reduce_ops: tuple[ActivationReduceOp, ...] = Field(min_length=1)
    #: ``tensor_copy`` runs on the Scalar Engine.
    scalar_tensor_copy: StrictBool
    #: Hardware descriptor generation: ``dge_mode.hwdge`` DMAs.
    hardware_dge: StrictBool
    #: ``dma_transpose`` with a ``vector_offset`` (indirect) HBM source.
    dma_indirect_transpose: StrictBool
    #: ``nc_matmul`` stationary/moving dtypes.
    matmul_input_dtypes: tuple[MatmulDtype, ...] = Field(min_length=1)
    #: ``nc_matmul`` dst dtypes (outside transpose mode).
    matmul_output_dtypes: tuple[MatmulDtype, ...] = Field(min_length=1)
    #: PSUM banks one ``nc_matmul`` dst may span.
    matmul_dst_psum_banks: StrictInt = Field(gt=0)
    #: ``nc_matmul(is_transpose=True)`` copies stationary.T bit-exactly into a dst of stationary's dtype,
    #: at the 1-pass rate even for fp32; without it, is_transpose is an fp32 matmul like any other.
    transpose_passes_dtype: StrictBool
    #: ``perf_mode=double_row``: fp8 matmuls with a doubled contraction.
    matmul_double_row: StrictBool
    #: Legal PE tile sizes (rows or columns) of ``nc_matmul`` tiling.
    pe_tile_sizes: tuple[Annotated[StrictInt, Field(gt=0)], ...] = Field(min_length=1)
    #: The Vector Engine's per-lane generator: a 32-bit xorshift (one word) or XORWOW (6 words per stream).
    vector_prng: Literal["xorshift32", "xorwow"]
    #: Independent generators per Vector Engine lane (element ``e`` of a lane draws from stream ``e % streams``).
    vector_prng_streams: StrictInt = Field(gt=0)
    #: ``rand_set_state``/``rand_get_state`` reach the Vector Engine's generator (``engine=vector``).
    vector_prng_state: StrictBool
    #: ``rand_get_state`` may write PSUM (else SBUF only).
    rand_get_state_to_psum: StrictBool
    # Rules the sanitizer (``check=``) enforces; docs/checks.md.
    #: An access's start partition depends on its size: more than 64 partitions start at 0,
    #: 33-64 at 0 or 64, up to 32 at a multiple of 32.
    partition_start_quadrants: StrictBool
    #: ``nc_matmul(accumulate=True)`` may add onto PSUM values another engine wrote.
    psum_accumulate_onto_any_write: StrictBool
    #: Free-dim access pattern of an engine operand: dims, and each dim's size and |stride| in elements.
    access_pattern_free_dims: StrictInt = Field(gt=0)
    access_pattern_max_size: StrictInt = Field(gt=0)
    access_pattern_max_stride: StrictInt = Field(gt=0)

    @model_validator(mode="after")
    def _check(self) -> Capabilities:
        if self.vector_prng == "xorshift32" and self.vector_prng_streams != 1:
            raise ValueError("vector_prng xorshift32 has one stream per lane; set vector_prng_streams = 1")
        return self

    @classmethod
    def features(cls) -> tuple[str, ...]:
        """The boolean capabilities: the names ``InstructionSpec.requires`` may list."""
        return tuple(name for name, f in cls.model_fields.items() if f.annotation is bool)


class HwConfig(_Frozen):
    """One hardware generation (a NeuronCore version and its memories and engines).

    Attributes:
        name: canonical target name (``trn1``, ``trn2``, ``trn3``).
        aliases: other accepted target names (``inf2``, ``gen2``, ...).
        nc_version: NeuronCore version (2 for trn1/inf2, 3 for trn2, 4 for trn3).
        nc_sub_version: the silicon revision within the version (0: the first, which nkisim models).
        reference_clock_ghz: the clock at which profiles count ``total_cycles``.
        capabilities: what the generation has, by name (see :class:`Capabilities`).
    """

    name: str
    aliases: tuple[str, ...] = ()
    nc_version: int = Field(ge=2)
    nc_sub_version: int = Field(0, ge=0)
    reference_clock_ghz: float = Field(gt=0)
    sbuf: OnChipMemoryConfig
    psum: OnChipMemoryConfig
    hbm: HbmConfig
    dma: DmaConfig
    sync: SyncConfig
    collectives: CollectivesConfig
    launch: LaunchConfig
    tensor: TensorEngineConfig
    vector: EngineConfig
    scalar: EngineConfig
    gpsimd: EngineConfig
    #: The GPSIMD processors as custom C++ operators see them (:mod:`nkisim.gpsimd`).
    gpsimd_cores: GpsimdConfig
    sync_engine: EngineConfig
    ports: tuple[PortConfig, ...] = ()
    sequencer: SequencerConfig
    capabilities: Capabilities

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

    @property
    def core_name(self) -> str:
        """``NeuronCore-v2``, ``NeuronCore-v3``, ...: the NeuronCore version, as the docs name it."""
        return f"NeuronCore-v{self.nc_version}"

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> HwConfig:
        """Load a generation file, such as a what-if machine.

        A file that says ``base = "trn2"`` (a packaged generation or alias, or the path of
        another generation file, relative to this one) holds only what it changes: its
        tables are merged, key by key, over the base's. It must give its own ``name``;
        the base's ``aliases`` are not inherited.

        Raises:
            ValueError: the file is missing, is not TOML, names an unknown base, or the
                merged generation is invalid (a pydantic ``ValidationError`` names the field).
        """
        return cls.model_validate(_resolve_file(Path(path), ()))


_ENGINE_FIELD = {
    Engine.vector: lambda hw: hw.vector,
    Engine.scalar: lambda hw: hw.scalar,
    Engine.gpsimd: lambda hw: hw.gpsimd,
    Engine.sync: lambda hw: hw.sync_engine,
}


@functools.cache
def _packaged_tables() -> dict[str, dict[str, Any]]:
    """The packaged generation files as parsed TOML, by name and by alias."""
    table: dict[str, dict[str, Any]] = {}
    folder = resources.files("nkisim.hw") / "generations"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            data = tomllib.loads(entry.read_text())
            for key in (data["name"], *data.get("aliases", ())):
                table[key] = data
    return table


@functools.cache
def _all_generations() -> dict[str, HwConfig]:
    built: dict[str, HwConfig] = {}
    table: dict[str, HwConfig] = {}
    for key, data in _packaged_tables().items():
        hw = built.get(data["name"]) or HwConfig.model_validate(data)
        built[hw.name] = hw
        table[key] = hw
    return table


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``: tables merge key by key; any other value (arrays too) replaces."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


#: Keys that earlier generation files had, and what replaced them.
_RETIRED_KEYS = {
    ("scalar", "table_switch_cycles"): "give table_load_ns, the time of one activation table load in ns "
    "(paid also by the kernel's first table)",
}


def _resolve_file(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    """The complete table of generation file ``path``, its ``base`` (if any) merged under it."""
    path = path.expanduser().resolve()
    if path in seen:
        raise ValueError(f"generation file {path} is its own base (through {', '.join(map(str, seen))})")
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"generation file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"generation file {path} is not valid TOML: {exc}") from None
    for (section, key), replacement in _RETIRED_KEYS.items():
        if key in data.get(section, {}):
            raise ValueError(f"generation file {path}: [{section}] {key} is no longer read; {replacement}")
    base = data.pop("base", None)
    if base is None:
        return data
    if "name" not in data:
        raise ValueError(f"generation file {path} has base = {base!r} but no name of its own")
    if not isinstance(base, str):
        raise ValueError(f"generation file {path}: base must be a generation name or a .toml path, not {base!r}")
    if base.strip().lower().endswith(".toml"):
        parent = _resolve_file(path.parent / base, (*seen, path))
    else:
        packaged = _packaged_tables()
        key = base.strip().lower()
        if key not in packaged:
            raise ValueError(f"generation file {path}: unknown base {base!r}; choose one of {', '.join(packaged)}")
        parent = packaged[key]
    return _merge({k: v for k, v in parent.items() if k != "aliases"}, data)


def generation_names() -> list[str]:
    """Every accepted target name, aliases included."""
    return sorted(_all_generations())


def packaged_generations() -> list[HwConfig]:
    """The packaged generations, each once, oldest NeuronCore first."""
    unique = {hw.name: hw for hw in _all_generations().values()}
    return sorted(unique.values(), key=lambda hw: (hw.nc_version, hw.name))


def capability_holders(capability: str) -> list[HwConfig]:
    """The packaged generations that have the boolean ``capability``, oldest first."""
    if capability not in Capabilities.features():
        raise ValueError(
            f"{capability!r} is not a boolean capability; choose one of {', '.join(Capabilities.features())}"
        )
    return [hw for hw in packaged_generations() if getattr(hw.capabilities, capability)]


def _is_path(target: object) -> bool:
    return isinstance(target, os.PathLike) or (isinstance(target, str) and target.strip().lower().endswith(".toml"))


def load_target(target: str | os.PathLike[str] | HwConfig | None = None) -> HwConfig:
    """Resolve a target to its config.

    ``target`` is an :class:`HwConfig`, a generation name or alias (``trn2``, ``inf2``), the
    path of a generation TOML file (a ``str`` ending in ``.toml`` or any ``os.PathLike``; see
    :meth:`HwConfig.from_toml`), or ``None``: the ``NEURON_PLATFORM_TARGET_OVERRIDE``
    environment variable (a name or a path), then the default, ``trn1``.
    """
    if isinstance(target, HwConfig):
        return target
    chosen = target if target is not None else os.environ.get(TARGET_ENV_VAR) or DEFAULT_TARGET  # '' is no name
    if _is_path(chosen):
        return HwConfig.from_toml(chosen)
    assert isinstance(chosen, str)
    table = _all_generations()
    try:
        return table[chosen.strip().lower()]
    except KeyError:
        raise ValueError(
            f"unknown target {chosen!r}; choose one of {', '.join(sorted(table))}, or the path of a .toml file"
        ) from None
