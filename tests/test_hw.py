"""Every shipped hardware generation loads and holds the published numbers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from nkisim.hw import HwConfig, generation_names, load_target
from nkisim.hw.model import DEFAULT_TARGET, TARGET_ENV_VAR

# Published figures (Neuron architecture guides; NKI DMA bandwidth guide).
PUBLISHED = {
    # target: (nc_version, SBUF KiB per partition, tensor GHz, vector GHz, scalar GHz, DMA B/ns per engine)
    "trn1": (2, 192, 2.8, 1.12, 1.4, 17.0),
    "trn2": (3, 224, 2.4, 0.96, 1.2, 23.0),
    "trn3": (4, 256, 2.4, 1.2, 1.2, 33.0),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_generation_matches_published_numbers(name: str) -> None:
    hw = load_target(name)
    version, sbuf_kib, tensor_ghz, vector_ghz, scalar_ghz, dma_rate = PUBLISHED[name]
    assert hw.nc_version == version
    assert hw.sbuf.partitions == 128
    assert hw.sbuf.bytes_per_partition == sbuf_kib * 1024
    assert hw.psum.partitions == 128
    assert hw.psum.bytes_per_partition == 16 * 1024
    assert hw.psum.banks == 8
    assert hw.psum.bank_bytes == 2048
    assert hw.tensor.clock_ghz == tensor_ghz
    assert hw.vector.clock_ghz == vector_ghz
    assert hw.scalar.clock_ghz == scalar_ghz
    assert hw.dma.engines == 16
    assert hw.dma.queues == 16
    assert hw.dma.bytes_per_ns_per_engine == dma_rate
    assert hw.dma.bytes_per_ns == 16 * dma_rate
    assert hw.dma.fixed_latency_ns == 1300
    assert hw.vector.min_ii_cycles == 64
    assert hw.tensor.matmul_min_ii_cycles == 64
    assert hw.tensor.fp32_cycle_factor == 4


def test_tensor_engine_peak_matches_published_tflops() -> None:
    # trn1: ~92 TFLOPS bf16 = 128 x 128 PEs x 2 flops x 2.8 GHz
    hw = load_target("trn1")
    tflops = hw.tensor.rows * hw.tensor.columns * 2 * hw.tensor.clock_ghz / 1000
    assert tflops == pytest.approx(91.75, rel=1e-3)


def test_aliases_resolve_to_their_generation() -> None:
    assert load_target("inf2") is load_target("trn1")
    assert load_target("gen2") is load_target("trn1")
    assert load_target("gen3") is load_target("trn2")
    assert load_target("gen4") is load_target("trn3")
    assert {"trn1", "trn2", "trn3", "inf2"} <= set(generation_names())


def test_default_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TARGET_ENV_VAR, raising=False)
    assert load_target().name == DEFAULT_TARGET == "trn1"
    monkeypatch.setenv(TARGET_ENV_VAR, "trn2")
    assert load_target().name == "trn2"
    assert load_target("trn3").name == "trn3"  # an explicit name wins


def test_unknown_target_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown target 'trn9'.*trn1"):
        load_target("trn9")


def test_configs_are_frozen_and_strict() -> None:
    hw = load_target("trn1")
    with pytest.raises(ValidationError):
        hw.nc_version = 5  # type: ignore[misc]
    data = hw.model_dump()
    data["sbuf"]["typo_field"] = 1
    with pytest.raises(ValidationError):
        HwConfig.model_validate(data)
    data = hw.model_dump()
    data["psum"]["bytes_per_partition"] = 16385  # not a multiple of the 8 banks
    with pytest.raises(ValidationError):
        HwConfig.model_validate(data)


@pytest.mark.parametrize("name", ["trn1", "trn2", "trn3"])
def test_dynamic_offset_instructions_have_the_published_minimum_interval(name: str) -> None:
    # tensor_copy_dynamic_src/_dst: "MIN_II_DYNAMIC is roughly 600 engine cycles" (neuronxcc.nki.isa, Neuron 2.26)
    hw = load_target(name)
    assert hw.vector.min_ii_dynamic_cycles == hw.scalar.min_ii_dynamic_cycles == hw.gpsimd.min_ii_dynamic_cycles == 600
