"""Seed example: ``torch.ops.custom_op.custom_topk(a, k, dim, bottom)`` backed by a TPC topk kernel.

Importing this module registers the op (torch required). As in Habana's ``custom_topk``: the schema is
``custom_topk(Tensor self, Scalar k, Scalar axis, bool bottom) -> (Tensor, Tensor)``; inputs 1-3 are
USER_PARAMS that the parameter callback packs into ``synBeamParams{bsw = k, axis = ndim - dim - 1,
bottomK = bottom}`` (TPC dims are the reverse of torch's); outputs are Float values and Long indices
shaped like input 0 with ``shape[dim] = k``.

The kernel (written here; the real op uses Habana's built-in ``topk`` GUID):

* ``axis == 0`` (torch's last dim, along the vector lanes): for each of the k results, the row minimum
  (maximum) by ``v_f32_min_b`` over the row's vectors and ``v_f32_reduce_min``; its first lane index by
  a select and ``v_i32_reduce_min``; then that element is replaced by +inf (-inf).
* ``axis > 0`` (across vectors): an insertion network per lane: each element along the axis goes
  through k compare-and-swap stages (``v_f32_sel_less_f32_b`` / ``v_i32_sel_less_f32_b``).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

import nkisim.tpc as tpc
from nkisim.tpc import custom_op

try:
    import torch
except ImportError as exc:  # pragma: no cover (torch is an optional dependency)
    raise ImportError("nkisim.examples.tpc_topk registers a PyTorch op: install torch (pip install torch)") from exc

BIG_INDEX = 2**31 - 1


class synBeamParams(ctypes.Structure):
    """The topk node parameters."""

    _fields_ = [("bsw", ctypes.c_int32), ("axis", ctypes.c_int32), ("bottomK", ctypes.c_int32)]


def _lanes_topk(ctx: Any, x: int, values: int, indices: int, k: int, bottom: int) -> None:
    """Top-k along dim0 (the lanes) of each row of this member."""
    inf = np.inf if bottom else -np.inf
    reduce = ctx.v_f32_reduce_min if bottom else ctx.v_f32_reduce_max
    pick = ctx.v_f32_min_b if bottom else ctx.v_f32_max_b
    width = ctx.get_dim_size(x, 0)
    start = ctx.get_index_space_offset()
    end = start + ctx.get_index_space_size()
    lane = ctx.as_int64(ctx.read_lane_id_4b_b())
    c = ctx.int5()
    for d2 in range(start[2], end[2]):
        for d1 in range(start[1], end[1]):
            c[1], c[2] = d1, d2
            row, where = [], []
            for i, d in enumerate(range(0, width, 64)):
                c[0] = d
                row.append(ctx.v_f32_ld_tnsr_b(c, x))  # lanes past the row load the pad value, +-inf
                where.append(ctx.v_i32_add_b(lane, 64 * i))
            out_v = [ctx.v_f32_mov_b(0.0) for _ in range(0, k, 64)]
            out_i = [ctx.v_i32_mov_b(0) for _ in range(0, k, 64)]
            for j in range(k):
                best = row[0]
                for v in row[1:]:
                    best = pick(best, v)
                best = reduce(best)
                first = None
                for v, w in zip(row, where):
                    candidate = ctx.v_i32_sel_eq_f32_b(v, best, w, BIG_INDEX)
                    first = candidate if first is None else ctx.v_i32_min_b(first, candidate)
                first = ctx.v_i32_reduce_min(first)
                row = [ctx.v_f32_sel_eq_i32_b(w, first, inf, v) for v, w in zip(row, where)]
                slot = j // 64
                out_v[slot] = ctx.v_f32_sel_eq_i32_b(lane, j % 64, best, out_v[slot])
                out_i[slot] = ctx.v_i32_sel_eq_i32_b(lane, j % 64, first, out_i[slot])
            for slot in range(len(out_v)):
                c[0] = 64 * slot
                ctx.v_f32_st_tnsr(c, values, out_v[slot])
                ctx.v_i32_st_tnsr(c, indices, out_i[slot])


def _axis_topk(ctx: Any, x: int, values: int, indices: int, k: int, axis: int, bottom: int) -> None:
    """Top-k along dim ``axis`` > 0, 64 lanes (64 independent columns) at a time."""
    better_v = ctx.v_f32_sel_less_f32_b if bottom else ctx.v_f32_sel_grt_f32_b
    better_i = ctx.v_i32_sel_less_f32_b if bottom else ctx.v_i32_sel_grt_f32_b
    length = ctx.get_dim_size(x, axis)
    start = ctx.get_index_space_offset()
    end = start + ctx.get_index_space_size()
    c = ctx.int5()
    for d2 in range(start[2], end[2]):
        for d1 in range(start[1], end[1]):
            for d0 in range(start[0] * 64, end[0] * 64, 64):
                c[0], c[1], c[2] = d0, d1, d2
                best = [ctx.v_f32_mov_b(np.inf if bottom else -np.inf) for _ in range(k)]
                index = [ctx.v_i32_mov_b(0) for _ in range(k)]
                for r in range(length):
                    c[axis] = r
                    v = ctx.v_f32_ld_tnsr_b(c, x)
                    w = ctx.v_i32_mov_b(r)
                    for j in range(k):  # compare and swap: the better stays, the other moves on
                        b, i = best[j], index[j]
                        best[j], index[j] = better_v(v, b, v, b), better_i(v, b, w, i)
                        v, w = better_v(v, b, b, v), better_i(v, b, i, w)
                for j in range(k):
                    c[axis] = j
                    ctx.v_f32_st_tnsr(c, values, best[j])
                    ctx.v_i32_st_tnsr(c, indices, index[j])


@tpc.kernel(name="custom_topk_f32")
def topk_kernel(
    ctx: Any, x: tpc.tensor, values: tpc.tensor, indices: tpc.tensor, k: int, axis: int, bottom: int
) -> None:
    """The k smallest (``bottom``) or largest elements along TPC dim ``axis`` and their indices."""
    if axis == 0:
        _lanes_topk(ctx, x, values, indices, k, bottom)
    else:
        _axis_topk(ctx, x, values, indices, k, axis, bottom)


class TopkGlue(tpc.Glue):
    """Glue of the topk kernel: one fp32 input of up to 3 dims, values (f32) and indices (i32)."""

    def GetKernelName(self) -> str:
        return "custom_topk_f32_gaudi2"

    def GetGcDefinitions(
        self, in_defs: tpc.HabanaKernelParams, out_defs: tpc.HabanaKernelInstantiation
    ) -> tpc.GlueCodeReturn:
        if in_defs.inputTensorNr != 1:
            return tpc.GlueCodeReturn.GLUE_INCOMPATIBLE_INPUT_COUNT
        if in_defs.outputTensorNr != 2:
            return tpc.GlueCodeReturn.GLUE_INCOMPATIBLE_OUTPUT_COUNT
        geometry = in_defs.inputTensors[0].geometry
        if geometry.dataType != tpc.DATA_F32:
            return tpc.GlueCodeReturn.GLUE_INCOMPATIBLE_DATA_TYPE
        if geometry.dims > 3:
            return tpc.GlueCodeReturn.GLUE_INCOMPATIBLE_INPUT_SIZE
        params = synBeamParams.from_buffer_copy(bytes(in_defs.nodeParams.nodeParams))
        sizes = list(geometry.maxSizes) + [1] * (5 - geometry.dims)
        k, axis = params.bsw, params.axis
        if not 0 < k <= sizes[axis]:
            return tpc.GlueCodeReturn.GLUE_INCOMPATIBLE_OUTPUT_SIZE
        space = [-(-sizes[0] // 64), *sizes[1:]]
        space[axis] = 1
        out_defs.indexSpaceRank = max(1, geometry.dims)
        out_defs.indexSpaceGeometry = space
        whole = [tpc.DimMapping(indexSpaceDim=d, a=1, start_b=0, end_b=0) for d in range(5)]
        whole[0] = tpc.DimMapping(indexSpaceDim=0, a=64, start_b=0, end_b=63)
        reads, writes = list(whole), list(whole)
        reads[axis] = tpc.DimMapping(indexSpaceDim=axis, a=0, start_b=0, end_b=sizes[axis] - 1)
        writes[axis] = tpc.DimMapping(
            indexSpaceDim=axis, a=0, start_b=0, end_b=-(-k // 64) * 64 - 1 if axis == 0 else k - 1
        )
        out_defs.inputTensorAccessPattern = [tpc.TensorAccessPattern(mapping=reads)]
        out_defs.outputTensorAccessPattern = [tpc.TensorAccessPattern(mapping=writes)] * 2
        out_defs.inputPadValues = [np.inf if params.bottomK else -np.inf]
        out_defs.kernel.kernelElf = topk_kernel
        out_defs.kernel.scalarParams = tpc.pack_params(params)
        out_defs.kernel.paramsNr = 3
        return tpc.GlueCodeReturn.GLUE_SUCCESS


#: The kernel library the op's GUID is found in (as on GC_KERNEL_PATH).
LIBRARY = tpc.KernelLibrary("custom_tpc_topk", [TopkGlue()])


def _topk_dim(stack: list[Any]) -> int:
    dim = int(stack[2])
    return dim + stack[0].dim() if dim < 0 else dim


def user_params(stack: list[Any]) -> tuple[synBeamParams, int]:
    """The parameter callback: ``synBeamParams`` from the op's inputs."""
    params, size = custom_op.HPU_PARAMS_STUB(synBeamParams)
    params.bsw = int(stack[1])
    params.axis = stack[0].dim() - _topk_dim(stack) - 1  # TPC dims are the reverse of torch's
    params.bottomK = int(bool(stack[3]))
    return params, size


def output_shape(stack: list[Any]) -> list[int]:
    """Both outputs: input 0's shape with ``shape[dim] = k``."""
    shape = list(stack[0].shape)
    shape[_topk_dim(stack)] = int(stack[1])
    return shape


SCHEMA = "custom_op::custom_topk(Tensor self, Scalar k, Scalar axis, bool bottom) -> (Tensor, Tensor)"

DESCRIPTOR = custom_op.REGISTER_CUSTOM_OP_ATTRIBUTES(
    "custom_op::custom_topk",
    "custom_topk_f32_gaudi2",
    inputs_desc=[
        custom_op.InputDesc(custom_op.input_type.TENSOR, 0),
        custom_op.InputDesc(custom_op.input_type.USER_PARAMS, 1),
        custom_op.InputDesc(custom_op.input_type.USER_PARAMS, 2),
        custom_op.InputDesc(custom_op.input_type.USER_PARAMS, 3),
    ],
    outputs_desc=[
        custom_op.OutputDesc(0, "float32", output_shape),
        custom_op.OutputDesc(1, "int64", output_shape),
    ],
    user_param_func=user_params,
    kernels=LIBRARY,
)

custom_topk = custom_op.register_torch(SCHEMA, DESCRIPTOR)
assert custom_topk is torch.ops.custom_op.custom_topk
