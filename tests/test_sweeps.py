"""nkisim.sweep: points, records, failures, executors (process pool, Dask), resuming, CSV, chart, CLI.

The kernels here issue a known number of instructions, so counts are checked against
hand-computed values; simulated times are checked against single nkisim.profile runs of
the same point, and across executors bit for bit.
"""

from __future__ import annotations

import concurrent.futures
import csv
import multiprocessing
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import nkisim
import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.examples.matmul import matmul_optimized
from nkisim.sweeps import expand

BF16 = ml_dtypes.bfloat16


@nki.jit
def copies(x, repeats=1, width=64):
    """Loads ``x`` [128, width], copies it ``repeats`` times, stores it: repeats + 2 instructions."""
    tile = nl.ndarray((128, width), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x[:, 0:width])
    for _ in range(repeats):
        other = nl.ndarray((128, width), x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=other, src=tile)
        tile = other
    out = nl.ndarray((128, width), x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


def make_scaled(factor):
    """A factory: a kernel multiplying by ``factor`` (a closure, so it must travel by value)."""

    @nki.jit
    def scaled(x):
        tile = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        nisa.tensor_scalar(dst=tile, data=tile, op0=nl.multiply, operand0=float(factor))
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tile)
        return out

    return scaled


@nki.jit
def sized(x, free=64):
    """Needs a [128, free] fp32 SBUF tile: too big for SBUF when ``free`` is huge."""
    tile = nl.ndarray((128, free), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=tile, value=1.0)
    out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile[:, 0:1])
    return out


def dies_at_three(n):
    if n == 3:
        os._exit(13)  # a worker killed mid-point (as the OOM killer would)
    return copies


SPEC = [((128, 512), np.float32)]


def fingerprint(table):
    return [(r.params, r.target, r.total_ns, r.instruction_count, r.error) for r in table]


# -- points ---------------------------------------------------------------------------------


def test_points_are_the_cartesian_product_targets_outermost():
    points = expand({"a": [1, 2], "b": ["x", "y", "z"]}, ["trn1", "trn2"])
    assert len(points) == 12
    assert [p.index for p in points] == list(range(12))
    assert [(p.target, p.params["a"], p.params["b"]) for p in points[:4]] == [
        ("trn1", 1, "x"),
        ("trn1", 1, "y"),
        ("trn1", 1, "z"),
        ("trn1", 2, "x"),
    ]
    assert points[6].target == "trn2" and points[6].params == {"a": 1, "b": "x"}


def test_points_may_be_listed_and_targets_default_to_the_kernels():
    points = expand([{"a": 1}, {"a": 5, "b": 2}], None)
    assert [(p.params, p.target) for p in points] == [({"a": 1}, None), ({"a": 5, "b": 2}, None)]
    assert [p.params for p in expand(None, "trn3")] == [{}]


@pytest.mark.parametrize(
    ("params", "error", "message"),
    [
        ({"a": []}, ValueError, r"params\['a'\] is empty"),
        ({"a": 3}, TypeError, r"params\['a'\] must be a list of values, got 3"),
        ({"a": "abc"}, TypeError, r"must be a list of values, got 'abc'"),
        ([{"a": 1}, 7], TypeError, r"params\[1\] must be a mapping"),
    ],
)
def test_malformed_params_are_named(params, error, message):
    with pytest.raises(error, match=message):
        expand(params, None)


def test_a_sweep_needs_a_callable_and_a_real_executor():
    with pytest.raises(TypeError, match="expected a kernel or a factory function, got int"):
        nkisim.sweep(42, SPEC)
    with pytest.raises(TypeError, match=r"executor must be None, a concurrent\.futures\.Executor or a Dask Client"):
        nkisim.sweep(copies, SPEC, executor="pool")


# -- records --------------------------------------------------------------------------------


def test_each_record_is_the_single_run_of_its_point():
    table = nkisim.sweep(copies, SPEC, params={"repeats": [1, 3], "width": [64, 256]}, targets=["trn1", "trn2"])
    assert len(table) == 8 and not table.failures
    for record in table:
        assert record.instruction_count == record.params["repeats"] + 2  # hand count: 2 DMAs and the copies
        alone = nkisim.profile(copies, {"x": SPEC[0], **record.params}, target=record.target)
        assert record.total_ns == alone.total_ns
        assert record.engine_busy_ns == alone.engine_busy_ns
        assert record.target == alone.target


def test_a_factory_is_called_with_each_points_parameters():
    x = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    table = nkisim.sweep(make_scaled, [x], params={"factor": [0.5, 2.0, 3.0]})
    assert [r.params["factor"] for r in table] == [0.5, 2.0, 3.0]
    assert all(r.ok and r.instruction_count == 3 for r in table)


def test_a_factory_returning_no_kernel_is_a_recorded_error():
    table = nkisim.sweep(lambda repeats: copies if repeats else 42, SPEC, params={"repeats": [0, 1]})
    assert table[0].error == "TypeError: the factory returned int, not a kernel"
    assert table[1].ok and table[1].instruction_count == 3


def test_failed_points_are_recorded_and_the_sweep_goes_on():
    table = nkisim.sweep(sized, SPEC, params={"free": [64, 10**6, 128]}, targets=["trn1"])
    assert [r.ok for r in table] == [True, False, True]
    failed = table[1]
    assert failed.total_ns is None and failed.instruction_count is None
    assert failed.error.startswith("test_sweeps.py:")  # the kernel's own line
    assert "SBUF" in failed.error and "\n" not in failed.error
    assert table.best().params["free"] in (64, 128)
    assert len(table.failures) == 1


def test_an_assertion_in_the_kernel_is_a_recorded_error():
    table = nkisim.sweep(
        matmul_optimized,
        [((256, 256), BF16), ((256, 512), BF16)],
        params={"blocks_m": [2, 4], "blocks_n": [1], "blocks_k": [2]},  # 256 rows: two 128-row blocks, not four
    )
    assert table[0].ok
    assert table[1].error == "AssertionError: shape must tile into blocks"


def test_best_is_the_fastest_ok_point_and_names_when_none_ran():
    table = nkisim.sweep(copies, SPEC, params={"repeats": [4, 1, 2]}, targets=["trn1", "trn2"])
    best = table.best()
    assert best.total_ns == min(r.total_ns for r in table)
    assert table.best("trn1").target == "trn1" and table.best("trn1").params == {"repeats": 1}
    broken = nkisim.sweep(sized, SPEC, params={"free": [10**6]}, targets=["trn1"])
    with pytest.raises(ValueError, match=r"no point of the sweep ran without error \(1 failed\)"):
        broken.best()


def test_csv_has_one_row_per_point_with_the_errors(tmp_path):
    table = nkisim.sweep(sized, SPEC, params={"free": [64, 10**6]}, targets=["trn1", "trn2"])
    path = tmp_path / "sweep.csv"
    table.to_csv(path)
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 4
    assert [r["free"] for r in rows] == ["64", "1000000", "64", "1000000"]
    assert [r["target"] for r in rows] == ["trn1", "trn1", "trn2", "trn2"]
    assert float(rows[0]["total_ns"]) == table[0].total_ns and rows[0]["error"] == ""
    assert rows[1]["total_ns"] == "" and "SBUF" in rows[1]["error"]
    assert "busy_ns[DMA]" in rows[0]


def test_to_pandas_gives_the_same_rows():
    pd = pytest.importorskip("pandas")
    table = nkisim.sweep(copies, SPEC, params={"repeats": [1, 2]})
    frame = table.to_pandas()
    assert isinstance(frame, pd.DataFrame)
    assert list(frame["repeats"]) == [1, 2] and list(frame["instruction_count"]) == [3, 4]


# -- resuming -------------------------------------------------------------------------------


def test_a_results_file_resumes_without_rerunning_done_points(tmp_path):
    results = tmp_path / "results.jsonl"
    calls = []

    def factory(repeats):
        calls.append(repeats)
        return _copies_with(repeats)

    first = nkisim.sweep(factory, SPEC, params={"repeats": [1, 2]}, results=results)
    assert calls == [1, 2]
    calls.clear()
    second = nkisim.sweep(factory, SPEC, params={"repeats": [1, 2, 3]}, results=results)
    assert calls == [3]  # only the new point ran
    assert fingerprint(second[:2]) == fingerprint(first)
    assert len(results.read_text().splitlines()) == 3


def _copies_with(repeats):
    @nki.jit
    def kernel(x):
        return copies.func(x, repeats=repeats)

    return kernel


def test_a_damaged_results_line_is_run_again_with_a_warning(tmp_path):
    results = tmp_path / "results.jsonl"
    nkisim.sweep(copies, SPEC, params={"repeats": [1, 2]}, results=results)
    lines = results.read_text().splitlines()
    results.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2] + "\n")  # cut short by a crash
    with pytest.warns(UserWarning, match=r"results.jsonl:2: not a sweep record; that point runs again"):
        table = nkisim.sweep(copies, SPEC, params={"repeats": [1, 2]}, results=results)
    assert all(r.ok for r in table) and [r.instruction_count for r in table] == [3, 4]


# -- executors ------------------------------------------------------------------------------


def _pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    """A process pool that does not fork this process (other tests may have started JAX's threads)."""
    return concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("forkserver"))


def test_a_process_pool_gives_the_same_records_bit_for_bit():
    params = {"repeats": [1, 2, 5], "width": [64, 512]}
    here = nkisim.sweep(copies, SPEC, params=params, targets=["trn1", "trn2"])
    with _pool(2) as pool:
        there = nkisim.sweep(copies, SPEC, params=params, targets=["trn1", "trn2"], executor=pool)
        closures = nkisim.sweep(make_scaled, [np.ones((128, 4), np.float32)], params={"factor": [2, 3]}, executor=pool)
    assert fingerprint(there) == fingerprint(here)
    assert [r.ok for r in closures] == [True, True]


def test_a_worker_that_dies_is_reported_and_the_sweep_finishes():
    with _pool(1) as pool:
        table = nkisim.sweep(dies_at_three, SPEC, params={"n": [1, 3]}, executor=pool)
    assert len(table) == 2
    assert table[1].error.startswith("worker process died: BrokenProcessPool")


def test_a_dask_cluster_gives_the_same_records_bit_for_bit():
    distributed = pytest.importorskip("distributed", reason="Dask distributed is not installed (nkisim[cluster])")
    params = {"repeats": [1, 3], "width": [64, 256]}
    here = nkisim.sweep(copies, SPEC, params=params, targets=["trn1", "trn2"])
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    with cluster, distributed.Client(cluster) as client:
        there = nkisim.sweep(copies, SPEC, params=params, targets=["trn1", "trn2"], executor=client)
        failed = nkisim.sweep(sized, SPEC, params={"free": [10**6]}, targets=["trn1"], executor=client)
    assert fingerprint(there) == fingerprint(here)
    assert "SBUF" in failed[0].error


def _local_cluster(distributed):
    return distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)


def test_the_example_sweep_is_bit_identical_on_a_process_pool_and_a_dask_cluster():
    """The tuning example's 120-point grid (60 block settings x trn1, trn2) on a 512 x 512 x 1024 problem:
    18 settings tile it on each target, the others fail the kernel's assert; every executor gives the
    same records, simulated times bit for bit and error messages word for word."""
    distributed = pytest.importorskip("distributed", reason="Dask distributed is not installed (nkisim[cluster])")
    from nkisim.examples import tune_matmul

    small = {"lhsT": ((512, 512), BF16), "rhs": ((512, 1024), BF16)}
    here = tune_matmul.tune(progress=False, shapes=small)
    assert len(here) == 120 and len(here.failures) == 120 - 2 * 18
    assert {r.error for r in here.failures} == {"AssertionError: shape must tile into blocks"}
    with _pool(2) as pool:
        pooled = tune_matmul.tune(pool, progress=False, shapes=small)
    with _local_cluster(distributed) as cluster, distributed.Client(cluster) as client:
        clustered = tune_matmul.tune(client, progress=False, shapes=small)
    assert fingerprint(pooled) == fingerprint(here)
    assert fingerprint(clustered) == fingerprint(here)


def test_a_dask_worker_that_dies_is_reported_and_the_sweep_finishes():
    distributed = pytest.importorskip("distributed", reason="Dask distributed is not installed (nkisim[cluster])")
    import dask

    # Dask reruns a task whose worker died; with no retries allowed it gives up at once (KilledWorker)
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        _local_cluster(distributed) as cluster,
        distributed.Client(cluster) as client,
    ):
        table = nkisim.sweep(dies_at_three, SPEC, params={"n": [1, 3, 2]}, executor=client)
    assert [r.ok for r in table] == [True, False, True]
    assert table[1].error.startswith("worker process died: KilledWorker:")
    assert table[0].instruction_count == table[2].instruction_count == 3


def test_the_progress_bar_counts_points_and_failures_with_time_left(capsys):
    table = nkisim.sweep(sized, SPEC, params={"free": [64, 10**6, 128]}, targets=["trn1"], progress=True)
    assert len(table.failures) == 1
    bar = capsys.readouterr().err.replace("\r", "\n").splitlines()[-1]
    assert bar.startswith("sweep: 100%") and "3/3" in bar and "failed=1" in bar
    assert "<00:00" in bar  # tqdm's elapsed<remaining


def test_the_cli_in_process_shows_progress_and_writes_the_chart(tmp_path, capsys):
    from nkisim.__main__ import main

    kernel_file = Path(nkisim.__file__).parent / "examples" / "matmul.py"
    out_html, results = tmp_path / "s.html", tmp_path / "s.jsonl"
    argv = ["sweep", f"{kernel_file}:matmul_optimized", "--param", "blocks_m=1,2,4", "--param", "blocks_n=1"]
    argv += ["--param", "blocks_k=1", "--target", "trn1", "--shapes", "256x256:bfloat16", "256x512:bfloat16"]
    argv += ["--plot", str(out_html), "--results", str(results), "--progress"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "3/3" in captured.err and "failed=1" in captured.err  # blocks_m=4 does not tile 256 rows
    assert captured.out.startswith("trn1: best ") and "failed trn1 {'blocks_m': 4" in captured.out
    assert out_html.read_text().count('class="best"') == 3  # one chart per parameter, the best ringed in each
    assert main([*argv[:-1], "--no-progress"]) == 0  # resumed: all three points come from the results file
    assert len(results.read_text().splitlines()) == 3


# -- the chart and the command line ------------------------------------------------------------


def test_plot_draws_one_chart_per_parameter_with_the_best_marked(tmp_path):
    table = nkisim.sweep(sized, SPEC, params={"free": [64, 10**6, 256]}, targets=["trn1", "trn2"])
    path = tmp_path / "sweep.html"
    table.plot(path)
    page = path.read_text()
    assert page.count("<svg") == 1 and page.count('class="best"') == 2
    assert "best trn1:" in page and "best trn2:" in page
    assert "2 point(s) failed and are not drawn" in page
    assert "<script" not in page and "src=" not in page


def _png_rgb(data: bytes) -> np.ndarray:
    """The pixels of an 8-bit RGB or RGBA, non-interlaced PNG as an [h, w, 3] uint8 array (PNG spec, section 9)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks, header = 8, [], b""
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        header = body if kind == b"IHDR" else header
        chunks += [body] if kind == b"IDAT" else []
        pos += 12 + length
    width, height = int.from_bytes(header[0:4], "big"), int.from_bytes(header[4:8], "big")
    assert header[8] == 8 and header[9] in (2, 6) and header[12] == 0, "8-bit RGB(A), not interlaced"
    bpp = 3 if header[9] == 2 else 4
    raw = np.frombuffer(zlib.decompress(b"".join(chunks)), np.uint8).reshape(height, 1 + width * bpp)
    image = np.zeros((height, width * bpp), np.int32)
    previous = np.zeros(width * bpp, np.int32)
    for y in range(height):
        kind, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if kind == 0:
            row = line
        elif kind == 2:  # Up
            row = (line + previous) & 255
        elif kind == 1:  # Sub: each byte adds the reconstructed byte one pixel to its left
            row = (np.cumsum(line.reshape(width, bpp), axis=0) & 255).reshape(-1)
        else:  # Average (3) and Paeth (4) depend on the byte to the left: byte by byte
            row = np.zeros_like(line)
            for i in range(line.size):
                a = int(row[i - bpp]) if i >= bpp else 0
                b, c = int(previous[i]), int(previous[i - bpp]) if i >= bpp else 0
                if kind == 3:
                    row[i] = (line[i] + (a + b) // 2) & 255
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    row[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        image[y], previous = row, row
    return image.reshape(height, width, bpp)[:, :, :3].astype(np.uint8)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium is not installed")
def test_the_chart_renders_in_headless_chromium(tmp_path):
    """The page renders, and the two targets' series appear in their colours (the plot's palette)."""
    table = nkisim.sweep(copies, SPEC, params={"repeats": [1, 2, 4], "width": [64, 128]}, targets=["trn1", "trn2"])
    page, shot = tmp_path / "sweep.html", tmp_path / "sweep.png"
    table.plot(page)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    flags += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    subprocess.run(
        [
            "chromium",
            *flags,
            f"--user-data-dir={tmp_path / 'p'}",
            f"--screenshot={shot}",
            "--window-size=700,900",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    png = shot.read_bytes()
    assert len(png) > 10_000  # a page with drawn charts, as for the profile report
    pixels = _png_rgb(png).astype(np.int32)
    for colour in ((0x4E, 0x79, 0xA7), (0xE1, 0x57, 0x59)):  # trn1 and trn2 series
        near = np.abs(pixels - np.array(colour)).sum(axis=2) < 40
        assert near.sum() > 100, colour
    assert (pixels.sum(axis=2) < 200).sum() > 500  # dark axes and labels


def test_cli_sweeps_a_kernel_file_and_writes_csv_and_chart(tmp_path):
    kernel_file = Path(nkisim.__file__).parent / "examples" / "matmul.py"
    out_csv, out_html = tmp_path / "s.csv", tmp_path / "s.html"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "nkisim", "sweep", f"{kernel_file}:matmul_optimized"),
            *("--param", "blocks_m=1,2", "--param", "blocks_n=1", "--param", "blocks_k=1,2", "--target", "trn1,trn2"),
            *("--shapes", "256x256:bfloat16", "256x512:bfloat16", "--csv", str(out_csv), "--plot", str(out_html)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("trn1: best ")
    assert len(list(csv.DictReader(out_csv.open()))) == 8 and out_html.exists()


def test_cli_names_a_malformed_param_in_one_line():
    kernel_file = Path(nkisim.__file__).parent / "examples" / "matmul.py"
    done = subprocess.run(
        [sys.executable, "-m", "nkisim", "sweep", f"{kernel_file}:matmul_optimized", "--param", "blocks_m"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --param 'blocks_m' is not like NAME=V1,V2"


class _RayExecutor:
    """The adapter docs/sweeps.md gives for Ray: a Ray task per point, as a concurrent.futures future."""

    def submit(self, fn, *args):
        import ray

        return ray.remote(fn).remote(*args).future()


def test_ray_runs_a_sweep_through_the_executor_interface():
    ray = pytest.importorskip("ray", reason="Ray is not installed (optional; see docs/sweeps.md)")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        params = {"repeats": [1, 2], "width": [64, 256]}
        there = nkisim.sweep(copies, SPEC, params=params, targets=["trn1", "trn2"], executor=_RayExecutor())
    finally:
        ray.shutdown()
    assert fingerprint(there) == fingerprint(nkisim.sweep(copies, SPEC, params=params, targets=["trn1", "trn2"]))


def test_the_tuning_example_reports_the_best_against_the_default():
    from nkisim.examples import tune_matmul

    table = nkisim.sweep(
        matmul_optimized,
        {"lhsT": ((1024, 2048), BF16), "rhs": ((1024, 1024), BF16)},
        params={"blocks_m": [8, 16], "blocks_n": [2], "blocks_k": [4, 8]},  # the defaults (16, 2, 8) and 3 others
        targets=tune_matmul.TARGETS,
    )
    text = tune_matmul.report(table)
    for target in tune_matmul.TARGETS:
        default = next(r for r in table if r.target == target and r.params == tune_matmul.DEFAULT)
        best = table.best(target)
        assert best.total_ns < default.total_ns  # the tuned blocks beat the defaults
        assert f"{target}: default {default.total_ns / 1e3:.1f} us; best {best.total_ns / 1e3:.1f} us" in text
