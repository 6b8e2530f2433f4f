"""nkisim.profile on shapes alone gives run()'s timeline; the profile command line prints the report."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import nkisim
from nkisim.examples.attention import causal_attention
from nkisim.examples.layernorm import layernorm
from nkisim.examples.matmul import matmul_optimized, matmul_tiled


def _timeline(profile: nkisim.Profile) -> list[tuple[str, str, float, float]]:
    return [(r.opcode, r.engine, r.start_ns, r.end_ns) for r in profile.instructions]


@pytest.mark.parametrize(
    ("kernel", "arrays"),
    [
        (matmul_tiled, [np.ones((256, 128), ml_dtypes.bfloat16), np.ones((256, 1024), ml_dtypes.bfloat16)]),
        (matmul_optimized, [np.ones((256, 256), np.float32), np.ones((256, 1024), np.float32)]),
        (layernorm, [np.ones((128, 600), np.float32), np.ones(600, np.float32), np.zeros(600, np.float32)]),
        (
            causal_attention,
            [np.ones((64, 256), np.float32), np.ones((64, 256), np.float32), np.ones((256, 64), np.float32)],
        ),
    ],
    ids=["matmul_tiled", "matmul_optimized", "layernorm", "attention"],
)
def test_shape_only_profile_equals_the_timeline_of_a_run(kernel, arrays) -> None:
    kwargs = {"blocks_m": 2, "blocks_n": 2, "blocks_k": 2} if kernel is matmul_optimized else {}
    names = list(kernel.func.__code__.co_varnames[: len(arrays)])
    ran = nkisim.run(kernel, {**dict(zip(names, arrays)), **kwargs}).profile
    specs = {name: (a.shape, a.dtype) for name, a in zip(names, arrays)}
    shaped = nkisim.profile(kernel, {**specs, **kwargs})
    assert _timeline(shaped) == _timeline(ran)
    assert shaped.total_ns == ran.total_ns


def test_profile_with_arrays_computes_nothing_it_does_not_need() -> None:
    a = np.ones((256, 128), np.float32)
    b = np.ones((256, 512), np.float32)
    assert _timeline(nkisim.profile(matmul_tiled, [a, b])) == _timeline(nkisim.run(matmul_tiled, [a, b]).profile)


KERNEL_FILE = textwrap.dedent(
    """
    import nki
    import nki.language as nl
    import nki.isa as nisa


    @nki.jit
    def scale(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(x.shape[0] // 128):
            tile = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=x[i * 128 : (i + 1) * 128])
            nisa.tensor_scalar(dst=tile, data=tile, op0=nl.multiply, operand0=2.0)
            nisa.dma_copy(dst=out[i * 128 : (i + 1) * 128], src=tile)
        return out
    """
)


def _line_of(text: str) -> int:
    return next(i for i, line in enumerate(KERNEL_FILE.splitlines(), 1) if text in line)


def test_profile_command_prints_the_report_and_writes_html(tmp_path: Path) -> None:
    kernel = tmp_path / "scale_kernel.py"
    kernel.write_text(KERNEL_FILE)
    html = tmp_path / "report.html"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nkisim",
            "profile",
            f"{kernel}:scale",
            "--shapes",
            "512x2048:bfloat16",
            "--target",
            "trn2",
            "--html",
            str(html),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "scale on target trn2" in out and "12 instructions" in out
    assert "bound by" in out and "MFU" in out
    assert f"scale_kernel.py:{_line_of('nisa.dma_copy(dst=tile')}" in out  # the load's line, with its totals
    assert html.read_text().startswith("<!DOCTYPE html>")
    expected = nkisim.profile(_load(kernel), [((512, 2048), ml_dtypes.bfloat16)], target="trn2")
    assert f"{expected.total_ns / 1000:.3f} us" in out


def _load(path: Path) -> nkisim.Kernel:
    nkisim.install_nki_alias()
    try:
        namespace: dict[str, object] = {}
        exec(compile(path.read_text(), str(path), "exec"), namespace)
    finally:
        nkisim.uninstall_nki_alias()
    kernel = namespace["scale"]
    assert isinstance(kernel, nkisim.Kernel)
    return kernel


def test_profile_command_reports_a_bad_kernel_line(tmp_path: Path) -> None:
    kernel = tmp_path / "bad_kernel.py"
    kernel.write_text(KERNEL_FILE.replace("(128, x.shape[1])", "(256, x.shape[1])"))
    done = subprocess.run(
        [sys.executable, "-m", "nkisim", "profile", f"{kernel}:scale", "--shapes", "512x2048:float32"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1
    assert f"bad_kernel.py:{_line_of('tile = nl.ndarray')}: nl.ndarray: partition dim 256 exceeds 128" in done.stderr
    assert "Traceback" not in done.stderr


def test_collect_profiles_sees_only_its_own_threads_runs() -> None:
    """A run on another thread while the block is open (a DataLoader worker, a pytest-xdist neighbour) stays out."""
    import threading

    from nkisim.examples.tensor_add import nki_tensor_add

    a = np.ones((128, 512), np.float32)
    other: list[nkisim.Profile] = []
    with nkisim.collect_profiles() as mine:
        elsewhere = threading.Thread(
            target=lambda: other.append(
                nkisim.run(
                    layernorm, [np.ones((128, 600), np.float32), np.ones(600, np.float32), np.zeros(600, np.float32)]
                ).profile
            )
        )
        elsewhere.start()
        elsewhere.join()
        nkisim.run(nki_tensor_add, [a, a])
        with nkisim.collect_profiles() as inner:
            nkisim.run(nki_tensor_add, [a, a])
    assert len(other) == 1
    assert [p.kernel for p in mine] == ["nki_tensor_add", "nki_tensor_add"]
    assert [p.kernel for p in inner] == ["nki_tensor_add"]
