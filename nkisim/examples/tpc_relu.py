"""TPC kernels for ReLU forward and backward and an elementwise add, in fp32 and bf16, with their glue.

Written the way HCK's ``relu_fwd_f32`` / ``add_f32`` are: the index space is the output in vectors
along dim0 (64 fp32 or 128 bf16 lanes) and one point per element of the other dims; each member loops
over its box. Run with ``nkisim.tpc.run(ReluFwdGlue("f32"), [x])`` or ``run(relu_fwd_kernel("f32"), [x])``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np

import nkisim.tpc as tpc

LANES = {"f32": 64, "bf16": 128}
DATA_TYPES = {"f32": tpc.DATA_F32, "bf16": tpc.DATA_BF16}


def outer(ctx: Any) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """This member's box: ``(c, start, end)`` with the int5 ``c`` set to each point of dims 1..4 in turn.

    The same ``c`` is yielded each time (the caller sets ``c[0]``); ``start``/``end`` bound the box.
    """
    start = ctx.get_index_space_offset()
    end = start + ctx.get_index_space_size()
    c = ctx.int5()
    for d4 in range(start[4], end[4]):
        c[4] = d4
        for d3 in range(start[3], end[3]):
            c[3] = d3
            for d2 in range(start[2], end[2]):
                c[2] = d2
                for d1 in range(start[1], end[1]):
                    c[1] = d1
                    yield c, start, end


def box(ctx: Any, lanes: int) -> Iterator[np.ndarray]:
    """The int5 coordinates of every vector in this member's box (dim0 in steps of ``lanes``)."""
    for c, start, end in outer(ctx):
        for d0 in range(start[0] * lanes, end[0] * lanes, lanes):
            c[0] = d0
            yield c


@functools.cache
def relu_fwd_kernel(p: str) -> tpc.Kernel:
    """``ofm = max(ifm, 0)`` for element type ``p`` (``f32`` or ``bf16``)."""
    lanes = LANES[p]

    @tpc.kernel(name=f"custom_relu_fwd_{p}")
    def relu_fwd(ctx: Any, ifm: tpc.tensor, ofm: tpc.tensor) -> None:
        load, vmax, store = (
            getattr(ctx, f"v_{p}_ld_tnsr_b"),
            getattr(ctx, f"v_{p}_max_b"),
            getattr(ctx, f"v_{p}_st_tnsr"),
        )
        for c in box(ctx, lanes):
            store(c, ofm, vmax(load(c, ifm), 0.0))

    return relu_fwd


@functools.cache
def relu_bwd_kernel(p: str) -> tpc.Kernel:
    """``grad_in = grad_out where ifm > 0, else 0``."""
    lanes = LANES[p]

    @tpc.kernel(name=f"custom_relu_bwd_{p}")
    def relu_bwd(ctx: Any, grad: tpc.tensor, ifm: tpc.tensor, out: tpc.tensor) -> None:
        load, store = getattr(ctx, f"v_{p}_ld_tnsr_b"), getattr(ctx, f"v_{p}_st_tnsr")
        select = getattr(ctx, f"v_{p}_sel_grt_{p}_b")
        for c in box(ctx, lanes):
            g = load(c, grad)
            x = load(c, ifm)
            store(c, out, select(x, 0.0, g, 0.0))

    return relu_bwd


@functools.cache
def add_kernel(p: str) -> tpc.Kernel:
    """``out = a + b`` (same shapes)."""
    lanes = LANES[p]

    @tpc.kernel(name=f"custom_add_{p}")
    def add(ctx: Any, a: tpc.tensor, b: tpc.tensor, out: tpc.tensor) -> None:
        load, vadd, store = (
            getattr(ctx, f"v_{p}_ld_tnsr_b"),
            getattr(ctx, f"v_{p}_add_b"),
            getattr(ctx, f"v_{p}_st_tnsr"),
        )
        for c in box(ctx, lanes):
            store(c, out, vadd(load(c, a), load(c, b)))

    return add


class ElementwiseGlue(tpc.Glue):
    """Glue of an elementwise kernel with ``inputs`` inputs and one output of the same shape and type."""

    def __init__(self, kind: str, p: str, inputs: int, kern: tpc.Kernel) -> None:
        self.kind, self.p, self.inputs, self.kern = kind, p, inputs, kern

    def GetKernelName(self) -> str:
        return f"custom_{self.kind}_{self.p}_gaudi2"

    def GetGcDefinitions(
        self, in_defs: tpc.HabanaKernelParams, out_defs: tpc.HabanaKernelInstantiation
    ) -> tpc.GlueCodeReturn:
        if in_defs.inputTensorNr != self.inputs:
            return tpc.GlueCodeReturn.GLUE_INCOMPATIBLE_INPUT_COUNT
        if in_defs.outputTensorNr != 1:
            return tpc.GlueCodeReturn.GLUE_INCOMPATIBLE_OUTPUT_COUNT
        if any(t.geometry.dataType != DATA_TYPES[self.p] for t in in_defs.inputTensors):
            return tpc.GlueCodeReturn.GLUE_INCOMPATIBLE_DATA_TYPE
        sizes = in_defs.outputTensors[0].geometry.maxSizes
        lanes = LANES[self.p]
        out_defs.indexSpaceRank = len(sizes)
        out_defs.indexSpaceGeometry = [-(-sizes[0] // lanes), *sizes[1:]]
        pattern = tpc.elementwise_pattern(lanes)
        out_defs.inputTensorAccessPattern = [pattern] * self.inputs
        out_defs.outputTensorAccessPattern = [pattern]
        out_defs.kernel.kernelElf = self.kern
        return tpc.GlueCodeReturn.GLUE_SUCCESS


def ReluFwdGlue(p: str) -> ElementwiseGlue:
    return ElementwiseGlue("relu_fwd", p, 1, relu_fwd_kernel(p))


def ReluBwdGlue(p: str) -> ElementwiseGlue:
    return ElementwiseGlue("relu_bwd", p, 2, relu_bwd_kernel(p))


def AddGlue(p: str) -> ElementwiseGlue:
    return ElementwiseGlue("add", p, 2, add_kernel(p))


#: The library of these kernels (as libcustom_tpc_perf_lib.so on GC_KERNEL_PATH).
LIBRARY = tpc.KernelLibrary("custom_tpc_relu", [g(p) for g in (ReluFwdGlue, ReluBwdGlue, AddGlue) for p in LANES])
