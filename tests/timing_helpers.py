"""Expected-time formulas over the hardware numbers, shared by the timing tests."""

from __future__ import annotations

from dma_reference import payload_efficiency

import nkisim
import nkisim.nki.language as nl

REL = 1e-9
TARGETS = ("trn1", "trn2", "trn3")
P = 128


def profile_of(kernel, inputs=(), target="trn1"):
    return nkisim.run(kernel, list(inputs), target=target).profile


def only(profile):
    """The one instruction of a single-instruction kernel, checked to start at time zero."""
    (rec,) = profile.instructions
    assert rec.start_ns == 0.0
    assert profile.total_ns == rec.end_ns
    return rec


def dma_bandwidth(hw, partitions=P, hbm=True):
    """DMA rate in bytes/ns: 8 partitions per DMA engine, capped by HBM bandwidth when HBM is involved."""
    engines = -(-partitions // hw.dma.partitions_per_engine)
    rate = engines * hw.dma.bytes_per_ns_per_engine
    return min(rate, hw.hbm.bandwidth_bytes_per_ns) if hbm else rate


def dma_busy(hw, nbytes, run, partitions=P, hbm=True):
    """Time a transfer occupies each DMA engine it uses."""
    return nbytes / (dma_bandwidth(hw, partitions, hbm) * payload_efficiency(hw, run))


def dma_ns(hw, nbytes, run, partitions=P, hbm=True):
    return hw.dma.fixed_latency_ns + dma_busy(hw, nbytes, run, partitions, hbm)


def access_ns(hw, engine):
    """SBUF/PSUM access latency after a compute instruction on ``engine`` (``"vector"``, ...)."""
    cfg = getattr(hw, engine)
    return cfg.access_latency_cycles / cfg.clock_ghz


def dependent_ns(hw, engine):
    """Static overhead of reading the result of the instruction just before on the same engine."""
    cfg = getattr(hw, engine)
    return cfg.dependent_overhead_cycles / cfg.clock_ghz


def load_stationary_ns(hw, m, fp32=False):
    """LoadStationary of an ``m``-column stationary tile, in PE cycles at the PE clock."""
    factor = hw.tensor.fp32_cycle_factor if fp32 else 1
    return m * hw.tensor.load_stationary_cycles_per_column * factor / hw.tensor.clock_ghz


def sbuf(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


def psum(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.psum)
