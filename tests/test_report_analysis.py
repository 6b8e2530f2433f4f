"""Profile analysis (MFU, DMA bandwidth, critical path, waits, per-line costs) and the HTML report."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import nkisim
import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.hw import load_target

HERE = Path(__file__).name


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if text.endswith(marker))


@nki.jit
def load_add_store(a):
    tile = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=a)  # @load
    out_tile = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=out_tile, data=tile, op0=nl.add, operand0=1.0)  # @add
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=out_tile)  # @store
    return out


@nki.jit
def one_matmul(lhs_t, rhs):
    stationary = nl.ndarray(lhs_t.shape, dtype=lhs_t.dtype, buffer=nl.sbuf)
    moving = nl.ndarray(rhs.shape, dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=stationary, src=lhs_t)
    nisa.dma_copy(dst=moving, src=rhs)
    acc = nl.ndarray((lhs_t.shape[1], rhs.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=stationary, moving=moving)
    res = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    out = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    return out


@nki.jit
def vector_heavy(a):
    tile = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=a)
    for _ in range(40):
        nisa.tensor_scalar(dst=tile, data=tile, op0=nl.multiply, operand0=1.0)  # @loop
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


def test_critical_path_of_a_chain_is_the_chain() -> None:
    profile = nkisim.profile(load_add_store, [((128, 512), np.float32)])
    path = profile.critical_path
    assert [r.opcode for r in path] == ["dma_copy", "tensor_scalar", "dma_copy"]
    assert [r.source for r in path] == [
        f"{HERE}:{_line('# @load')}",
        f"{HERE}:{_line('# @add')}",
        f"{HERE}:{_line('# @store')}",
    ]
    assert profile.bottleneck == "DMA"  # two 256 KiB transfers outweigh one Vector op


def test_semaphore_wait_is_the_idle_time_before_a_late_producer() -> None:
    hw = load_target("trn1")
    profile = nkisim.profile(load_add_store, [((128, 512), np.float32)])
    load = profile.instructions[0]
    # the Vector Engine idles from 0 until the load is done plus the semaphore latency
    expected = load.end_ns + hw.sync.semaphore_latency_ns
    assert profile.semaphore_wait_ns["Vector"] == pytest.approx(expected, rel=1e-12)


def test_mfu_and_dma_bandwidth_use() -> None:
    hw = load_target("trn1")
    lhs_t = np.ones((128, 128), ml_dtypes.bfloat16)
    rhs = np.ones((128, 512), ml_dtypes.bfloat16)
    profile = nkisim.run(one_matmul, [lhs_t, rhs]).profile
    peak_flops_per_ns = 128 * 128 * 2 * 2.8  # ~92 TFLOPS
    assert profile.mfu == pytest.approx(2 * 128 * 128 * 512 / (peak_flops_per_ns * profile.total_ns), rel=1e-12)
    moved = 128 * 128 * 2 + 128 * 512 * 2 + 128 * 512 * 4
    assert profile.dma_bandwidth_utilisation == pytest.approx(moved / (16 * 17.0 * profile.total_ns), rel=1e-12)
    assert hw.dma.bytes_per_ns == 16 * 17.0


def test_compute_bound_kernel_is_bound_by_its_engine_and_lines_rank_by_critical_time() -> None:
    profile = nkisim.profile(vector_heavy, [((128, 2048), np.float32)])
    assert profile.bottleneck == "Vector"
    top = profile.line_costs()[0]
    assert top.source == f"{HERE}:{_line('# @loop')}"
    assert top.instructions == 40
    vector_ns = max(64, 2048) / 1.12
    assert top.busy_ns == pytest.approx(40 * vector_ns, rel=1e-9)
    assert top.engines == {"Vector": pytest.approx(40 * vector_ns, rel=1e-9)}
    text = profile.table()
    assert "bound by Vector" in text and "MFU 0.0%" in text and top.source in text


def test_html_report_is_self_contained(tmp_path: Path) -> None:
    profile = nkisim.profile(load_add_store, [((128, 512), np.float32)])
    path = tmp_path / "report.html"
    profile.to_html(path)
    page = path.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    assert "src=" not in page and "href=" not in page  # nothing to fetch
    for track in {r.engine for r in profile.instructions}:
        assert f">{track}</text>" in page
    assert page.count("<rect") >= len(profile.instructions)
    assert "bound by DMA" in page


@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium is not installed")
def test_html_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    profile = nkisim.profile(vector_heavy, [((128, 512), np.float32)])
    page = tmp_path / "report.html"
    shot = tmp_path / "report.png"
    profile.to_html(page)
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ]
    subprocess.run(
        [
            "chromium",
            *flags,
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1280,800",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000  # a page with a drawn timeline
