"""JAX: ``a * b * (a + b)`` under ``jax.jit`` with the sum done by the simulated NKI kernel.

python examples/jax_add.py
"""

import jax
import jax.numpy as jnp
import numpy as np

from nkisim.examples.tensor_add import nki_tensor_add


@jax.jit
def forward(a: jax.Array, b: jax.Array) -> jax.Array:
    c = nki_tensor_add(a, b)  # a host callback into the simulator
    return a * b * c


if __name__ == "__main__":
    key_a, key_b = jax.random.split(jax.random.PRNGKey(0))
    a = jax.random.normal(key_a, (256, 1024), dtype=jnp.float32)
    b = jax.random.normal(key_b, (256, 1024), dtype=jnp.float32)
    out = forward(a, b)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(a * b * (a + b)))
    print("a * b * (a + b) under jax.jit with the simulated kernel matches JAX:", out.shape)
