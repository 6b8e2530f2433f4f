"""nkisim never fails badly: thread-safe BLAS limiting, host-memory bounds, budgets, outputs, side effects.

Each rule broken here raises a typed error whose message starts at the kernel's own
line (found from a ``# @marker`` comment) and names the rule.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim import BudgetError, CapacityError, MemoryKindError, OperandError
from nkisim.examples.matmul import matmul_tiled
from nkisim.hw import load_target

FILE = Path(__file__).name
_LINES = Path(__file__).read_text().splitlines()


def at(marker: str) -> str:
    """A regex for the start of a message about the line marked ``# @marker``."""
    tag = f"# @{marker}"
    hits = [n for n, text in enumerate(_LINES, start=1) if text.rstrip().endswith(tag)]
    assert len(hits) == 1, f"marker {tag!r} is on {len(hits)} lines"
    return rf"^{re.escape(FILE)}:{hits[0]}: "


def blas_threads() -> list[int]:
    return [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]


# -- BLAS limiting across threads ------------------------------------------------------


def test_concurrent_runs_match_a_lone_run_bit_for_bit_and_restore_the_callers_blas_setting():
    rng = np.random.default_rng(0)
    lhs_t = rng.standard_normal((256, 256)).astype(np.float32)
    rhs = rng.standard_normal((256, 1024)).astype(np.float32)
    with threadpool_limits(limits=2, user_api="blas"):
        callers = blas_threads()
        reference = nkisim.run(matmul_tiled, [lhs_t, rhs]).outputs
        assert blas_threads() == callers
        results: list[np.ndarray] = []
        errors: list[BaseException] = []

        def worker() -> None:
            try:
                for _ in range(3):
                    results.append(nkisim.run(matmul_tiled, [lhs_t, rhs]).outputs)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(results) == 24
        for out in results:
            assert out.tobytes() == reference.tobytes()
        assert blas_threads() == callers  # the caller's setting, not the one-thread limit


def test_blas_is_one_thread_inside_a_kernel_and_restored_after():
    seen = []

    def kernel():
        seen.append(blas_threads())

    with threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        nkisim.run(kernel, [])
        assert blas_threads() == before
    assert seen and all(n == 1 for n in seen[0])


# -- HBM capacity --------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_a_shapes_only_input_larger_than_hbm_is_refused(target):
    capacity = load_target(target).hbm.capacity_bytes
    rows = capacity // (4 * 1024 * 1024) + 1  # one row more than fits, as float32[rows, 1Mi]

    def kernel(big):
        return None

    with pytest.raises(CapacityError, match=rf"HBM is full: cannot allocate {rows * 4 * 1024 * 1024} bytes for big"):
        nkisim.profile(kernel, [((rows, 1024 * 1024), np.float32)], target=target)


def test_an_hbm_tensor_made_by_the_kernel_beyond_hbm_is_refused_at_its_line():
    capacity = load_target("trn2").hbm.capacity_bytes

    def kernel(x):
        nl.ndarray((capacity // 1024 + 1, 256), nl.float32, buffer=nl.shared_hbm)  # @hbm-full

    with pytest.raises(CapacityError, match=at("hbm-full") + r".*HBM is full: cannot allocate"):
        nkisim.run(kernel, [np.zeros((4, 4), np.float32)], target="trn2")
    with pytest.raises(CapacityError, match=at("hbm-full") + r".*HBM is full"):
        nkisim.profile(kernel, [((4, 4), np.float32)], target="trn2")


def test_hbm_is_counted_across_tensors():
    capacity = load_target("trn1").hbm.capacity_bytes
    half = capacity // 2 // 4 // 1024 + 1  # rows of float32[., 1024]: two of them overflow

    def kernel(a, b):
        return None

    spec = ((half, 1024), np.float32)
    nkisim.profile(kernel, [spec, ((4, 4), np.float32)], target="trn1")
    with pytest.raises(CapacityError, match=r"HBM is full: cannot allocate \d+ bytes for b"):
        nkisim.profile(kernel, [spec, spec], target="trn1")


# -- budgets ------------------------------------------------------------------------------


def _endless(x):
    t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    while True:
        nisa.memset(dst=t, value=0.0)  # @endless


def test_a_runaway_kernel_stops_at_its_instruction_budget():
    with pytest.raises(
        BudgetError, match=at("endless") + r"nisa\.memset: the kernel reached its budget of 1,000 instructions"
    ) as info:
        nkisim.run(_endless, [np.zeros((2, 2), np.float32)], max_instructions=1000)
    assert info.value.instructions == 1000
    with pytest.raises(BudgetError, match=r"max_instructions=5000\b"):
        nkisim.profile(_endless, [((2, 2), np.float32)], max_instructions=5000)


def test_a_runaway_kernel_stops_at_its_timeout():
    with pytest.raises(
        BudgetError, match=at("endless") + r"nisa\.memset: the kernel ran past its timeout=0\.2 s after"
    ) as info:
        nkisim.profile(_endless, [((2, 2), np.float32)], timeout=0.2, max_instructions=None)
    assert info.value.elapsed > 0.2
    assert info.value.instructions > 0


def test_a_kernel_within_its_budget_runs_normally():
    def kernel(x):
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        for _ in range(10):
            nisa.memset(dst=t, value=1.0)

    profile = nkisim.profile(kernel, [((2, 2), np.float32)], max_instructions=10)
    assert profile.instruction_count == 10
    with pytest.raises(BudgetError):
        nkisim.profile(kernel, [((2, 2), np.float32)], max_instructions=9)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"max_instructions": 0},
            ValueError,
            r"nkisim\.run: max_instructions must be a positive integer or None, got 0",
        ),
        ({"max_instructions": 1.5}, TypeError, r"max_instructions must be a positive integer or None, got float 1\.5"),
        ({"max_instructions": True}, TypeError, r"max_instructions must be a positive integer or None, got bool"),
        ({"timeout": -1}, ValueError, r"nkisim\.run: timeout must be a positive number of seconds or None, got -1"),
        ({"timeout": "10"}, TypeError, r"timeout must be a positive number of seconds or None, got str '10'"),
        ({"timeout": float("nan")}, ValueError, r"timeout must be a positive number of seconds or None, got nan"),
    ],
)
def test_budget_arguments_are_checked(kwargs, error, message):
    with pytest.raises(error, match=message):
        nkisim.run(_endless, [np.zeros((2, 2), np.float32)], **kwargs)


# -- outputs ------------------------------------------------------------------------------


@pytest.mark.parametrize("buffer", [nl.sbuf, nl.psum])
def test_returning_an_on_chip_tile_says_to_store_it_to_hbm(buffer):
    def kernel(x):
        t = nl.ndarray((128, 64), nl.float32, buffer=buffer)
        nisa.memset(dst=t, value=1.0)
        return t  # @return-tile

    with pytest.raises(
        MemoryKindError,
        match=at("return-tile") + rf"the kernel returns {buffer.value.upper()} tile .* float32\[128, 64\]; "
        r"on-chip memory does not outlive the kernel: copy the tile to an HBM tensor",
    ):
        nkisim.run(kernel, [np.zeros((2, 2), np.float32)])


def test_an_on_chip_tile_nested_in_the_outputs_is_refused_too():
    def kernel(x):
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=1.0)
        return x, {"tile": t}

    with pytest.raises(MemoryKindError, match=r"the kernel returns SBUF tile"):
        nkisim.run(kernel, [np.zeros((2, 2), np.float32)])


def test_outputs_are_host_arrays_that_outlive_the_run_and_are_private_to_it():
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        return out

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    first = nkisim.run(kernel, [x]).outputs
    second = nkisim.run(kernel, [x + 1]).outputs
    assert isinstance(first, np.ndarray) and not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, x)
    first[...] = -1  # the caller owns it
    np.testing.assert_array_equal(second, x + 1)
    assert first.nbytes == x.nbytes and first.base is not None and first.base.nbytes == x.nbytes


def test_a_tile_kept_from_an_earlier_run_is_refused():
    kept = []

    def first(x):
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=1.0)
        kept.append(t)

    def second(x):
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=t, src=kept[0])  # @stale

    nkisim.run(first, [np.zeros((2, 2), np.float32)])
    with pytest.raises(
        OperandError, match=at("stale") + r"nisa\.tensor_copy \[.*\]: src .* is a SBUF tile of another run"
    ):
        nkisim.run(second, [np.zeros((2, 2), np.float32)])


# -- side effects once per run -------------------------------------------------------------


def test_device_print_prints_once_when_the_liveness_retry_runs_the_kernel_again(capsys):
    cols = load_target("trn1").sbuf.bytes_per_partition // 4 // 4 + 16  # a quarter of SBUF and a bit
    calls = []

    def kernel():
        calls.append(1)
        out = nl.ndarray((6, 128, cols), nl.float32, buffer=nl.shared_hbm)
        tiles = []
        for i in range(6):
            t = nl.ndarray((128, cols), nl.float32, buffer=nl.sbuf)
            tiles.append(t)  # kept reachable: only the compiler-style liveness retry fits six
            nisa.memset(dst=t, value=float(i + 1))
            nl.device_print(f"tile{i}", t[0:1, 0:2])
            nisa.dma_copy(dst=out[i], src=t)
        return out

    nkisim.run(kernel, [], target="trn1")
    assert len(calls) == 3  # the retry is documented: the Python body runs up to three times
    printed = capsys.readouterr().out
    for i in range(6):
        assert printed.count(f"tile{i} ") == 1, printed
    assert printed.index("tile0 ") < printed.index("tile5 ")
