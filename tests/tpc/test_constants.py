"""Each published Gaudi TPC constant in the generation files, pinned with its public source."""

from __future__ import annotations

import pytest

from nkisim.hw.tpc import gaudi_names, load_gaudi


def test_packaged_generations() -> None:
    assert gaudi_names() == ["gaudi", "gaudi2", "gaudi3"]
    assert load_gaudi("gaudi1") is load_gaudi("gaudi")


@pytest.mark.parametrize(
    ("device", "tpcs", "mhz", "hbm", "device_id"),
    [
        # graph-compiler HAL headers (Intel_Gaudi3_Software hal_reader/{gaudi1,gaudi2,gaudi3}/hal.h)
        ("gaudi", 8, 1900, 950.0, 1),
        ("gaudi2", 24, 2000, 1945.0, 3),
        ("gaudi3", 64, 2000, 2918.0, 4),
    ],
)
def test_hal_numbers(device: str, tpcs: int, mhz: int, hbm: float, device_id: int) -> None:
    cfg = load_gaudi(device)
    assert cfg.tpc_engines == tpcs
    assert cfg.clock_mhz == mhz
    assert cfg.hbm_bandwidth_gb_per_s == hbm
    assert cfg.device_id == device_id  # gcapi DeviceId: GAUDI 1, GAUDI2 3, GAUDI3 4
    assert cfg.icache_bytes == 64 * 1024
    # 2048-bit vectors: 64 fp32, 128 bf16, 256 int8 lanes (TPC User Guide)
    assert cfg.vector_bytes == 256
    assert (cfg.lanes(4), cfg.lanes(2), cfg.lanes(1)) == (64, 128, 256)
    # VLIW4: load, SPU, VPU, store (TPCSchedule.td IssueWidth = 4)
    assert cfg.vliw_slots == 4
    # at most 16 tensors, 32 scalar parameter words, 5-D index space (TPC Programming Model; GC2.0)
    assert (cfg.max_tensors, cfg.max_scalar_params, cfg.max_index_space_rank) == (16, 32, 5)


def test_local_memories() -> None:
    """tpc_llvm README_TPC.md / TPCSubtarget.h: VLM 80 KiB, 16 KiB with LOOKUP; SLM 1 KB on Gaudi, 16 KB on Gaudi2."""
    assert load_gaudi("gaudi").slm_bytes == 1024
    assert load_gaudi("gaudi2").slm_bytes == 16 * 1024
    for device in ("gaudi", "gaudi2"):
        assert load_gaudi(device).vlm_bytes == 80 * 1024
        assert load_gaudi(device).vlm_lookup_bytes == 16 * 1024


def test_ld_tnsr_in_store_slot_from_gaudi2() -> None:
    """TPC.td: LD_TNSR in the store slot is a Gaudi2 ISA feature."""
    assert not load_gaudi("gaudi").ld_tnsr_in_store_slot
    assert load_gaudi("gaudi2").ld_tnsr_in_store_slot


@pytest.mark.parametrize("device", ["gaudi", "gaudi2", "gaudi3"])
def test_latency_table(device: str) -> None:
    """tpc_llvm latencies.cpp, as re-evaluated in the notes: the same for every generation."""
    lat = load_gaudi(device).latency
    assert (lat.vpu, lat.fma, lat.fma_to_accumulator, lat.cmp_to_predicate) == (4, 6, 4, 2)
    assert (lat.shuffle, lat.mov_dual_group, lat.ld_tnsr, lat.lookup, lat.lookup_issue_cycles) == (5, 6, 4, 5, 2)
    assert (lat.to_store_value, lat.default) == (1, 4)


@pytest.mark.parametrize(("device", "share"), [("gaudi", 62.5), ("gaudi2", 40.5), ("gaudi3", 22.8)])
def test_derived_hbm_share(device: str, share: float) -> None:
    """[derived] HBM bytes per cycle per TPC when every TPC streams: bandwidth / (TPCs x clock)."""
    cfg = load_gaudi(device)
    assert cfg.hbm_bytes_per_cycle() == pytest.approx(share, abs=0.05)
    assert cfg.hbm_bytes_per_cycle(1) == 256.0  # one TPC alone: at most one vector per cycle
