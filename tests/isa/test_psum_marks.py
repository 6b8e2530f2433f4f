"""PSUM writes of matmuls through views of one tile and through two tiles placed at the same address.

The rule (``nisa.nc_matmul``, ``accumulate=None``): a matmul adds where its own tile's matmuls wrote
before and overwrites elsewhere; ``True`` always adds, ``False`` always overwrites. The reference
below follows it element by element over small integers, whose products and sums float32 holds
exactly, so results are compared bit for bit, in a run and in replays of a compiled program.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nkisim
import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl

from .conftest import FAST, assert_bits_equal, load, seeds

K, M, N = 8, 4, 6
#: The columns of the [M, 2N] PSUM tile each view covers.
VIEWS = {"whole": slice(0, 2 * N), "left": slice(0, N), "right": slice(N, 2 * N)}

steps_strategy = st.lists(
    st.tuples(st.sampled_from([0, 1]), st.sampled_from(sorted(VIEWS)), st.sampled_from([None, True, False])),
    min_size=1,
    max_size=8,
)


def _kernel(steps):
    @nki.jit
    def kernel(stationary, moving):
        # two tiles at one address: their matmuls write the same bytes, each under its own mark
        tiles = [nl.ndarray((M, 2 * N), dtype=nl.float32, buffer=nl.psum, address=(0, 0)) for _ in range(2)]
        for i, (tile, view, accumulate) in enumerate(steps):
            cols = VIEWS[view]
            width = cols.stop - cols.start
            nisa.nc_matmul(
                dst=tiles[tile][:, cols],
                stationary=load(stationary[i]),
                moving=load(moving[i][:, :width]),
                accumulate=accumulate,
            )
        out = nl.ndarray((M, 2 * N), dtype=nl.float32, buffer=nl.shared_hbm)
        result = nl.ndarray((M, 2 * N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=result, src=tiles[0])
        nisa.dma_copy(dst=out, src=result)
        return out

    return kernel


def _expected(steps, stationary, moving):
    values = np.full((M, 2 * N), 0xFFFFFFFF, np.uint32).view(np.float32)  # the poison of new tiles: all-ones NaN
    owner = np.zeros((M, 2 * N), int)
    for i, (tile, view, accumulate) in enumerate(steps):
        cols = VIEWS[view]
        product = stationary[i].T @ moving[i][:, : cols.stop - cols.start]
        adds = np.full(product.shape, accumulate) if accumulate is not None else owner[:, cols] == tile + 1
        values[:, cols] = np.where(adds, values[:, cols] + product, product)
        owner[:, cols] = tile + 1
    return values


def _inputs(rng, count):
    stationary = rng.integers(-3, 4, (count, K, M)).astype(np.float32)
    moving = rng.integers(-3, 4, (count, K, 2 * N)).astype(np.float32)
    return stationary, moving


@FAST
@given(steps=steps_strategy, seed=seeds)
def test_matmul_writes_through_views_and_aliased_tiles_follow_the_owner_rule(steps, seed):
    rng = np.random.default_rng(seed)
    kernel = _kernel(steps)
    first = _inputs(rng, len(steps))
    assert_bits_equal(nkisim.run(kernel, list(first), target="trn2", check="off").outputs, _expected(steps, *first))
    prog = nkisim.compile(kernel, list(first), target="trn2", check="off")
    for _ in range(2):  # replays start from cleared marks, whatever the compiling run left
        again = _inputs(rng, len(steps))
        assert_bits_equal(prog(list(again)).outputs, _expected(steps, *again))


def _two_matmuls_into_one_tile(k, m, n):
    @nki.jit
    def kernel(first, second, moving):
        acc = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=load(first), moving=load(moving))
        nisa.nc_matmul(dst=acc, stationary=load(second), moving=load(moving))  # adds: the same view, its own marks
        result = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=result, src=acc)
        out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=result)
        return out

    return kernel


@pytest.mark.parametrize(("m", "n"), [(1, 1), (4, 3), (8, 17), (128, 7), (16, 64)])
def test_the_sum_of_two_nans_keeps_the_accumulators_payload_whatever_the_tile_shape(m, n):
    """x86 addition of two NaNs returns the first operand's: the accumulator's, as a one-pass add gives it."""
    first = np.full((1, m), 0x7FC00001, np.uint32).view(np.float32)
    second = np.full((1, m), 0x7FC00002, np.uint32).view(np.float32)
    out = nkisim.run(_two_matmuls_into_one_tile(1, m, n), [first, second, np.ones((1, n), np.float32)], check="off")
    assert set(out.outputs.view(np.uint32).reshape(-1).tolist()) == {0x7FC00001}


def test_an_accumulation_that_overflows_gives_infinity_without_a_warning():
    stationary, moving = np.full((4, 4), 1e19, np.float32), np.full((4, 4), 0.5e19, np.float32)  # 2e38 per matmul
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = nkisim.run(_two_matmuls_into_one_tile(4, 4, 4), [stationary, stationary, moving], check="off")
    assert np.isposinf(out.outputs).all()
