"""A GPSIMD custom operator that negates a tensor, with the standard element accessor.

The shape function says the output is a 1-D float tensor with as many elements as the input;
the kernel makes that tensor and writes ``-x`` element by element.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import nkisim.gpsimd as gpsimd

negate_lib = gpsimd.Library("negate_ops")


@negate_lib.shape("tensor_negate")
def tensor_negate_shape(t_in: gpsimd.ShapeTensor) -> gpsimd.ShapeTensor:
    """One float output element per input element."""
    return gpsimd.zeros([t_in.numel()], gpsimd.kFloat)


@negate_lib.kernel("tensor_negate")
def tensor_negate(ctx: gpsimd.CoreContext, t_in: Any) -> Any:
    """``out[i] = -in[i]`` through element accessors."""
    count = t_in.numel()
    t_out = ctx.zeros([count], gpsimd.kFloat)
    src = t_in.accessor()
    dst = t_out.accessor()
    for i in range(count):
        dst[i] = -1.0 * src[i]
    return t_out


def main() -> None:
    x = np.linspace(-2.0, 2.0, 9, dtype=np.float32)
    result = gpsimd.run(negate_lib.tensor_negate, [x])
    assert np.array_equal(result.outputs, -x)
    print(f"tensor_negate({x.tolist()}) = {result.outputs.tolist()}")
    print(f"simulated {result.total_ns / 1000:.2f} us on {result.profile.target}")


if __name__ == "__main__":
    main()
