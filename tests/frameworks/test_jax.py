"""Simulated NKI kernels called from JAX: under jax.jit, with custom_vjp gradients, and errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the nkisim[jax] extra (JAX) is not installed")

import jax.numpy as jnp  # noqa: E402

import nkisim  # noqa: E402
import nkisim.jax as nj  # noqa: E402
import nkisim.nki as nki  # noqa: E402
import nkisim.nki.isa as nisa  # noqa: E402
import nkisim.nki.language as nl  # noqa: E402
from nkisim.examples.matmul import matmul_tiled  # noqa: E402
from nkisim.examples.softmax import softmax_rows  # noqa: E402

from .conftest import load_example  # noqa: E402


def _inputs(shape: tuple[int, int], seed: int = 0) -> tuple[jax.Array, jax.Array]:
    key_a, key_b = jax.random.split(jax.random.PRNGKey(seed))
    return jax.random.normal(key_a, shape, jnp.float32), jax.random.normal(key_b, shape, jnp.float32)


def test_seed_jax_forward_example() -> None:
    example = load_example("jax_add")
    a, b = _inputs((256, 1024))
    out = example.forward(a, b)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(a * b * (a + b)))


def test_seed_jax_custom_vjp_example() -> None:
    example = load_example("jax_custom_vjp")
    a, b = _inputs((128, 512), seed=3)
    out, grad_a, grad_b = example.value_and_grads(a, b)
    np.testing.assert_allclose(np.asarray(out), np.asarray(a * b * (a + b)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(grad_a), np.asarray(b * (a + b) + a * b), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(grad_b), np.asarray(a * (a + b) + a * b), rtol=1e-5, atol=1e-5)


def test_call_under_jit_with_bf16_and_shapes_from_tracing() -> None:
    lhs_t = jax.random.normal(jax.random.PRNGKey(5), (256, 128)).astype(jnp.bfloat16)
    rhs = jax.random.normal(jax.random.PRNGKey(6), (256, 512)).astype(jnp.bfloat16)
    lowered = jax.jit(lambda x, y: nj.call(matmul_tiled, x, y)).lower(lhs_t, rhs)
    assert lowered.out_info.shape == (128, 512)
    out = jax.jit(lambda x, y: nj.call(matmul_tiled, x, y))(lhs_t, rhs)
    assert out.dtype == jnp.bfloat16
    expected = (np.asarray(lhs_t, np.float32).T @ np.asarray(rhs, np.float32)).astype(jnp.bfloat16)
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(expected, np.float32), rtol=2**-7, atol=1e-2)


def test_softmax_kernel_inside_a_jax_model() -> None:
    x = jax.random.normal(jax.random.PRNGKey(2), (128, 96))
    with nkisim.collect_profiles() as profiles:
        out = jax.jit(lambda t: nj.call(softmax_rows, t) * 2.0)(x)
        out.block_until_ready()
    np.testing.assert_allclose(np.asarray(out), np.asarray(jax.nn.softmax(x, axis=-1) * 2.0), rtol=1e-5, atol=1e-6)
    assert [p.kernel for p in profiles] == ["softmax_rows"]


@nki.jit
def _mismatched_copy(x):
    out = nl.ndarray((x.shape[0], 2 * x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)  # BAD_LINE
    return out


_BAD_LINE = next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1) if line.endswith("# BAD_LINE"))


def test_illegal_kernel_fails_at_trace_time_naming_its_line() -> None:
    x = jnp.ones((4, 8), jnp.float32)
    with pytest.raises(nkisim.ShapeError, match=rf"test_jax.py:{_BAD_LINE}: nisa.dma_copy .*dst has 64 elements"):
        jax.jit(lambda t: nj.call(_mismatched_copy, t))(x)


@nki.jit
def _scaled_rows(x, factor=1.0, rows=128):
    """Multiplies the first ``rows`` rows by ``factor`` (both static Python values)."""
    out = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[0:rows])
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=factor)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_static_keyword_arguments_reach_the_kernel_as_python_values() -> None:
    x = jnp.asarray(np.arange(128 * 8, dtype=np.float32).reshape(128, 8))

    @jax.jit
    def model(a):
        return nj.call(_scaled_rows, a, factor=3.0, rows=64)

    got = np.asarray(model(x))
    np.testing.assert_array_equal(got, np.asarray(x)[:64] * np.float32(3.0))
    with pytest.raises(TypeError, match=r"nkisim\.jax\.call: got an unexpected keyword argument 'pool_size'"):
        nj.call(_scaled_rows, x, pool_size=2)
