"""Large inputs read in place: outputs, timelines and the caller's arrays as when they are copied into HBM.

A run reads an input of ``BORROW_BYTES`` or more through a read-only view of the caller's
array instead of a copy; a kernel that writes an input starts again with copies. Every
case is checked against a numpy formula written here, and against the same run with
borrowing off (``BORROW_BYTES`` raised above every input).
"""

from __future__ import annotations

import contextlib
import tracemalloc
import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nkisim
import nkisim.nki as nki
import nkisim.nki.collectives as ncc
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.memory import system
from nkisim.nki.collectives import ReplicaGroup

ROWS, COLS = 1024, 256  # float32: exactly 1 MiB, the smallest size that is borrowed


def copy_rows(src, dst, first: int = 0, count: int | None = None) -> None:
    """Inside a kernel: ``dst[r] = src[r]`` through SBUF, 128 rows at a time, for ``count`` rows from ``first``."""
    count = src.shape[0] if count is None else count
    for r in range(first, first + count, 128):
        tile = nl.ndarray((128, src.shape[1]), dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=src[r : r + 128])
        nisa.dma_copy(dst=dst[r : r + 128], src=tile)


@nki.jit
def scaled_copy(x):
    """out = 2 * x, tile by tile."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for r in range(x.shape[0] // 128):
        rows = slice(r * 128, (r + 1) * 128)
        tile = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[rows])
        doubled = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=doubled, data=tile, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out[rows], src=doubled)
    return out


CALLS: list[str] = []


@nki.jit
def add_into_first(x, y):
    """x[:128] += y[:128] in place, then out = x (every row); counts its own calls in ``CALLS``."""
    CALLS.append("add_into_first")
    a = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    b = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x[0:128])
    nisa.dma_copy(dst=b, src=y[0:128])
    nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)
    nisa.dma_copy(dst=x[0:128], src=a)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    copy_rows(x, out)
    return out


@nki.jit
def swallows_the_write(x, y):
    """Tries to write its input inside ``except BaseException: pass``, then copies x to the output."""
    tile = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=y[0:128])
    with contextlib.suppress(BaseException):  # what a careless kernel does; the run must not lose the write
        nisa.dma_copy(dst=x[0:128], src=tile)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    copy_rows(x, out)
    return out


@nki.jit
def returns_its_input(x):
    return x


@pytest.fixture
def no_borrowing(monkeypatch: pytest.MonkeyPatch):
    def off() -> None:
        monkeypatch.setattr(system, "BORROW_BYTES", 1 << 62)

    return off


def _inputs(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((ROWS, COLS), dtype=np.float32), rng.standard_normal((ROWS, COLS), dtype=np.float32)


def test_a_borrowed_input_gives_the_copied_run_exactly(no_borrowing) -> None:
    x, _ = _inputs()
    before = x.copy()
    borrowed = nkisim.run(scaled_copy, [x])
    np.testing.assert_array_equal(borrowed.outputs, 2 * before)
    assert np.array_equal(x, before) and x.flags.writeable  # the caller's array: unchanged, still writable
    assert borrowed.outputs.flags.writeable and not np.shares_memory(borrowed.outputs, x)
    no_borrowing()
    copied = nkisim.run(scaled_copy, [x])
    np.testing.assert_array_equal(copied.outputs, borrowed.outputs)
    assert copied.profile.total_ns == borrowed.profile.total_ns
    np.testing.assert_array_equal(copied.profile.timeline.start_ns, borrowed.profile.timeline.start_ns)


def test_a_kernel_that_writes_its_input_starts_again_once_then_copies_at_once(no_borrowing) -> None:
    x, y = _inputs(1)
    expected = x.copy()
    expected[:128] += y[:128]
    CALLS.clear()
    first = nkisim.run(add_into_first, [x, y])
    np.testing.assert_array_equal(first.outputs, expected)
    assert len(CALLS) == 2  # the borrowing run stopped at the write, the copying run finished
    assert not np.array_equal(x, expected)  # nkisim.run leaves the caller's input as it was
    CALLS.clear()
    again = nkisim.run(add_into_first, [x, y])
    assert len(CALLS) == 1  # known to write its input: copied from the start
    np.testing.assert_array_equal(again.outputs, expected)
    no_borrowing()
    copied = nkisim.run(add_into_first, [x, y])
    assert copied.profile.total_ns == first.profile.total_ns == again.profile.total_ns


def test_nki_simulate_still_writes_the_result_back_into_the_argument() -> None:
    x, y = _inputs(2)
    expected = x.copy()
    expected[:128] += y[:128]
    nki.simulate(add_into_first)(x, y)
    np.testing.assert_array_equal(x, expected)


def test_a_kernel_that_catches_the_signal_still_gets_its_write(no_borrowing) -> None:
    x, y = _inputs(3)
    expected = x.copy()
    expected[:128] = y[:128]
    result = nkisim.run(swallows_the_write, [x, y])
    np.testing.assert_array_equal(result.outputs, expected)


def test_an_output_that_is_the_input_is_a_copy() -> None:
    x, _ = _inputs(4)
    out = nkisim.run(returns_its_input, [x]).outputs
    np.testing.assert_array_equal(out, x)
    assert out.flags.writeable and not np.shares_memory(out, x)


def test_a_compiled_program_replays_new_values_of_a_large_input() -> None:
    x, _ = _inputs(5)
    prog = nkisim.compile(scaled_copy, [x])
    z = -x
    np.testing.assert_array_equal(prog([z]).outputs, 2 * z)


LAYOUTS = ("c", "fortran", "strided", "offset")


def _laid_out(values: np.ndarray, layout: str) -> np.ndarray:
    if layout == "fortran":
        return np.asfortranarray(values)
    if layout == "strided":
        wide = np.zeros((values.shape[0], 2 * values.shape[1]), dtype=values.dtype)
        wide[:, ::2] = values
        return wide[:, ::2]
    if layout == "offset":  # unaligned when the item is wider than a byte
        raw = np.zeros(values.nbytes + 1, dtype=np.uint8)
        view = raw[1:].view(values.dtype).reshape(values.shape)
        view[...] = values
        return view
    return values


@settings(max_examples=12, deadline=None)
@given(
    dtype=st.sampled_from([np.float32, ml_dtypes.bfloat16, np.int32, ml_dtypes.float8_e4m3fn, np.float16]),
    layout=st.sampled_from(LAYOUTS),
    cols=st.sampled_from([1024, 2048]),
)
def test_every_dtype_and_layout_reads_the_callers_values(dtype, layout, cols) -> None:
    """A tile-by-tile copy of an input, big enough to borrow when its layout allows, returns its values bit for bit."""
    rng = np.random.default_rng(cols)
    values = rng.integers(-8, 8, size=(256, cols)).astype(dtype)
    given_values = _laid_out(values, layout)
    out = nkisim.run(_copy_kernel, [given_values]).outputs
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out.view(np.uint8), np.ascontiguousarray(values).view(np.uint8))
    np.testing.assert_array_equal(given_values, values)  # untouched


@nki.jit
def _copy_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    copy_rows(x, out)
    return out


def test_a_write_the_operand_list_does_not_show_is_refused_by_the_read_only_view(monkeypatch) -> None:
    """Writes reach HBM through the declared operands; should one not, numpy refuses it and the run starts again."""
    monkeypatch.setattr(system.MemorySystem, "check_writes", lambda self, writes: None)
    x, y = _inputs(6)
    expected = x.copy()
    expected[:128] += y[:128]

    @nki.jit
    def add_into_first_again(x, y):  # a kernel of its own: not yet known to write its input
        return add_into_first.func(x, y)

    np.testing.assert_array_equal(nkisim.run(add_into_first_again, [x, y]).outputs, expected)


@nki.jit
def second_core_writes_its_half(x, y):
    """On two cores: each copies its half of x to the output; core 1 first adds y into x's rows 512:640, in place."""
    CALLS.append("second_core_writes_its_half")
    pid = nl.program_id(0)
    half = x.shape[0] // 2
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    if pid == 1:
        a = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        b = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[half : half + 128])
        nisa.dma_copy(dst=b, src=y[0:128])
        nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)
        nisa.dma_copy(dst=x[half : half + 128], src=a)
    copy_rows(x, out, pid * half, half)
    return out


def test_two_cores_borrow_too_and_either_core_writing_an_input_starts_again(no_borrowing) -> None:
    x, y = _inputs(7)
    doubled = nkisim.run(scaled_copy[2], [x], target="trn2")
    np.testing.assert_array_equal(doubled.outputs, 2 * x)
    expected = x.copy()
    expected[ROWS // 2 : ROWS // 2 + 128] += y[:128]
    CALLS.clear()
    first = nkisim.run(second_core_writes_its_half[2], [x, y], target="trn2")
    np.testing.assert_array_equal(first.outputs, expected)
    assert len(CALLS) == 4  # two programs stopped by core 1's write, then two that copy
    no_borrowing()
    copied = nkisim.run(scaled_copy[2], [x], target="trn2")
    assert copied.profile.total_ns == doubled.profile.total_ns


def _filling_kernel(width: int):
    """Four [128, width] SBUF tiles kept alive together (more than SBUF holds until tiles are freed after their
    last use), each memset to i + 1 and stored; then tile 3's first 16 columns go into x in place."""

    def kernel(x):
        out = nl.ndarray((4, 128, width), nl.float32, buffer=nl.shared_hbm)
        tiles = []
        for i in range(4):
            t = nl.ndarray((128, width), nl.float32, buffer=nl.sbuf)
            tiles.append(t)
            nisa.memset(dst=t, value=float(i + 1))
            nisa.dma_copy(dst=out[i], src=t)
        nisa.dma_copy(dst=x[:, 0:16], src=tiles[3][:, 0:16])
        after = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        whole = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=whole, src=x)
        nisa.dma_copy(dst=after, src=whole)
        return out, after

    return kernel


def test_a_write_met_in_the_sbuf_full_rerun_starts_every_attempt_again(no_borrowing) -> None:
    """The eager run runs out of SBUF before the write; the liveness re-run meets it: the whole run starts again."""
    from nkisim.hw import load_target

    width = load_target("trn1").sbuf.bytes_per_partition // 16 + 16  # a little over a quarter of a partition
    x = np.zeros((128, 2048), np.float32)  # 1 MiB
    expected_x = x.copy()
    expected_x[:, 0:16] = 4.0
    # a new function each call: never remembered, so each borrowing call starts again
    borrowed = nkisim.run(_filling_kernel(width), [x], target="trn1")
    out, after = borrowed.outputs
    np.testing.assert_array_equal(out, np.broadcast_to(np.arange(1, 5, dtype=np.float32)[:, None, None], out.shape))
    np.testing.assert_array_equal(after, expected_x)
    assert not x.any()
    no_borrowing()
    copied = nkisim.run(_filling_kernel(width), [x], target="trn1")
    assert copied.profile.total_ns == borrowed.profile.total_ns
    assert len(copied.profile.instructions) == len(borrowed.profile.instructions)
    assert [d.check for d in copied.profile.diagnostics] == [d.check for d in borrowed.profile.diagnostics]


def test_a_kernel_that_catches_the_signal_runs_nothing_more_of_the_discarded_run(capsys) -> None:
    """After a swallowed signal the next NKI call stops the run: its fallback path neither prints nor warns."""

    @nki.jit
    def falls_back(x, y):
        t = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=y[0:128])
        try:
            nisa.dma_copy(dst=x[0:128], src=t)
            in_place = True
        except BaseException:
            in_place = False
        if not in_place:
            nl.device_print("fallback", t)
            never_written = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=t, data1=t, data2=never_written, op=nl.add)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[0:128], src=t)
        nisa.dma_copy(dst=out[128:], src=x[128:])
        return out

    x, y = _inputs(8)
    expected = x.copy()
    expected[:128] = y[:128]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a finding of the fallback path would be a CheckWarning here
        result = nkisim.run(falls_back, [x, y], check="warn")
    np.testing.assert_array_equal(result.outputs, expected)
    assert "fallback" not in capsys.readouterr().out
    assert not result.profile.diagnostics


def test_the_abandoned_run_is_freed_before_the_run_starts_again(no_borrowing) -> None:
    """A restart holds one run's memory at a time: its peak is a copying run's, not two runs'."""
    import tracemalloc

    big = 32 << 20  # a 32 MiB HBM output, written in full before the kernel writes its input

    def writes_late():
        @nki.jit
        def kernel(x):
            out = nl.ndarray((big // 4 // 2048, 2048), nl.float32, buffer=nl.shared_hbm)
            tile = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.sbuf)
            nisa.memset(dst=tile, value=1.0)
            nisa.dma_copy(dst=x[0:128], src=tile)
            return out

        return kernel

    def peak(kernel) -> int:
        x = np.zeros((ROWS, COLS), np.float32)
        tracemalloc.start()
        try:
            nkisim.run(kernel, [x])
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    restarting = peak(writes_late())  # a new kernel: not known to write its input, so it borrows and starts again
    no_borrowing()
    copying = peak(writes_late())
    assert restarting < copying + big // 2, (restarting, copying)


def _stdout_of(run, capsys) -> tuple[str, object]:
    result = run()
    return capsys.readouterr().out, result


def test_a_legacy_kernel_that_catches_the_signal_prints_only_the_path_it_takes(no_borrowing, capsys) -> None:
    import nkisim.nki.legacy.language as legacy_nl

    def legacy(x, y):
        t = legacy_nl.load(y[0:128, :])
        try:
            legacy_nl.store(x[0:128, :], value=t)
            legacy_nl.device_print("stored", t)
        except BaseException:
            legacy_nl.device_print("not stored", t)
        out = legacy_nl.ndarray(x.shape, dtype=x.dtype, buffer=legacy_nl.shared_hbm)
        legacy_nl.store(out[0:128, :], value=legacy_nl.load(x[0:128, :]))
        return out

    x, y = _inputs(9)
    borrowed_out, borrowed = _stdout_of(lambda: nkisim.run(legacy, [x, y]), capsys)
    no_borrowing()
    copied_out, _ = _stdout_of(lambda: nkisim.run(legacy, [x, y]), capsys)
    assert borrowed_out == copied_out and "stored" in copied_out and "not stored" not in copied_out
    np.testing.assert_array_equal(borrowed.outputs[0:128], y[0:128])


def test_when_one_core_catches_the_signal_the_other_core_stops_too(no_borrowing, capsys) -> None:
    """LNC=2: core 1 gives up after its write is refused; core 0 must not print in the abandoned run."""

    def two_cores(x, y):
        out = nl.ndarray((2, 128, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=y[0:128])
        if nl.program_id(0) == 1:
            try:
                nisa.dma_copy(dst=x[0:128], src=t)
            except BaseException:
                return out
            nl.device_print("core 1", t)
            nisa.dma_copy(dst=out[1], src=t)
        else:
            u = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.sbuf)
            for value in (7.0, 8.0, 9.0):  # core 1 meets its write meanwhile
                nisa.memset(dst=u, value=value)
            nl.device_print("core 0", u)
            nisa.dma_copy(dst=out[0], src=u)
        return out

    x, y = _inputs(10)
    borrowed_out, borrowed = _stdout_of(lambda: nkisim.run(nki.jit(two_cores)[2], [x, y], target="trn2"), capsys)
    no_borrowing()
    copied_out, copied = _stdout_of(lambda: nkisim.run(nki.jit(two_cores)[2], [x, y], target="trn2"), capsys)
    assert borrowed_out == copied_out and copied_out.count("core 0") == copied_out.count("core 1") == 1
    np.testing.assert_array_equal(borrowed.outputs, copied.outputs)
    np.testing.assert_array_equal(borrowed.outputs[1], y[0:128])


def _write_first_rows(x, y, on_refusal):
    """Inside a kernel: x[:128] = y[:128] in place, calling ``on_refusal()`` if the write raises anything."""
    t = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=y[0:128])
    try:
        nisa.dma_copy(dst=x[0:128], src=t)
    except BaseException:
        on_refusal()


def test_a_kernel_that_catches_the_signal_and_returns_at_once_still_writes_its_input() -> None:
    """No NKI call after the caught signal: the run's end notices it, and nki.simulate writes the input back."""

    def kernel(x, y):
        _write_first_rows(x, y, lambda: None)
        return x

    x, y = _inputs(11)
    expected = x.copy()
    expected[:128] = y[:128]
    out = nki.simulate(kernel)(x, y)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(x, expected)


def test_a_kernel_that_catches_the_signal_and_then_fails_runs_again() -> None:
    def refuse() -> None:
        raise RuntimeError("the in-place update failed")

    def kernel(x, y):
        _write_first_rows(x, y, refuse)
        return x

    x, y = _inputs(12)
    out = nkisim.run(kernel, [x, y]).outputs
    np.testing.assert_array_equal(out[:128], y[:128])
    np.testing.assert_array_equal(out[128:], x[128:])


@pytest.mark.parametrize("then", ["returns", "fails"])
def test_two_cores_of_which_one_catches_the_signal_and_ends(then: str) -> None:
    """kernel[2]: core 1 catches the signal and returns (or raises); core 0 issues nothing after it."""

    def refuse() -> None:
        if then == "fails":
            raise RuntimeError("the in-place update failed")

    def kernel(x, y):
        if nl.program_id(0) == 1:
            _write_first_rows(x, y, refuse)
        return x

    x, y = _inputs(13)
    out = nkisim.run(nki.jit(kernel)[2], [x, y], target="trn2").outputs
    np.testing.assert_array_equal(out[:128], y[:128])
    np.testing.assert_array_equal(out[128:], x[128:])


@nki.jit
def reduce_rows(x, group):
    """On each rank: out = the sum of every rank's x (``ncc.all_reduce``), x only read."""
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=group, op=nl.add)
    return dst


@nki.jit
def reduce_into_input(x, group):
    """On each rank: x = the sum of every rank's x, in place; out = x. Counts its calls in ``CALLS``."""
    CALLS.append("reduce_into_input")
    ncc.all_reduce(srcs=[x], dsts=[x], replica_group=group, op=nl.add)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)
    return out


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_ranks_read_their_large_inputs_in_place_and_give_the_copied_run_exactly(no_borrowing) -> None:
    xs = list(_inputs(11))
    group = ReplicaGroup([[0, 1]])
    launch = [[x, group] for x in xs]
    nkisim.run(reduce_rows, launch, ranks=2, target="trn2")  # warm-up: compiled code and caches
    borrowed_peak = _peak_bytes(lambda: nkisim.run(reduce_rows, launch, ranks=2, target="trn2"))
    borrowed = nkisim.run(reduce_rows, launch, ranks=2, target="trn2")
    for out in borrowed.outputs:
        np.testing.assert_array_equal(out, xs[0] + xs[1])
    no_borrowing()
    copied_peak = _peak_bytes(lambda: nkisim.run(reduce_rows, launch, ranks=2, target="trn2"))
    copied = nkisim.run(reduce_rows, launch, ranks=2, target="trn2")
    assert copied.profile.total_ns == borrowed.profile.total_ns
    np.testing.assert_array_equal(copied.profile.timeline.start_ns, borrowed.profile.timeline.start_ns)
    inputs = sum(x.nbytes for x in xs)  # 2 MiB: each rank's copy into its HBM, not made when borrowed
    assert copied_peak - borrowed_peak >= 0.9 * inputs, (copied_peak, borrowed_peak)


def test_a_collective_writing_a_ranks_input_starts_the_launch_again_once_then_copies_at_once(no_borrowing) -> None:
    xs = list(_inputs(12))
    launch = [[x, ReplicaGroup([[0, 1]])] for x in xs]
    CALLS.clear()
    first = nkisim.run(reduce_into_input, launch, ranks=2, target="trn2")
    for out in first.outputs:
        np.testing.assert_array_equal(out, xs[0] + xs[1])
    assert 3 <= len(CALLS) <= 4  # the borrowing launch stopped at the write (one rank or both begun), then two ranks
    assert not np.array_equal(xs[0], xs[0] + xs[1])  # the callers' arrays as they were
    CALLS.clear()
    again = nkisim.run(reduce_into_input, launch, ranks=2, target="trn2")
    assert len(CALLS) == 2  # known to write its input: copied from the start
    no_borrowing()
    copied = nkisim.run(reduce_into_input, launch, ranks=2, target="trn2")
    assert copied.profile.total_ns == first.profile.total_ns == again.profile.total_ns
