"""Fresh memory is poisoned: never-written SBUF and PSUM bytes read as NaN (all-ones bytes), however the
memory was used before, and a tile's first write leaves the rest of it poisoned.

Every expected value is computed here with numpy or by hand, never by nkisim.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_frontend import store

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl


def rand(*shape, dtype=np.float32):
    return np.random.default_rng(7).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "tfloat32", "float8_e4m3", "float8_e5m2"])
def test_unwritten_sbuf_reads_as_nan(dtype):
    def kernel(x):
        tile = nl.ndarray((128, 16), dtype, buffer=nl.sbuf)
        return store(tile, nl.float32)

    with pytest.warns(nkisim.CheckWarning, match=r"never written.*\[uninitialized-read\]"):
        out = nkisim.run(kernel, [rand(1, 1)], check="warn").outputs
    assert np.isnan(out).all()


def test_unwritten_psum_reads_as_nan():
    def kernel(x):
        acc = nl.ndarray((128, 16), nl.float32, buffer=nl.psum)
        staged = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=staged, src=acc)
        return store(staged)

    with pytest.warns(nkisim.CheckWarning, match=r"PSUM tile .* never written"):
        assert np.isnan(nkisim.run(kernel, [rand(1, 1)], check="warn").outputs).all()


def test_reused_memory_is_poisoned_again():
    def kernel(x):
        # 30 tiles of 8 KiB per partition cycle through trn1's 192 KiB: some land on old bytes.
        results, offsets = [], []
        for _ in range(30):
            tile = nl.ndarray((128, 2048), nl.float32, buffer=nl.sbuf)
            results.append(store(tile[:, 0:8]))
            offsets.append(tile.byte_offset)
            nisa.memset(tile, 1.0)  # a later tile reuses these bytes once this one is dropped
        return results, offsets

    with pytest.warns(nkisim.CheckWarning, match=r"\[uninitialized-read\]"):
        results, offsets = nkisim.run(kernel, [rand(1, 1)], check="warn").outputs
    assert len(set(offsets)) < len(offsets), "no tile reused the bytes of an earlier one"
    for out in results:
        assert np.isnan(out).all()


def test_a_partly_written_fresh_tile_reads_nan_in_the_rest():
    # a first write that covers part of the tile leaves the rest as poisoned as at allocation,
    # even on bytes an earlier tile filled with 1.0
    def kernel(x):
        old = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf, address=(0, 0))
        nisa.memset(old, 1.0)
        del old
        tile = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf, address=(0, 0))
        nisa.memset(tile[:, 0:4], 2.0)
        return store(tile)

    out = nkisim.run(kernel, [rand(1, 1)], check="off").outputs
    assert (out[:, 0:4] == 2.0).all()
    assert np.isnan(out[:, 4:]).all()


def test_a_fresh_tile_overwritten_whole_keeps_only_the_new_values():
    def kernel(x):
        old = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf, address=(0, 0))
        nisa.memset(old, 1.0)
        del old
        tile = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf, address=(0, 0))
        nisa.dma_copy(dst=tile, src=x)
        return store(tile)

    x = rand(128, 16)
    np.testing.assert_array_equal(nkisim.run(kernel, [x]).outputs, x)


def test_device_print_of_a_fresh_tile_shows_its_poison(capsys):
    def kernel(x):
        old = nl.ndarray((2, 3), nl.float32, buffer=nl.sbuf, address=(0, 0))
        nisa.memset(old, 1.0)
        del old
        tile = nl.ndarray((2, 3), nl.float32, buffer=nl.sbuf, address=(0, 0))
        nl.device_print("fresh", tile)
        nisa.memset(tile, 0.0)
        return store(tile)

    nkisim.run(kernel, [rand(1, 1)])
    printed = capsys.readouterr().out
    assert "nan" in printed and "1." not in printed


def test_an_earlier_runs_sbuf_bytes_are_never_seen():
    """SBUF starts as whatever bytes the host gives (often the last run's); every tile is poisoned before use."""

    def fill(x):
        for _ in range(30):  # 30 x 8 KiB per partition: all of trn1's 192 KiB, set to 3.0
            tile = nl.ndarray((128, 2048), nl.float32, buffer=nl.sbuf)
            nisa.memset(tile, 3.0)
        return store(tile[:, 0:8])

    def read_fresh(x):
        outs = []
        for _ in range(24):
            tile = nl.ndarray((128, 2048), nl.float32, buffer=nl.sbuf)
            outs.append(store(tile[:, 2040:2048]))
        placed = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf, address=(0, 100 * 1024))
        outs.append(store(placed))
        return outs

    for _ in range(3):
        assert (nkisim.run(fill, [rand(1, 1)]).outputs == 3.0).all()
        with pytest.warns(nkisim.CheckWarning, match=r"\[uninitialized-read\]"):
            outs = nkisim.run(read_fresh, [rand(1, 1)], check="warn").outputs
        for out in outs:
            assert (out.view(np.uint32) == 0xFFFFFFFF).all()
