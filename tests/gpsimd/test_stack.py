"""Stack placement: fast local memory up to ~8 KB, NeuronCore memory when declared larger, 400 KB at most."""

from __future__ import annotations

import numpy as np
import pytest

from nkisim import gpsimd
from tests.gpsimd.kernels import library

F32 = np.float32


def stack_sum(floats: int):
    """A kernel with a local array of ``floats`` fp32 on its stack, summed into the output."""

    def kernel(ctx, t):
        local = ctx.stack_array((floats,), np.float32)
        local[:] = 1.0
        total = np.sum(local)
        out = ctx.get_dst_tensor()
        out.fill_(total)
        return out

    return kernel


def test_under_8kb_runs_in_local_memory() -> None:
    result = gpsimd.run(library("stack_small", stack_sum(1024)), [np.zeros(2, F32)])  # 4 KB
    assert np.array_equal(result.outputs, [1024.0, 1024.0])
    assert result.stack_bytes == {0: 4096}


def test_over_8kb_undeclared_overflows() -> None:
    with pytest.raises(gpsimd.GpsimdStackOverflow) as info:
        gpsimd.run(library("stack_over", stack_sum(2100)), [np.zeros(2, F32)])  # 8400 bytes
    text = str(info.value)
    assert text.startswith("test_stack.py:")  # the line that allocated the array
    assert "GPSIMD stack overflow: 8400 bytes in use" in text
    assert "8192-byte stack in fast local memory" in text and "-DSTACK_SIZE" in text
    assert "[core 0]" in text


def test_growth_past_8kb_counts_every_live_array() -> None:
    def two(ctx, t):
        a = ctx.stack_array((1500,), np.float32)  # 6000 bytes
        b = ctx.stack_array((1000,), np.float32)  # + 4000
        return ctx.get_dst_tensor().fill_(float(a.size + b.size))

    with pytest.raises(gpsimd.GpsimdStackOverflow, match="10000 bytes in use"):
        gpsimd.run(library("stack_two", two), [np.zeros(1, F32)])


def test_stack_is_released_when_a_function_returns() -> None:
    def helper(ctx) -> float:
        scratch = ctx.stack_array((1500,), np.float32)  # 6000 bytes while helper runs
        return float(scratch.size)

    def calls(ctx, t):
        total = sum(helper(ctx) for _ in range(5))
        return ctx.get_dst_tensor().fill_(total)

    result = gpsimd.run(library("stack_calls", calls), [np.zeros(1, F32)])
    assert result.outputs[0] == 7500.0 and result.stack_bytes == {0: 6000}


def test_declared_20kb_runs_in_neuroncore_memory_and_is_slower() -> None:
    big = gpsimd.run(library("stack_big", stack_sum(3000), extra_cflags=["-DSTACK_SIZE=20000"]), [np.zeros(2, F32)])
    assert np.array_equal(big.outputs, [3000.0, 3000.0])
    assert big.stack_bytes == {0: 12000}
    # the same 4 KB kernel: local stack vs NeuronCore-memory stack
    local = gpsimd.run(library("stack_l", stack_sum(1024)), [np.zeros(2, F32)])
    remote = gpsimd.run(library("stack_r", stack_sum(1024), extra_cflags=["-DSTACK_SIZE=20000"]), [np.zeros(2, F32)])
    g = local.profile.hw.gpsimd_cores

    def stack_ns(result: gpsimd.GpsimdResult) -> float:
        return sum(r.duration_ns for r in result.profile.instructions if r.opcode == "stack_access")

    # 1024 fp32 = 64 SIMD words, touched twice (the fill and the sum)
    assert stack_ns(local) == pytest.approx(2 * 64 * g.local_stack_access_cycles / 1.4)
    assert stack_ns(remote) == pytest.approx(2 * 64 * g.remote_stack_access_cycles / 1.4)
    assert remote.total_ns > local.total_ns


def test_declared_small_stack_stays_local() -> None:
    op = library("stack_decl_small", stack_sum(1024), extra_cflags=["-DSTACK_SIZE=4096"])
    result = gpsimd.run(op, [np.zeros(1, F32)])
    stack = [r for r in result.profile.instructions if r.opcode == "stack_access"]
    assert sum(r.duration_ns for r in stack) == pytest.approx(2 * 64 * 1 / 1.4)


def test_declared_stack_is_a_limit_in_neuroncore_memory() -> None:
    op = library("stack_decl_over", stack_sum(6000), extra_cflags=["-DSTACK_SIZE=20000"])  # 24000 bytes
    with pytest.raises(gpsimd.GpsimdStackOverflow) as info:
        gpsimd.run(op, [np.zeros(1, F32)])
    assert "24000 bytes in use" in str(info.value) and "20000-byte stack in NeuronCore memory" in str(info.value)


def test_declared_500kb_fails_to_load() -> None:
    with pytest.raises(gpsimd.GpsimdLoadError) as info:
        gpsimd.Library("stack_huge", extra_cflags=["-DSTACK_SIZE=500000"])
    text = str(info.value)
    assert text.startswith("test_stack.py:") and "fails to load" in text and "409600" in text


def test_declared_400kb_loads() -> None:
    assert gpsimd.Library("stack_max", extra_cflags=["-DSTACK_SIZE=409600"]).stack_size == 409600
