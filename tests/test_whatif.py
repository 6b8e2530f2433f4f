"""What-if generations: a TOML file with ``base = "trn2"`` and only what it changes is a target.

``tests/data/trn2_double_sbuf.toml`` is trn2 with twice the SBUF bytes per partition. A
kernel whose operands stay resident in SBUF does not fit trn2 and runs on the what-if
machine, with the same numbers as numpy and a complete profile. HBM tensors beyond the
target's HBM capacity are refused before any byte is allocated.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest

import nkisim
import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim import CapacityError, TargetError
from nkisim.hw import HwConfig, load_target

DATA = Path(__file__).parent / "data"
WHATIF = DATA / "trn2_double_sbuf.toml"
GENERATIONS = Path(nkisim.__file__).parent / "hw" / "generations"

#: K x M @ K x N in float32: the two [128, N] moving tiles stay resident, 2 x 128 KiB per partition.
K, M, N = 256, 128, 32768
N_BLOCK = 512


def resident_matmul(lhs_t, rhs):
    """result = lhs_t.T @ rhs, every K-tile of rhs loaded once and kept in SBUF until the end."""
    k_tiles = lhs_t.shape[0] // 128
    stationary, moving = [], []
    for k in range(k_tiles):
        rows = slice(k * 128, (k + 1) * 128)
        s_tile = nl.ndarray((128, M), dtype=lhs_t.dtype, buffer=nl.sbuf)
        m_tile = nl.ndarray((128, N), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=s_tile, src=lhs_t[rows, :])
        nisa.dma_copy(dst=m_tile, src=rhs[rows, :])
        stationary.append(s_tile)
        moving.append(m_tile)
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for n in range(N // N_BLOCK):
        cols = slice(n * N_BLOCK, (n + 1) * N_BLOCK)
        acc = nl.ndarray((M, N_BLOCK), dtype=nl.float32, buffer=nl.psum)
        for k in range(k_tiles):
            nisa.nc_matmul(dst=acc, stationary=stationary[k], moving=moving[k][:, cols])
        out = nl.ndarray((M, N_BLOCK), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out, src=acc)
        nisa.dma_copy(dst=result[:, cols], src=out)
    return result


@pytest.fixture(scope="module")
def operands() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return rng.standard_normal((K, M), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)


@pytest.fixture(scope="module")
def whatif_run(operands: tuple[np.ndarray, np.ndarray]) -> nkisim.RunResult:
    return nkisim.run(resident_matmul, list(operands), target=str(WHATIF))


def test_the_whatif_file_is_trn2_with_twice_the_sbuf() -> None:
    hw, trn2 = load_target(WHATIF), load_target("trn2")
    assert hw.name == "trn2-2xsbuf"
    assert hw.aliases == ()  # the base's aliases are not inherited
    assert hw.sbuf.bytes_per_partition == 2 * trn2.sbuf.bytes_per_partition
    same = {"name", "aliases", "sbuf"}
    assert hw.model_dump(exclude=same) == trn2.model_dump(exclude=same)
    assert hw.sbuf.model_dump(exclude={"bytes_per_partition"}) == trn2.sbuf.model_dump(exclude={"bytes_per_partition"})
    assert HwConfig.from_toml(WHATIF) == hw
    assert load_target(str(WHATIF)) == hw  # a str ending in .toml is a path too


def test_the_kernel_does_not_fit_trn2(operands: tuple[np.ndarray, np.ndarray]) -> None:
    kernel = nki.jit(resident_matmul, spill=False)  # as written, without the compiler's spills
    with pytest.raises(CapacityError, match=r"SBUF is full: cannot allocate 131072 bytes per partition"):
        nkisim.run(kernel, list(operands), target="trn2")


def test_the_whatif_machine_computes_what_numpy_does(
    whatif_run: nkisim.RunResult, operands: tuple[np.ndarray, np.ndarray]
) -> None:
    lhs_t, rhs = operands
    assert whatif_run.target == "trn2-2xsbuf"
    expected = lhs_t.astype(np.float64).T @ rhs.astype(np.float64)
    np.testing.assert_allclose(whatif_run.outputs, expected, rtol=1e-4, atol=1e-4)


def test_the_whatif_profile_is_complete(whatif_run: nkisim.RunResult, tmp_path: Path) -> None:
    profile = whatif_run.profile
    assert profile.target == "trn2-2xsbuf"
    assert profile.total_ns > 0
    summary = profile.summary()
    assert "trn2-2xsbuf" in summary
    table = profile.table()
    assert "Tensor" in table and "test_whatif.py:" in table  # engines, then the kernel's lines

    # MFU by hand from the TOML: 2 flops per PE per Tensor Engine cycle.
    tensor = tomllib.loads((GENERATIONS / "trn2.toml").read_text())["tensor"]
    peak_flops_per_ns = 2 * tensor["rows"] * tensor["columns"] * tensor["clock_ghz"]
    flops = 2.0 * K * M * N
    mfu = profile.mfu
    assert isinstance(mfu, float)
    assert 0.0 < mfu <= 1.0
    assert mfu == pytest.approx(flops / (peak_flops_per_ns * profile.total_ns), rel=1e-12)

    trace = tmp_path / "whatif.json"
    profile.to_perfetto(trace)
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert any(e.get("name") == "nc_matmul" for e in events)
    assert any("trn2-2xsbuf" in json.dumps(e) for e in events if e.get("ph") == "M")

    page = tmp_path / "whatif.html"
    profile.to_html(page)
    html = page.read_text()
    assert html.startswith("<!") or "<html" in html[:200].lower()
    assert "trn2-2xsbuf" in html


def test_the_whatif_target_is_accepted_by_platform_target(operands: tuple[np.ndarray, np.ndarray]) -> None:
    kernel = nki.jit(resident_matmul, platform_target=str(WHATIF), spill=False)
    profile = nkisim.profile(kernel, [((K, M), np.float32), ((K, N), np.float32)])
    assert profile.target == "trn2-2xsbuf"
    with pytest.raises(CapacityError):
        nkisim.profile(kernel, [((K, M), np.float32), ((K, N), np.float32)], target="trn2")


# -- generation files that are not right ------------------------------------------------


def _write(tmp_path: Path, text: str, name: str = "gen.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_base_file_may_be_another_file_and_overrides_deeply(tmp_path: Path) -> None:
    first = _write(tmp_path, 'base = "trn3"\nname = "a"\n[capabilities]\nmx_formats = false\n', "a.toml")
    second = _write(tmp_path, f'base = "{first.name}"\nname = "b"\n[vector]\nclock_ghz = 2.0\n', "b.toml")
    hw = load_target(second)  # os.PathLike
    assert (hw.name, hw.vector.clock_ghz, hw.vector.min_ii_cycles) == ("b", 2.0, 64)
    assert hw.capabilities.mx_formats is False
    assert hw.capabilities.vector_exponential is True  # trn3's, through a.toml


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('base = "trn9"\nname = "x"\n', r"unknown base 'trn9'"),
        ('base = "trn2"\n', r"no name of its own"),
        ('base = "gen.toml"\nname = "x"\n', r"is its own base"),
        ('base = "trn2"\nname = "x"\n[capabilities]\nwarp_drive = true\n', r"warp_drive"),
        ('base = "trn2"\nname = "x"\n[capabilities]\nhardware_dge = "yes"\n', r"hardware_dge"),
        ("name = 'x'\nnot toml at all ===\n", r"not valid TOML"),
        (
            'base = "trn2"\nname = "x"\n[scalar]\ntable_switch_cycles = 128\n',
            r"\[scalar\] table_switch_cycles is no longer read; give table_load_ns",
        ),
    ],
)
def test_bad_generation_files_are_named(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ValueError, match=message):
        load_target(path)


def test_a_full_file_without_capabilities_is_refused(tmp_path: Path) -> None:
    text = (GENERATIONS / "trn2.toml").read_text().split("\n[capabilities]")[0]
    path = _write(tmp_path, text.replace('name = "trn2"', 'name = "old-style"'))
    with pytest.raises(ValueError, match=r"capabilities"):
        load_target(path)


def test_a_missing_file_is_a_target_error_for_run() -> None:
    with pytest.raises(TargetError, match=r"does not exist"):
        nkisim.run(resident_matmul, [], target="no/such/generation.toml")


# -- HBM capacity ---------------------------------------------------------------------


def copy_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)
    return out


def test_hbm_beyond_the_targets_capacity_is_refused_before_allocating() -> None:
    hw = load_target("trn2")
    rows, cols = 1 << 20, 4096  # 16 GiB of float32, more than trn2's 12 GiB per NeuronCore
    wanted = rows * cols * 4
    assert wanted > hw.hbm.capacity_bytes
    message = (
        rf"HBM is full: cannot allocate {wanted} bytes for x float32\[{rows}, {cols}\]; "
        rf"{hw.hbm.capacity_bytes} of the {hw.hbm.capacity_bytes} bytes of trn2's HBM per NeuronCore are free"
    )
    with pytest.raises(CapacityError, match=message):
        nkisim.profile(copy_kernel, [((rows, cols), np.float32)], target="trn2")


def test_hbm_capacity_counts_every_hbm_tensor() -> None:
    """A tiny-HBM what-if machine: the input fits, the kernel's output does not."""
    small = load_target("trn1").model_copy(
        update={"hbm": load_target("trn1").hbm.model_copy(update={"capacity_bytes": 6000})}
    )
    x = np.ones((32, 32), np.float32)  # 4096 bytes
    message = r"cannot allocate 4096 bytes for \S+ float32\[32, 32\]; 1904 of the 6000 bytes of trn1's HBM"
    with pytest.raises(CapacityError, match=message) as caught:
        nkisim.run(copy_kernel, [x], target=small)
    assert re.search(r"test_whatif\.py:\d+", str(caught.value)), "the error names the kernel line"
    np.testing.assert_array_equal(nkisim.run(copy_kernel, [x[:8]], target=small).outputs, x[:8])
