"""TPC kernels for a row softmax and a row sum (the last torch dim, TPC dim0), in fp32 and bf16.

The index space has one point per row (dim0 of size 1, the other dims as the tensor's), so a member
owns whole rows: it finds the row maximum (``v_f32_max_b`` over the row's vectors, then
``v_f32_reduce_max``), sums ``v_exp_f32(x - max)`` and scales by ``v_reciprocal_f32`` of the sum.
Out-of-bounds lanes of the last vector load the pad value, ``-inf``, whose exponential is 0. bf16 rows
are widened to two fp32 vectors (``convert_bfloat128_to_float128``) and narrowed back at the end.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np

import nkisim.tpc as tpc
from nkisim.examples.tpc_relu import DATA_TYPES, LANES, outer


def rows(ctx: Any) -> Iterator[np.ndarray]:
    """The int5 coordinates of the start of each row of this member (dim0 = 0)."""
    for c, _, _ in outer(ctx):
        c[0] = 0
        yield c


def _load_f32(ctx: Any, p: str, c: np.ndarray, t: int) -> list[Any]:
    """One vector of the row as fp32 vectors (two for bf16)."""
    if p == "f32":
        return [ctx.v_f32_ld_tnsr_b(c, t)]
    pair = ctx.convert_bfloat128_to_float128(ctx.v_bf16_ld_tnsr_b(c, t))
    return [pair.v1, pair.v2]


@functools.cache
def softmax_kernel(p: str) -> tpc.Kernel:
    """``out[r, :] = softmax(x[r, :])`` along TPC dim0."""
    lanes = LANES[p]

    @tpc.kernel(name=f"custom_softmax_fwd_{p}")
    def softmax(ctx: Any, x: tpc.tensor, out: tpc.tensor) -> None:
        width = ctx.get_dim_size(x, 0)
        steps = range(0, width, lanes)
        for c in rows(ctx):
            row = []
            for d in steps:  # pass 1: the row, kept in vector registers, and its maximum
                c[0] = d
                row += _load_f32(ctx, p, c, x)
            peak = row[0]
            for v in row[1:]:
                peak = ctx.v_f32_max_b(peak, v)
            peak = ctx.v_f32_reduce_max(peak)
            total = None
            exps = []
            for v in row:  # pass 2: exponentials and their sum
                e = ctx.v_exp_f32(ctx.v_f32_sub_b(v, peak))
                exps.append(e)
                total = e if total is None else ctx.v_f32_add_b(total, e)
            scale = ctx.v_reciprocal_f32(ctx.v_f32_reduce_add(total))
            scaled = [ctx.v_f32_mul_b(e, scale) for e in exps]
            for i, d in enumerate(steps):  # pass 3: store
                c[0] = d
                if p == "f32":
                    ctx.v_f32_st_tnsr(c, out, scaled[i])
                else:
                    pair = tpc.Pair(scaled[2 * i], scaled[2 * i + 1])
                    ctx.v_bf16_st_tnsr(c, out, ctx.convert_float128_to_bfloat128(pair))

    return softmax


@functools.cache
def row_sum_kernel(p: str) -> tpc.Kernel:
    """``out[r, 0] = sum(x[r, :])`` (accumulated in fp32)."""
    lanes = LANES[p]

    @tpc.kernel(name=f"custom_row_sum_{p}")
    def row_sum(ctx: Any, x: tpc.tensor, out: tpc.tensor) -> None:
        width = ctx.get_dim_size(x, 0)
        for c in rows(ctx):
            total = None
            for d in range(0, width, lanes):
                c[0] = d
                for v in _load_f32(ctx, p, c, x):
                    total = v if total is None else ctx.v_f32_add_b(total, v)
            total = ctx.v_f32_reduce_add(total)
            c[0] = 0
            if p == "f32":
                ctx.v_f32_st_tnsr(c, out, total)
            else:
                ctx.v_bf16_st_tnsr(c, out, ctx.convert_float128_to_bfloat128(tpc.Pair(total, total)))

    return row_sum


class RowGlue(tpc.Glue):
    """Glue of a kernel that owns whole rows (dim0): softmax (same-shape output) or row sum (dim0 = 1)."""

    def __init__(self, kind: str, p: str) -> None:
        self.kind, self.p = kind, p
        self.kern = softmax_kernel(p) if kind == "softmax_fwd" else row_sum_kernel(p)

    def GetKernelName(self) -> str:
        return f"custom_{self.kind}_{self.p}_gaudi2"

    def GetGcDefinitions(
        self, in_defs: tpc.HabanaKernelParams, out_defs: tpc.HabanaKernelInstantiation
    ) -> tpc.GlueCodeReturn:
        if in_defs.inputTensorNr != 1 or in_defs.outputTensorNr != 1:
            return tpc.GlueCodeReturn.GLUE_INCOMPATIBLE_INPUT_COUNT
        if in_defs.inputTensors[0].geometry.dataType != DATA_TYPES[self.p]:
            return tpc.GlueCodeReturn.GLUE_INCOMPATIBLE_DATA_TYPE
        sizes = in_defs.inputTensors[0].geometry.maxSizes
        out_sizes = in_defs.outputTensors[0].geometry.maxSizes
        out_defs.indexSpaceRank = max(2, len(sizes))
        out_defs.indexSpaceGeometry = [1, *sizes[1:]] + [1] * (2 - len(sizes))
        whole_row = [tpc.DimMapping(indexSpaceDim=0, a=0, start_b=0, end_b=sizes[0] - 1)]
        whole_row += [tpc.DimMapping(indexSpaceDim=d, a=1, start_b=0, end_b=0) for d in range(1, 5)]
        out_row = [tpc.DimMapping(indexSpaceDim=0, a=0, start_b=0, end_b=out_sizes[0] - 1), *whole_row[1:]]
        out_defs.inputTensorAccessPattern = [tpc.TensorAccessPattern(mapping=whole_row)]
        out_defs.outputTensorAccessPattern = [tpc.TensorAccessPattern(mapping=out_row)]
        out_defs.inputPadValues = [-np.inf if self.kind == "softmax_fwd" else 0.0]
        out_defs.kernel.kernelElf = self.kern
        return tpc.GlueCodeReturn.GLUE_SUCCESS
