"""JAX gradients through a simulated NKI kernel with ``jax.custom_vjp``.

python examples/jax_custom_vjp.py
"""

import jax
import jax.numpy as jnp
import numpy as np

from nkisim.examples.tensor_add import nki_tensor_add


@jax.custom_vjp
def simulated_add(a: jax.Array, b: jax.Array) -> jax.Array:
    return nki_tensor_add(a, b)


def _forward(a: jax.Array, b: jax.Array) -> tuple[jax.Array, None]:
    return simulated_add(a, b), None


def _backward(residual: None, grad: jax.Array) -> tuple[jax.Array, jax.Array]:
    return grad, grad


simulated_add.defvjp(_forward, _backward)


@jax.jit
def value_and_grads(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """a * b * (a + b), and the gradients of its sum with respect to a and b."""
    out = simulated_add(a, b) * a * b
    grad_a, grad_b = jax.grad(lambda x, y: (simulated_add(x, y) * x * y).sum(), argnums=(0, 1))(a, b)
    return out, grad_a, grad_b


if __name__ == "__main__":
    key_a, key_b = jax.random.split(jax.random.PRNGKey(1))
    a = jax.random.normal(key_a, (256, 1024), dtype=jnp.float32)
    b = jax.random.normal(key_b, (256, 1024), dtype=jnp.float32)
    out, grad_a, grad_b = value_and_grads(a, b)
    np.testing.assert_allclose(np.asarray(grad_a), np.asarray(b * (a + b) + a * b), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(grad_b), np.asarray(a * (a + b) + a * b), rtol=1e-5, atol=1e-5)
    print("custom_vjp gradients through the simulated kernel match the analytic ones")
