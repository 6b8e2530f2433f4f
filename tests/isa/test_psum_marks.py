"""PSUM writes of matmuls through views of one tile and through two tiles placed at the same address.

The rule (``nisa.nc_matmul``, ``accumulate=None``): a matmul adds where its own tile's matmuls wrote
before and overwrites elsewhere; ``True`` always adds, ``False`` always overwrites. The reference
below follows it element by element over small integers, whose products and sums float32 holds
exactly, so results are compared bit for bit, in a run and in replays of a compiled program.
"""

from __future__ import annotations

import numpy as np
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
