"""The NEFF execution's start-up and tear-down (``hw.launch``): published readings and their effect.

A device profile of one NEFF execution starts before the kernel's first instruction and ends
after its last ("every NEFF execution involves certain start-up and tear-down overhead",
NKI fused Mamba tutorial). nkisim's kernel timeline (``Profile.total_ns``) starts at the
kernel's first instruction; ``Profile.device_ns`` adds the two.
"""

from __future__ import annotations

import numpy as np
import pytest

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.hw import load_target

# https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/guides/tutorials/fused_mamba.html
# Profile of mamba_v1 on trn1 (figure mamba_v1_profile): the execution takes 172.93 us, the
# kernel's first DMA transfer starts at 12.7 us and its last (the output store) ends at 168.4 us.
MAMBA_TOTAL_NS = 172_930.0
MAMBA_FIRST_TRANSFER_NS = 12_700.0
MAMBA_LAST_TRANSFER_END_NS = 168_400.0
# https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/get-started/about/nki-dma-overview.html
# Example 1 on trn2 (figure nki-dma-intro-3): the load's transfer runs from 23,283 ns to 24,699 ns.
DMA_EXAMPLE1_FIRST_TRANSFER_NS = 23_283.0
# The same page: "~1300 ns" from the trigger to the start of a transfer.
TRIGGER_LATENCY_NS = 1300.0


def test_trn1_launch_is_read_off_the_mamba_tutorial_profile():
    launch = load_target("trn1").launch
    assert launch.startup_ns == pytest.approx(MAMBA_FIRST_TRANSFER_NS - TRIGGER_LATENCY_NS, abs=50)
    assert launch.teardown_ns == pytest.approx(MAMBA_TOTAL_NS - MAMBA_LAST_TRANSFER_END_NS, abs=50)


def test_trn2_startup_is_read_off_the_dma_overview_profile():
    launch = load_target("trn2").launch
    assert launch.startup_ns == pytest.approx(DMA_EXAMPLE1_FIRST_TRANSFER_NS - TRIGGER_LATENCY_NS, abs=50)
    # no NeuronCore-v3 profile shows the end of an execution: trn1's tear-down is reused
    assert launch.teardown_ns == load_target("trn1").launch.teardown_ns


def test_trn3_reuses_trn2():
    assert load_target("trn3").launch == load_target("trn2").launch


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_device_time_is_the_kernel_plus_startup_and_teardown(target):
    """The DMA overview's Example 1 load: A[4, 4096] bf16 (32 KiB) on 4 partitions, one DMA engine."""
    hw = load_target(target)

    def kernel(a):
        nisa.dma_copy(dst=nl.ndarray((4, 4096), dtype=nl.bfloat16, buffer=nl.sbuf), src=a)

    profile = nkisim.run(kernel, [np.zeros((4, 4096), dtype=nl.bfloat16)], target=target).profile
    # one engine serves partitions 0-7; 8 KiB contiguous per partition runs at the full engine rate
    kernel_ns = TRIGGER_LATENCY_NS + 4 * 4096 * 2 / hw.dma.bytes_per_ns_per_engine
    assert profile.total_ns == pytest.approx(kernel_ns, rel=1e-9)
    # the readings: trn1's start-up from the mamba profile, NeuronCore-v3's from the DMA overview; one tear-down
    first_transfer = MAMBA_FIRST_TRANSFER_NS if target == "trn1" else DMA_EXAMPLE1_FIRST_TRANSFER_NS
    launch_ns = first_transfer - TRIGGER_LATENCY_NS + MAMBA_TOTAL_NS - MAMBA_LAST_TRANSFER_END_NS
    assert profile.launch_overhead_ns == pytest.approx(launch_ns, abs=100)
    assert profile.device_ns == pytest.approx(kernel_ns + profile.launch_overhead_ns, rel=1e-9)


def test_the_kernel_timeline_starts_at_its_first_instruction():
    def kernel():
        nisa.memset(dst=nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf), value=0.0)

    profile = nkisim.run(kernel, [], target="trn2").profile
    (rec,) = profile.instructions
    assert rec.start_ns == 0.0
    assert profile.total_ns == rec.end_ns
