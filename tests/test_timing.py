"""Timing tests: every expected number is a formula over the documented hw constants.

Formulas (NKI 0.1 "Estimated instruction cost" sections and the DMA guide), with
``N`` the elements per partition and ``MIN_II`` the engine's minimum initiation
interval:

* Vector/Scalar element-wise: ``max(MIN_II, N)`` engine cycles at the engine clock.
* tensor_tensor on Vector, both inputs in SBUF: ``max(MIN_II, 2N)``, except bf16
  add/multiply/subtract (all operands bf16) and one input in PSUM: ``max(MIN_II, N)``.
* tensor_reduce of bf16 with add/max, memset of zero into a 16-bit tile: ``max(MIN_II, N/2)``.
* iota on GpSimd: ``GPSIMD_START + N`` cycles (``GPSIMD_START`` ~150).
* nc_matmul: ``max(min(64, N_stationary), N_moving)`` PE cycles, x4 for fp32, after a
  LoadStationary of ``N_stationary * load_stationary_cycles_per_column`` (x4 for fp32).
* nc_transpose on Tensor: a matmul against an identity: ``max(min(64, F), P)``.
* dma_copy: ``fixed_latency + bytes / (rate x payload_efficiency(run))``, ``rate`` the
  engines serving the on-chip partitions (8 partitions each) x ``bytes_per_ns_per_engine``,
  capped by the HBM bandwidth, ``run`` the shortest contiguous run of either side (in
  elements, in the wider dtype's bytes when the copy casts).
* A compute result is visible ``access_latency_cycles`` after its end (Tensor: at once); a
  consumer on another engine (or DMA queue) than its producer waits one semaphore latency
  more, and one that reads the instruction just before it on its own engine pays
  ``dependent_overhead_cycles`` more.
"""

from __future__ import annotations

import numpy as np
import pytest
from dma_reference import payload_efficiency
from timing_helpers import (
    REL,
    TARGETS,
    P,
    dma_ns,
    load_stationary_ns,
    only,
    profile_of,
    psum,
    sbuf,
)

import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.hw import load_target

# -- single instructions: Vector Engine -----------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n", [512, 2048, 16])
def test_tensor_tensor_two_sbuf_fp32_runs_at_half_rate(target, n):
    hw = load_target(target)

    def kernel():
        a, b, c = sbuf((P, n)), sbuf((P, n)), sbuf((P, n))
        nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.add)

    rec = only(profile_of(kernel, target=target))
    assert (rec.opcode, rec.engine) == ("tensor_tensor", "Vector")
    expected = max(hw.vector.min_ii_cycles, 2 * n) / hw.vector.clock_ghz
    assert rec.end_ns == pytest.approx(expected, rel=REL)


def test_tensor_tensor_128x512_fp32_matches_the_worked_example():
    hw = load_target("trn1")

    def kernel():
        a, b, c = sbuf((P, 512)), sbuf((P, 512)), sbuf((P, 512))
        nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.multiply)

    rec = only(profile_of(kernel))
    assert hw.vector.clock_ghz == 1.12 and hw.vector.min_ii_cycles == 64
    assert rec.end_ns == pytest.approx(max(64, 2 * 512) / 1.12, rel=REL)


@pytest.mark.parametrize(
    ("dtype", "op", "data2_buffer", "cycles_per_element"),
    [
        # bf16 add/multiply/subtract with both inputs in SBUF: the fast path.
        (nl.bfloat16, nl.add, nl.sbuf, 1),
        (nl.bfloat16, nl.multiply, nl.sbuf, 1),
        (nl.bfloat16, nl.subtract, nl.sbuf, 1),
        # bf16 but another operator: still the slow path.
        (nl.bfloat16, nl.maximum, nl.sbuf, 2),
        # fp32 with both inputs in SBUF: slow path.
        (nl.float32, nl.subtract, nl.sbuf, 2),
        # one input in PSUM: the fast path whatever the dtype and operator.
        (nl.float32, nl.add, nl.psum, 1),
        (nl.float32, nl.maximum, nl.psum, 1),
    ],
)
def test_tensor_tensor_fast_and_slow_paths(dtype, op, data2_buffer, cycles_per_element):
    hw = load_target("trn1")
    n = 512

    def kernel():
        a = sbuf((P, n), dtype)
        b = nl.ndarray((P, n), dtype=dtype, buffer=data2_buffer)
        c = sbuf((P, n), dtype)
        nisa.tensor_tensor(dst=c, data1=a, data2=b, op=op)

    rec = only(profile_of(kernel))
    assert rec.engine == "Vector"
    expected = max(hw.vector.min_ii_cycles, cycles_per_element * n) / hw.vector.clock_ghz
    assert rec.end_ns == pytest.approx(expected, rel=REL)


def test_tensor_tensor_fast_path_needs_bf16_output_too():
    """The bf16 fast path is for all-bf16 operands; a float32 dst makes it the 2N path."""
    hw = load_target("trn1")
    n = 512

    def kernel():
        a, b = sbuf((P, n), nl.bfloat16), sbuf((P, n), nl.bfloat16)
        c = sbuf((P, n), nl.float32)
        nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.add)

    rec = only(profile_of(kernel))
    assert rec.end_ns == pytest.approx(max(hw.vector.min_ii_cycles, 2 * n) / hw.vector.clock_ghz, rel=REL)


@pytest.mark.parametrize("n", [512, 100, 10])
@pytest.mark.parametrize("engine", ["vector", "scalar"])
def test_tensor_scalar(n, engine):
    hw = load_target("trn1")
    cfg = hw.vector if engine == "vector" else hw.scalar

    def kernel():
        x, y = sbuf((P, n)), sbuf((P, n))
        kwargs = {} if engine == "vector" else {"engine": nisa.scalar_engine}
        nisa.tensor_scalar(dst=y, data=x, op0=nl.multiply, operand0=2.0, op1=nl.add, operand1=1.0, **kwargs)

    rec = only(profile_of(kernel))
    assert rec.engine == engine.title()
    assert rec.end_ns == pytest.approx(max(cfg.min_ii_cycles, n) / cfg.clock_ghz, rel=REL)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n", [1024, 30])
def test_activation(target, n):
    hw = load_target(target)

    def kernel():
        x, y = sbuf((P, n)), sbuf((P, n))
        nisa.activation(dst=y, op=nl.exp, data=x)

    rec = only(profile_of(kernel, target=target))
    assert (rec.opcode, rec.engine) == ("activation", "Scalar")
    # the exp table is loaded first: no table is loaded when the kernel starts
    expected = hw.scalar.table_load_ns + max(hw.scalar.min_ii_cycles, n) / hw.scalar.clock_ghz
    assert rec.end_ns == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize(
    ("dtype", "op", "n", "cycles"),
    [
        (nl.float32, nl.add, 512, lambda mii, n: max(mii, n)),
        (nl.float32, nl.maximum, 512, lambda mii, n: max(mii, n)),
        (nl.bfloat16, nl.add, 512, lambda mii, n: max(mii, n / 2)),
        (nl.bfloat16, nl.maximum, 512, lambda mii, n: max(mii, n / 2)),
        (nl.bfloat16, nl.multiply, 512, lambda mii, n: max(mii, n)),
        # N/2 below MIN_II: the floor wins.
        (nl.bfloat16, nl.add, 100, lambda mii, n: max(mii, n / 2)),
    ],
)
def test_tensor_reduce(dtype, op, n, cycles):
    hw = load_target("trn1")

    def kernel():
        x, r = sbuf((P, n), dtype), sbuf((P, 1), dtype)
        nisa.tensor_reduce(dst=r, op=op, data=x, axis=1)

    rec = only(profile_of(kernel))
    assert (rec.opcode, rec.engine) == ("tensor_reduce", "Vector")
    assert rec.end_ns == pytest.approx(cycles(hw.vector.min_ii_cycles, n) / hw.vector.clock_ghz, rel=REL)


@pytest.mark.parametrize(
    ("dtype", "value", "elements_per_cycle"),
    [
        (nl.float32, 1.0, 1),
        (nl.float32, 0, 1),  # zero, but not a 16-bit type
        (nl.bfloat16, 0, 2),
        (nl.float16, 0, 2),
        (nl.bfloat16, 3.0, 1),  # 16-bit, but not zero
    ],
)
def test_memset(dtype, value, elements_per_cycle):
    hw = load_target("trn1")
    n = 1024

    def kernel():
        nisa.memset(dst=sbuf((P, n), dtype), value=value)

    rec = only(profile_of(kernel))
    assert (rec.opcode, rec.engine) == ("memset", "Vector")
    expected = max(hw.vector.min_ii_cycles, n / elements_per_cycle) / hw.vector.clock_ghz
    assert rec.end_ns == pytest.approx(expected, rel=REL)


def test_nl_zeros_on_chip_is_a_memset_of_zero():
    hw = load_target("trn1")

    def kernel():
        nl.zeros((P, 256), dtype=nl.bfloat16, buffer=nl.sbuf)

    rec = only(profile_of(kernel))
    assert rec.opcode == "memset"
    assert rec.end_ns == pytest.approx(max(hw.vector.min_ii_cycles, 256 / 2) / hw.vector.clock_ghz, rel=REL)


# -- single instructions: GpSimd Engine -----------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_iota_pays_gpsimd_startup(target):
    hw = load_target(target)
    n = 512

    def kernel():
        nisa.iota(dst=sbuf((P, n), nl.int32), pattern=[[1, n]], offset=0)

    rec = only(profile_of(kernel, target=target))
    assert (rec.opcode, rec.engine) == ("iota", "GpSimd")
    assert hw.gpsimd.startup_cycles == 150
    expected = (hw.gpsimd.startup_cycles + n) / hw.gpsimd.clock_ghz
    assert rec.end_ns == pytest.approx(expected, rel=REL)


def test_iota_small_tile_is_startup_plus_n():
    hw = load_target("trn1")
    n = 32

    def kernel():
        nisa.iota(dst=sbuf((P, n), nl.int32), pattern=[[1, n]], offset=0)

    rec = only(profile_of(kernel))
    assert rec.end_ns == pytest.approx((hw.gpsimd.startup_cycles + n) / hw.gpsimd.clock_ghz, rel=REL)


# -- single instructions: Tensor Engine -----------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    ("m", "n"),
    [
        (128, 512),  # moving-bound
        (128, 100),
        (128, 32),  # N_moving < 64: the min(64, N_stationary) floor
        (16, 8),  # both small: the floor is N_stationary
        (16, 40),
        (64, 64),
    ],
)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_nc_matmul(target, m, n, dtype):
    hw = load_target(target)
    dt = getattr(nl, dtype)

    def kernel():
        stationary, moving = sbuf((P, m), dt), sbuf((P, n), dt)
        nisa.nc_matmul(dst=psum((m, n)), stationary=stationary, moving=moving)

    prof = profile_of(kernel, target=target)
    (rec,) = prof.instructions
    assert (rec.opcode, rec.engine) == ("nc_matmul", "Tensor")
    cycles = max(min(hw.tensor.matmul_min_ii_cycles, m), n)
    if dtype == "float32":
        cycles *= hw.tensor.fp32_cycle_factor
    # the stationary tile is loaded first (nothing to overlap with), then the matmul runs
    assert rec.start_ns == pytest.approx(load_stationary_ns(hw, m, fp32=dtype == "float32"), rel=REL)
    assert rec.duration_ns == pytest.approx(cycles / hw.tensor.clock_ghz, rel=REL)
    assert prof.total_ns == rec.end_ns
    assert rec.flops == 2 * P * m * n


def test_nc_matmul_fp32_is_four_times_bf16():
    hw = load_target("trn1")
    times = {}
    for name in ("bfloat16", "float32"):
        dt = getattr(nl, name)

        def kernel(dt=dt):
            nisa.nc_matmul(dst=psum((P, 512)), stationary=sbuf((P, P), dt), moving=sbuf((P, 512), dt))

        (rec,) = profile_of(kernel).instructions
        times[name] = rec.duration_ns
    assert times["bfloat16"] == pytest.approx(512 / 2.8, rel=REL)
    assert times["float32"] / times["bfloat16"] == pytest.approx(hw.tensor.fp32_cycle_factor, rel=REL)


@pytest.mark.parametrize(("p", "f"), [(128, 32), (32, 128), (16, 8), (128, 128)])
def test_nc_transpose_on_tensor_engine(p, f):
    """An SBUF -> PSUM transpose is a matmul of data (stationary) against a [P, P] identity (moving)."""
    hw = load_target("trn1")

    def kernel():
        data = sbuf((p, f), nl.bfloat16)
        nisa.nc_transpose(dst=psum((f, p), nl.bfloat16), data=data)

    rec = only(profile_of(kernel))
    assert (rec.opcode, rec.engine) == ("nc_transpose", "Tensor")
    cycles = max(min(hw.tensor.matmul_min_ii_cycles, f), p)
    assert rec.end_ns == pytest.approx(cycles / hw.tensor.clock_ghz, rel=REL)


# -- single instructions: DMA ---------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((P, 512), np.float32), ((64, 100), nl.bfloat16), ((P, 2048), np.float32), ((1, 16), np.int8)],
)
def test_dma_copy_hbm_to_sbuf(target, shape, dtype):
    hw = load_target(target)

    def kernel(a):
        nisa.dma_copy(dst=sbuf(a.shape, a.dtype), src=a)

    rec = only(profile_of(kernel, [np.zeros(shape, dtype=dtype)], target=target))
    assert (rec.opcode, rec.engine) == ("dma_copy", "DMA q0")
    partitions, per_partition = shape[0], shape[1] * np.dtype(dtype).itemsize
    nbytes = partitions * per_partition
    assert rec.bytes == nbytes
    # the SBUF side's packets are one partition's row; the engines are those of its partitions
    engines = -(-partitions // hw.dma.partitions_per_engine)
    rate = min(engines * hw.dma.bytes_per_ns_per_engine, hw.hbm.bandwidth_bytes_per_ns)
    expected = hw.dma.fixed_latency_ns + nbytes / (rate * payload_efficiency(hw, per_partition))
    assert rec.end_ns == pytest.approx(expected, rel=REL)
    assert hw.dma.bytes_per_ns == pytest.approx(hw.dma.engines * hw.dma.bytes_per_ns_per_engine, rel=REL)


def test_dma_copy_128x512_fp32_on_trn1_by_the_numbers():
    hw = load_target("trn1")
    assert (hw.dma.fixed_latency_ns, hw.dma.engines, hw.dma.bytes_per_ns_per_engine) == (1300.0, 16, 17.0)

    def kernel(a):
        nisa.dma_copy(dst=sbuf((P, 512)), src=a)

    assert (hw.dma.partitions_per_engine, hw.hbm.bandwidth_bytes_per_ns) == (8, 410.0)
    assert (2048, 0.80) in hw.dma.payload_efficiency  # 2 KiB packets: 80% of the nominal rate

    rec = only(profile_of(kernel, [np.zeros((P, 512), np.float32)]))
    # 128 partitions: all 16 engines at 17 B/ns (272 < 410 B/ns of HBM); 512 x 4 = 2 KiB per packet
    assert rec.end_ns == pytest.approx(1300.0 + P * 512 * 4 / (16 * 17.0 * 0.80), rel=REL)


def test_dma_copy_sbuf_to_hbm():
    hw = load_target("trn1")

    def kernel():
        out = nl.ndarray((P, 256), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=sbuf((P, 256)))
        return out

    rec = only(profile_of(kernel))
    assert rec.end_ns == pytest.approx(dma_ns(hw, P * 256 * 4, run=256 * 4), rel=REL)
