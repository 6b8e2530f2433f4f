"""Kernels shared by the TPC tests."""

from __future__ import annotations

from typing import Any

import nkisim.tpc as tpc


@tpc.kernel
def busy_kernel(ctx: Any, x: tpc.tensor, out: tpc.tensor) -> None:
    """Compute-bound: 31 VPU operations per loaded vector (8 chains of 3, combined), more than HBM needs."""
    s = ctx.get_index_space_offset()
    e = s + ctx.get_index_space_size()
    c = ctx.int5()
    for row in range(s[1], e[1]):
        c[1] = row
        v = ctx.v_f32_ld_tnsr_b(c, x)
        chains = []
        for k in range(8):
            acc = ctx.v_f32_add_b(v, float(k))
            for _ in range(2):
                acc = ctx.v_f32_add_b(acc, v)
            chains.append(acc)
        while len(chains) > 1:
            chains = [ctx.v_f32_add_b(chains[i], chains[i + 1]) for i in range(0, len(chains), 2)]
        ctx.v_f32_st_tnsr(c, out, chains[0])
