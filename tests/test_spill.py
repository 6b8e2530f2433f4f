"""Compiler spills: an automatic SBUF (PSUM) tile that does not fit goes to device memory (SBUF), timed.

The NKI docs (memory hierarchy overview): "If the total size of the live data being used by a
NKI kernel overflows the capacity of any on-chip memory, the Neuron compiler will insert the
necessary spills or refills between that memory and the next-tier memory in the hierarchy."

The kernels below fill trn2's SBUF (its real capacity, from its HwConfig) with a tile
``filler`` of ``capacity - slack`` bytes per partition and a float32[128, 2048] tile ``b``
(8192 bytes per partition), then ask for another float32[128, 2048] tile ``a``. With
``slack`` = 12288, 4096 bytes per partition are free when ``a`` is asked for, so ``a`` spills;
with ``slack`` = 16384 it fits.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import nkisim
import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim import CapacityError
from nkisim.hw import load_target

pytestmark = pytest.mark.filterwarnings(r"ignore:.*\[spill\]:nkisim.CheckWarning")

TARGET = "trn2"
HW = load_target(TARGET)
CAPACITY = HW.sbuf.bytes_per_partition
COLS = 2048  # float32 columns of a and b: 8192 bytes per partition
TILE_BYTES = 128 * COLS * 4  # 1 MiB: one whole read or write of a
SPILLS, FITS = 12288, 16384  # the slack that makes a spill, and that lets it fit
FILE = Path(__file__).name
_LINES = Path(__file__).read_text().splitlines()


def line_of(marker: str) -> int:
    return next(i for i, text in enumerate(_LINES, 1) if text.rstrip().endswith(f"# @{marker}"))


def make_kernel(slack: int, read_cols: int = COLS):
    """out = 2 * x[:, :read_cols] (+ 0 from the filler, so it stays live to the end)."""

    def kernel(x):
        filler = nl.ndarray((128, (CAPACITY - slack) // 4), nl.float32, buffer=nl.sbuf, name="filler")
        b = nl.ndarray((128, COLS), nl.float32, buffer=nl.sbuf, name="b")
        nisa.memset(dst=filler[:, 0:read_cols], value=0.0)
        a = nl.ndarray((128, COLS), nl.float32, buffer=nl.sbuf, name="a")  # @alloc-a
        nisa.dma_copy(dst=a, src=x)  # @write-a
        nisa.tensor_scalar(dst=b[:, 0:read_cols], data=a[:, 0:read_cols], op0=nl.multiply, operand0=2.0)  # @read-a
        nisa.tensor_tensor(dst=b[:, 0:read_cols], data1=b[:, 0:read_cols], data2=filler[:, 0:read_cols], op=nl.add)
        out = nl.ndarray((128, read_cols), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=b[:, 0:read_cols])
        return out

    return kernel


@pytest.fixture(scope="module")
def x() -> np.ndarray:
    return np.random.default_rng(11).standard_normal((128, COLS)).astype(np.float32)


@pytest.fixture(scope="module")
def spilled(x: np.ndarray) -> nkisim.RunResult:
    return nkisim.run(make_kernel(SPILLS), [x], target=TARGET, check="warn")


@pytest.fixture(scope="module")
def fitting(x: np.ndarray) -> nkisim.RunResult:
    return nkisim.run(make_kernel(FITS), [x], target=TARGET, check="warn")


def records(result: nkisim.RunResult, opcode: str) -> list:
    return [r for r in result.profile.instructions if r.opcode == opcode]


def test_the_spilled_tile_holds_the_values_a_tile_in_sbuf_would(spilled: nkisim.RunResult, x: np.ndarray) -> None:
    np.testing.assert_array_equal(spilled.outputs, 2 * x)


def test_the_spill_is_reported_once_with_the_tile_its_line_its_bytes_and_the_free_sbuf(
    spilled: nkisim.RunResult,
) -> None:
    found = [d for d in spilled.profile.diagnostics if d.check == "spill"]
    assert len(found) == 1
    finding = found[0]
    assert finding.severity == "warning"
    assert finding.loc.line == line_of("alloc-a")
    # filler (capacity - 12288) + b (8192) leave 4096 of the capacity free; a needs 8192
    assert re.match(
        rf"{re.escape(FILE)}:{line_of('alloc-a')}: SBUF tile 'a' float32\[128, 2048\] needs 8192 bytes per "
        rf"partition but 4096 of {CAPACITY} are free, even with tiles freed after their last use; it is spilled "
        r"to device memory",
        finding.message,
    )


def test_spill_byte_totals_are_the_bytes_written_to_and_read_from_the_spilled_tile(
    spilled: nkisim.RunResult,
) -> None:
    # a is written once (dma_copy, the whole tile) and read once (tensor_scalar, the whole tile)
    profile = spilled.profile
    assert profile.spill_save_bytes == TILE_BYTES
    assert profile.spill_reload_bytes == TILE_BYTES
    assert f"spill_save_bytes {TILE_BYTES}, spill_reload_bytes {TILE_BYTES}" in profile.summary()


@pytest.mark.parametrize("read_cols", [64, 512])
def test_a_partial_read_reloads_only_the_bytes_it_reads(x: np.ndarray, read_cols: int) -> None:
    result = nkisim.run(make_kernel(SPILLS, read_cols), [x], target=TARGET, check="warn")
    np.testing.assert_array_equal(result.outputs, 2 * x[:, :read_cols])
    assert result.profile.spill_reload_bytes == 128 * read_cols * 4
    assert result.profile.spill_save_bytes == TILE_BYTES


def test_the_spill_transfers_are_dmas_on_the_spill_queue_at_the_lines_that_caused_them(
    spilled: nkisim.RunResult,
) -> None:
    (save,) = records(spilled, "spill_save")
    (reload,) = records(spilled, "spill_reload")
    assert save.engine == reload.engine == "DMA spill"
    assert save.source == f"{FILE}:{line_of('write-a')}"
    assert reload.source == f"{FILE}:{line_of('read-a')}"
    assert save.bytes == reload.bytes == TILE_BYTES


def test_the_spilled_read_waits_for_a_save_and_a_refill_timed_by_the_dma_constants(
    spilled: nkisim.RunResult, fitting: nkisim.RunResult
) -> None:
    # Each transfer: the fixed DMA latency, then 1 MiB over all 16 engines (128 partitions, 8 per
    # engine) at 23 B/ns each = 368 B/ns, capped by trn2's HBM at 362.5 B/ns; 8192 contiguous
    # bytes per partition reach the full rate (payload curve: 1.0 from 4096 bytes).
    dma, sync = HW.dma, HW.sync.semaphore_latency_ns
    assert (dma.fixed_latency_ns, dma.bytes_per_ns_per_engine, dma.engines) == (1300.0, 23.0, 16)
    assert HW.hbm.bandwidth_bytes_per_ns == 362.5 and dma.payload_efficiency[-1] == (4096, 1.0)
    transfer = 1300.0 + TILE_BYTES / 362.5
    copy = next(r for r in spilled.profile.instructions if r.opcode == "dma_copy")
    (save,) = records(spilled, "spill_save")
    (reload,) = records(spilled, "spill_reload")
    (read,) = records(spilled, "tensor_scalar")
    assert save.start_ns == pytest.approx(copy.end_ns + sync)  # after the write, through a semaphore
    assert save.duration_ns == pytest.approx(transfer)
    assert reload.start_ns == pytest.approx(save.end_ns)  # the same queue: in order, no semaphore
    assert reload.duration_ns == pytest.approx(transfer)
    assert read.start_ns == pytest.approx(reload.end_ns + sync)
    # the same kernel with room for a: the read starts a semaphore after the copy
    (fit_read,) = records(fitting, "tensor_scalar")
    fit_copy = next(r for r in fitting.profile.instructions if r.opcode == "dma_copy")
    assert fit_read.start_ns == pytest.approx(fit_copy.end_ns + sync)
    assert copy.source == fit_copy.source == f"{FILE}:{line_of('write-a')}"
    assert copy.end_ns == pytest.approx(fit_copy.end_ns)
    assert read.start_ns - fit_read.start_ns == pytest.approx(2 * transfer + sync)
    assert spilled.profile.total_ns > fitting.profile.total_ns


def test_a_kernel_that_fits_has_no_spill(fitting: nkisim.RunResult, x: np.ndarray) -> None:
    np.testing.assert_array_equal(fitting.outputs, 2 * x)
    profile = fitting.profile
    assert profile.spill_save_bytes == profile.spill_reload_bytes == 0
    assert "DMA spill" not in profile.timeline.tracks
    assert not [d for d in profile.diagnostics if d.check == "spill"]
    assert "spill" not in profile.summary()


def test_a_kernel_that_must_fit_still_raises(x: np.ndarray) -> None:
    kernel = nki.jit(make_kernel(SPILLS), spill=False)
    with pytest.raises(CapacityError) as info:
        nkisim.run(kernel, [x], target=TARGET)
    first = str(info.value).splitlines()[0]
    assert first.startswith(f"{FILE}:{line_of('alloc-a')}: SBUF is full: cannot allocate 8192 bytes per partition")
    assert f"{CAPACITY - 4096} of {CAPACITY} bytes per partition in use, 4096 free;" in first
    assert "unless the kernel forbids it (nki.jit(spill=False)); tiles placed with address= never spill" in first


def test_an_explicitly_placed_tile_that_does_not_fit_still_raises(x: np.ndarray) -> None:
    def kernel(x):
        nl.ndarray((128, COLS), nl.float32, buffer=nl.sbuf, address=(0, CAPACITY - 4096))  # @placed

    with pytest.raises(CapacityError) as info:
        nkisim.run(kernel, [x], target=TARGET)
    assert str(info.value) == (
        f"{FILE}:{line_of('placed')}: nl.ndarray: 8192 bytes per partition from byte {CAPACITY - 4096} exceed the "
        f"{CAPACITY} bytes of a SBUF partition"
    )


PSUM_TILE_BYTES = 128 * 512 * 4  # a float32[128, 512] tile: one 2 KiB bank of each partition


def psum_kernel(count: int):
    """``count`` PSUM tiles, tile k set to k and all kept live, then summed into SBUF: 0 + 1 + ... + count - 1."""

    def kernel():
        tiles = []
        for k in range(count):
            tile = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)  # @psum
            nisa.memset(dst=tile, value=float(k))  # @psum-write
            tiles.append(tile)
        acc = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        for tile in tiles:
            nisa.tensor_tensor(dst=acc, data1=acc, data2=tile, op=nl.add)  # @psum-read
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=acc)
        return out

    return kernel


def test_a_psum_tile_that_does_not_fit_spills_to_sbuf() -> None:
    # trn2 PSUM: 16 KiB per partition, 8 banks of 2 KiB; the ninth live bank-sized tile spills.
    assert HW.psum.bytes_per_partition == 8 * 2048
    result = nkisim.run(psum_kernel(9), [], target=TARGET)
    np.testing.assert_array_equal(result.outputs, np.full((128, 512), sum(range(9)), np.float32))
    (save,) = records(result, "spill_save")
    (reload,) = records(result, "spill_reload")
    assert save.source == f"{FILE}:{line_of('psum-write')}"
    assert reload.source == f"{FILE}:{line_of('psum-read')}"
    assert result.profile.spill_save_bytes == result.profile.spill_reload_bytes == PSUM_TILE_BYTES
    # SBUF <-> PSUM: no HBM cap; 16 engines at 23 B/ns, rows of 2048 contiguous bytes at 0.80 of the rate
    assert HW.dma.payload_efficiency[3] == (2048, 0.80)
    assert save.duration_ns == pytest.approx(1300.0 + PSUM_TILE_BYTES / (16 * 23.0 * 0.80))
    (finding,) = [d for d in result.profile.diagnostics if d.check == "spill"]
    assert "PSUM tile" in finding.message and "spilled to SBUF" in finding.message
    assert nkisim.run(psum_kernel(8), [], target=TARGET).profile.spill_save_bytes == 0


def test_psum_does_not_spill_when_the_kernel_forbids_it() -> None:
    kernel = nki.jit(psum_kernel(9), spill=False)
    pattern = rf"^{re.escape(FILE)}:{line_of('psum')}: PSUM is full: .* spilled to SBUF, as the compiler does, unless"
    with pytest.raises(CapacityError, match=pattern):
        nkisim.run(kernel, [], target=TARGET)


def test_a_compiled_spilling_kernel_replays_as_it_runs(x: np.ndarray, spilled: nkisim.RunResult) -> None:
    program = nkisim.compile(make_kernel(SPILLS), [x], target=TARGET, check="warn")
    y = np.random.default_rng(12).standard_normal((128, COLS)).astype(np.float32)
    replayed = program([y])
    np.testing.assert_array_equal(replayed.outputs, 2 * y)
    assert list(replayed.profile.timeline.end_ns) == list(spilled.profile.timeline.end_ns)
    assert replayed.profile.spill_save_bytes == replayed.profile.spill_reload_bytes == TILE_BYTES
    assert [d.check for d in replayed.profile.diagnostics] == ["spill"]


def test_a_host_memory_error_in_the_liveness_retry_is_raised_not_the_first_runs_capacity_error():
    """The retry records tile lifetimes; if the host runs out of memory there, that is what stopped the run; a
    collision of placed tiles there leaves the first run's error; an error of the kernel's own is raised."""
    from nkisim.errors import CapacityError
    from nkisim.frontend.jit import _with_compiler_liveness

    def recording_run_runs_out_of_host_memory(plans):
        raise MemoryError("Unable to allocate 4.00 GiB")

    def recording_run_places_tiles_over_each_other(plans):
        raise CapacityError("SBUF tile placed at (0, 0) overlaps a live tile")

    def recording_run_reaches_a_kernel_error(plans):
        raise ValueError("the kernel's own error")

    eager = CapacityError("SBUF is full: cannot allocate 65536 bytes per partition. More")
    with pytest.raises(MemoryError, match=r"4\.00 GiB") as host:
        _with_compiler_liveness(recording_run_runs_out_of_host_memory, 1, eager)
    assert not getattr(host.value, "__notes__", None)  # the host's memory, not an error of the kernel's own
    with pytest.raises(CapacityError, match="SBUF is full"):  # recording has room for automatic tiles only
        _with_compiler_liveness(recording_run_places_tiles_over_each_other, 1, eager)
    with pytest.raises(ValueError, match="the kernel's own error") as info:  # what NKI's whole trace would report
        _with_compiler_liveness(recording_run_reaches_a_kernel_error, 1, eager)
    (note,) = info.value.__notes__
    assert "a first run had stopped earlier at " in note
    assert note.endswith("SBUF is full: cannot allocate 65536 bytes per partition")  # its first sentence
