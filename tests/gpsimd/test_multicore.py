"""Multicore mode: 8 cores, TCM accessor only, get_dst_tensor, disjoint and complete output writes."""

from __future__ import annotations

import numpy as np
import pytest

from nkisim import gpsimd
from tests.gpsimd.kernels import library, tcm_blocks

F32 = np.float32


def mc(kernel, name="mc_ops"):
    return library(name, kernel, multicore=True)


def split_even(ctx, t):
    n, cpu, cpus = t.numel(), ctx.get_cpu_id(), ctx.get_cpu_count()
    tcm_blocks(ctx, t, cpu * n // cpus, (cpu + 1) * n // cpus, lambda b: np.multiply(b, 3, out=b), block=64)
    return ctx.get_dst_tensor()


@pytest.mark.parametrize("n", [8, 1000, 1003, 4097])
def test_every_core_takes_its_part(n: int) -> None:
    x = np.arange(n, dtype=F32)
    result = gpsimd.run(mc(split_even), [x])
    assert np.array_equal(result.outputs, 3 * x)
    tracks = {r.engine for r in result.profile.instructions}
    assert tracks == {f"GpSimd {i}" for i in range(8)}


def test_eight_cores_on_every_generation() -> None:
    ids: list[tuple[int, int]] = []

    def who(ctx, t):
        ids.append((ctx.get_cpu_id(), ctx.get_cpu_count()))
        return split_even(ctx, t)

    for target in ("trn1", "trn2", "trn3"):
        ids.clear()
        gpsimd.run(mc(who), [np.ones(64, F32)], target=target)
        assert ids == [(i, 8) for i in range(8)]


def test_single_core_mode_has_one_core() -> None:
    def count(ctx, t):
        ctx.printf("%d of %d\n", ctx.get_cpu_id(), ctx.get_cpu_count())
        return ctx.get_dst_tensor()

    assert gpsimd.run(library("sc_ops", count), [np.ones(2, F32)]).stdout == "0 of 1\n"


def test_printf_only_from_core_0() -> None:
    def hello(ctx, t):
        ctx.printf("core %d\n", ctx.get_cpu_id())
        return split_even(ctx, t)

    assert gpsimd.run(mc(hello), [np.ones(64, F32)]).stdout == "core 0\n"


@pytest.mark.parametrize(
    ("body", "what"),
    [
        ("t.accessor()", "the standard accessor"),
        ("t.read_stream()", "a stream accessor"),
        ("t.write_stream()", "a stream"),
    ],
)
def test_element_and_stream_accessors_are_undefined(body: str, what: str) -> None:
    namespace: dict[str, object] = {}
    exec(compile(f"def k(ctx, t):\n    {body}\n", "mc_kernel.py", "exec"), namespace)
    with pytest.raises(gpsimd.GpsimdUndefinedBehavior) as info:
        gpsimd.run(mc(namespace["k"]), [np.ones(64, F32)])
    text = str(info.value)
    assert what in text and "multicore" in text and "mc_kernel.py:2" in text and "[core 0]" in text


def test_get_dst_tensor_is_mandatory() -> None:
    def returns(ctx, t):
        return ctx.zeros(t.sizes(), t.dtype)

    with pytest.raises(gpsimd.GpsimdUndefinedBehavior, match="must write its output through get_dst_tensor"):
        gpsimd.run(mc(returns), [np.ones(64, F32)])


def remainder_bug(ctx, t):
    """The classic mistake: the last core enlarges its partition, then uses it to compute its offset."""
    n, cpu, cpus = t.numel(), ctx.get_cpu_id(), ctx.get_cpu_count()
    partition = n // cpus
    if cpu == cpus - 1:
        partition = n - partition * (cpus - 1)
    start = partition * cpu
    tcm_blocks(ctx, t, start, start + partition, lambda b: np.abs(b, out=b), block=32)
    return ctx.get_dst_tensor()


def test_remainder_bug_writes_past_the_end() -> None:
    """n = 1003: partition 125, the last core takes 128 elements at 7 * 128 = 896: 896..1023 > 1002."""
    with pytest.raises(gpsimd.GpsimdBoundsError) as info:
        gpsimd.run(mc(remainder_bug), [np.ones(1003, F32)])
    text = str(info.value)
    assert "[core 7]" in text and "elements 992..1023 reach past the end of the tensor (1003 elements)" in text
    assert "kernels.py:" in text  # the line of the transfer (its first block reading past the end)


def test_out_of_range_tcm_to_tensor_names_core_and_line() -> None:
    def shifted(ctx, t):
        cpu = ctx.get_cpu_id()
        buf = ctx.tcm_malloc(64 * 4)
        t.tcm_accessor().tensor_to_tcm(buf, cpu * 8, 8)
        ctx.get_dst_tensor().tcm_accessor().tcm_to_tensor(buf, cpu * 9, 8)
        return ctx.get_dst_tensor()

    with pytest.raises(gpsimd.GpsimdBoundsError) as info:
        gpsimd.run(mc(shifted), [np.ones(64, F32)])
    text = str(info.value)
    assert text.startswith("test_multicore.py:") and "[core 7]" in text
    assert "tcm_to_tensor: elements 63..70 reach past the end of the tensor (64 elements)" in text


def test_forgotten_remainder_leaves_elements_unwritten() -> None:
    """Each core takes n // 8 elements and nobody takes the remainder: n = 1003 leaves 1000..1002."""

    def forgetful(ctx, t):
        part = t.numel() // ctx.get_cpu_count()
        start = part * ctx.get_cpu_id()
        tcm_blocks(ctx, t, start, start + part, lambda b: None, block=64)
        return ctx.get_dst_tensor()

    with pytest.raises(gpsimd.GpsimdRaceError) as info:
        gpsimd.run(mc(forgetful), [np.ones(1003, F32)])
    assert "output elements 1000..1002 were written by no core" in str(info.value)
    assert "test_multicore.py:" in str(info.value)  # the kernel's definition


def test_remainder_bug_with_divisible_size_is_fine() -> None:
    x = -np.arange(1000, dtype=F32)
    assert np.array_equal(gpsimd.run(mc(remainder_bug), [x]).outputs, np.abs(x))


def test_overlapping_writes_between_cores() -> None:
    def overlap(ctx, t):
        n, cpu = t.numel(), ctx.get_cpu_id()
        part = n // 8
        tcm_blocks(ctx, t, cpu * part, min(n, cpu * part + part + 2), lambda b: None, block=64)
        return ctx.get_dst_tensor()

    with pytest.raises(gpsimd.GpsimdRaceError) as info:
        gpsimd.run(mc(overlap), [np.ones(80, F32)])
    text = str(info.value)
    assert "cores 0 and 1 both write output elements 10..11" in text and "[core 1]" in text
    assert "kernels.py:" in text


def test_all_cores_writing_everything_is_a_race() -> None:
    def everyone(ctx, t):
        tcm_blocks(ctx, t, 0, t.numel(), lambda b: None, block=64)
        return ctx.get_dst_tensor()

    with pytest.raises(gpsimd.GpsimdRaceError, match="cores 0 and 1 both write"):
        gpsimd.run(mc(everyone), [np.ones(64, F32)])


def test_no_core_writing_is_reported() -> None:
    def idle(ctx, t):
        return ctx.get_dst_tensor()

    with pytest.raises(gpsimd.GpsimdRaceError, match=r"output elements 0\.\.63 were written by no core"):
        gpsimd.run(mc(idle), [np.ones(64, F32)])


def test_kernel_time_is_the_slowest_core_plus_launch() -> None:
    """Hand-computed: only core 3 works (one 64-element block); the rest only launch."""

    def lopsided(ctx, t):
        n, cpu = t.numel(), ctx.get_cpu_id()
        start, stop = (0, n) if cpu == 3 else (0, 0)
        tcm_blocks(ctx, t, start, stop, lambda b: np.negative(b, out=b), block=64)
        return ctx.get_dst_tensor()

    result = gpsimd.run(mc(lopsided), [np.ones(64, F32)])
    g = result.profile.hw.gpsimd_cores
    transfer = g.tcm_dma_setup_cycles + 256 / g.tcm_dma_bytes_per_cycle
    vector = 4 * g.simd_op_cycles + g.tcm_latency_cycles  # 64 fp32 = 4 SIMD words
    expected = (g.launch_overhead_cycles + 2 * transfer + vector) / 1.4
    assert result.total_ns == pytest.approx(expected)
    assert result.core_busy_ns[3] == pytest.approx(expected)
    assert result.core_busy_ns[0] == pytest.approx(g.launch_overhead_cycles / 1.4)
