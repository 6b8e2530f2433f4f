"""The legacy-API examples give the same outputs and the same simulated time as the current-API ones."""

import numpy as np

import nkisim
from nkisim.examples import matmul, tensor_add
from nkisim.examples.legacy import matmul as legacy_matmul
from nkisim.examples.legacy import tensor_add as legacy_tensor_add
from nkisim.frontend.legacy_launch import run_legacy

RNG = np.random.default_rng(3)


def _same(current, legacy, inputs):
    now = nkisim.run(current, list(inputs))
    old = run_legacy(legacy, tuple(inputs), {})
    assert np.array_equal(now.outputs, old.outputs)
    assert old.total_ns == now.profile.total_ns


def test_tensor_add():
    a, b = (RNG.random((256, 1024), dtype=np.float32) for _ in range(2))
    _same(tensor_add.nki_tensor_add, legacy_tensor_add.nki_tensor_add, (a, b))


def test_matmul_tiled():
    x, y = RNG.random((256, 256), dtype=np.float32), RNG.random((256, 1024), dtype=np.float32)
    _same(matmul.matmul_tiled, legacy_matmul.matmul_tiled, (x, y))
