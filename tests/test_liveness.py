"""Compiler-style liveness: kernels that fit only when a tile's bytes are reused after its last use."""

from __future__ import annotations

import re

import numpy as np
import pytest

import nkisim
import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.errors import CapacityError, TargetError
from nkisim.hw import load_target

TARGETS = ["trn1", "trn2", "trn3"]


def _quarter_sbuf_floats(target: str) -> int:
    """fp32 elements per partition in a tile a little over a quarter of SBUF."""
    return load_target(target).sbuf.bytes_per_partition // 4 // 4 + 16


@pytest.mark.parametrize("target", TARGETS)
def test_tiles_held_in_a_list_are_freed_after_their_last_use(target):
    """Six tiles of over a quarter of SBUF each, all kept in a list: only compiler liveness fits them."""
    cols = _quarter_sbuf_floats(target)
    count = 6

    def kernel():
        out = nl.ndarray((count, 128, cols), nl.float32, buffer=nl.shared_hbm)
        tiles = []
        for i in range(count):
            t = nl.ndarray((128, cols), nl.float32, buffer=nl.sbuf)
            tiles.append(t)  # still reachable from Python after its last use below
            nisa.memset(dst=t, value=float(i + 1))
            nisa.dma_copy(dst=out[i], src=t)
        return out

    result = nkisim.run(kernel, [], target=target)
    expected = np.broadcast_to(np.arange(1, count + 1, dtype=np.float32)[:, None, None], (count, 128, cols))
    np.testing.assert_array_equal(result.outputs, expected)
    assert [r.opcode for r in result.profile.instructions] == ["memset", "dma_copy"] * count  # one run's timeline


@pytest.mark.parametrize("target", TARGETS)
def test_an_automatic_tile_is_placed_around_a_later_explicit_one(target):
    """The automatic tile is made first and is still used after the explicit tile takes bytes 0.. ."""

    def kernel(a):
        auto = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)  # eagerly placed at byte 0
        nisa.dma_copy(dst=auto, src=a)
        placed = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf, address=(0, 0))
        nisa.tensor_scalar(dst=placed, data=auto, op0=nl.multiply, operand0=2.0)
        nisa.tensor_tensor(dst=placed, data1=placed, data2=auto, op=nl.add)  # auto must have survived
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=placed)
        return out

    a = np.random.default_rng(3).standard_normal((128, 64)).astype(np.float32)
    result = nkisim.run(kernel, [a], target=target)
    np.testing.assert_array_equal(result.outputs, a * np.float32(2) + a)


def test_a_kernel_that_needs_more_than_sbuf_at_once_and_may_not_spill_fails_with_the_eager_message():
    cols = _quarter_sbuf_floats("trn1")

    def kernel():
        tiles = [nl.ndarray((128, cols), nl.float32, buffer=nl.sbuf) for _ in range(4)]
        for t in tiles:
            nisa.memset(dst=t, value=1.0)
        for t in tiles:  # every tile is used again at the end: all four are live together
            nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)

    with pytest.raises(CapacityError, match=r"test_liveness\.py:\d+: SBUF is full: cannot allocate"):
        nkisim.run(nki.jit(kernel, spill=False), [], target="trn1")


def test_a_kernel_that_allocates_differently_each_run_keeps_the_eager_error():
    cols = _quarter_sbuf_floats("trn1")
    runs = []

    def kernel():
        runs.append(1)
        shape = (128, cols + len(runs))  # not deterministic: the plan does not apply
        tiles = [nl.ndarray(shape, nl.float32, buffer=nl.sbuf) for _ in range(4)]
        for t in tiles:
            nisa.memset(dst=t, value=1.0)

    with pytest.raises(CapacityError, match="SBUF is full"):
        nkisim.run(kernel, [], target="trn1")
    assert len(runs) == 3  # eager, recording, planned


def _six_quarter_tiles_then(last_step):
    """A kernel that fits only with compiler liveness (six quarter-SBUF tiles kept in a list), then ``last_step``."""
    cols = _quarter_sbuf_floats("trn1")

    def kernel():
        tiles = []
        for i in range(6):
            t = nl.ndarray((128, cols), nl.float32, buffer=nl.sbuf)
            tiles.append(t)
            nisa.memset(dst=t, value=float(i + 1))
        last_step(tiles)

    return kernel


def test_an_error_the_kernel_reaches_after_the_eager_run_stopped_is_the_one_raised():
    """NKI traces the whole kernel before it allocates: its refusal of the instruction is what it reports."""

    def scalar_copy(tiles):
        small = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=small, src=tiles[0][:, :64], engine=nisa.scalar_engine)  # refused on trn1

    with pytest.raises(TargetError) as info:
        nkisim.run(_six_quarter_tiles_then(scalar_copy), [], target="trn1")
    message = str(info.value)
    assert re.search(r"test_liveness\.py:\d+: nisa\.tensor_copy \[Scalar, trn1\]: .*needs NeuronCore-v3", message)
    (note,) = info.value.__notes__
    assert "tiles freed after their last use" in note
    assert re.search(r"a first run had stopped earlier at .*test_liveness\.py:\d+: SBUF is full: cannot allocate", note)


def test_a_kernel_assert_after_the_eager_run_stopped_is_raised_as_the_kernel_raised_it():
    def check(tiles):
        assert len(tiles) < 6, "the kernel's own limit"

    with pytest.raises(AssertionError, match="the kernel's own limit") as info:
        nkisim.run(_six_quarter_tiles_then(check), [], target="trn1")
    assert info.value.__suppress_context__  # its traceback is the kernel's, not also the first run's
