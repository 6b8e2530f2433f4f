"""Small operators the GPSIMD tests share."""

from __future__ import annotations

from typing import Any

import numpy as np

from nkisim import gpsimd


def same_shape(t: gpsimd.ShapeTensor, *rest: Any) -> gpsimd.ShapeTensor:
    return gpsimd.zeros(t.sizes(), t.dtype)


def library(name: str, kernel: Any, shape: Any = same_shape, **options: Any) -> gpsimd.Op:
    """A one-op library ``name`` with op ``op``."""
    lib = gpsimd.Library(name, **options)
    lib.shape("op")(shape)
    lib.kernel("op")(kernel)
    return lib.op


def tcm_blocks(ctx: Any, t_in: Any, start: int, stop: int, fn: Any, block: int = 1024) -> None:
    """Apply ``fn`` (in place on a TCM block) to elements [start, stop) into the output."""
    dst = ctx.get_dst_tensor()
    buf = ctx.tcm_malloc(block * t_in.dtype.itemsize, t_in.dtype)
    src, out = t_in.tcm_accessor(), dst.tcm_accessor()
    for offset in range(start, stop, block):
        count = min(block, stop - offset)
        src.tensor_to_tcm(buf, offset, count)
        fn(buf[:count])
        out.tcm_to_tensor(buf, offset, count)
    ctx.tcm_free(buf)


def negate_tcm(ctx: Any, t: Any) -> Any:
    tcm_blocks(ctx, t, 0, t.numel(), lambda b: np.negative(b, out=b))
    return ctx.get_dst_tensor()
