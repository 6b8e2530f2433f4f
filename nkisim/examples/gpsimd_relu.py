"""ReLU as a GPSIMD custom operator, in three versions, timed like the published MLP measurements.

* ``relu_element``: the standard element accessor, one element at a time (slow: HBM through the
  low-bandwidth path).
* ``relu_tcm``: blocks of up to 1024 floats copied to TCM, clamped there with one vector
  operation, copied back (one core).
* ``relu_tcm_multicore``: the same on all 8 GPSIMD cores, each taking its own slice of the
  flattened tensor.

A backward op (``grad * (x > 0)``) makes ``relu_tcm`` differentiable through torch.

:func:`mlp_iterations_per_second` puts a version into the published benchmark: an MNIST MLP whose
ReLU sees 32x4096 and 32x2048 float32 elements per inference, the rest of the model taking a
fixed time derived from the published figures (docs/gpsimd.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import nkisim.gpsimd as gpsimd

#: Elements per TCM block: 4 KB of float32.
BLOCK = 1024
#: The ReLU inputs of one MLP inference: batch 32, hidden layers of 4096 and 2048.
MLP_LAYERS = ((32, 4096), (32, 2048))
#: The time of one MLP inference outside the ReLUs (derived from the published figures, docs/gpsimd.md).
MLP_REST_NS = 3.5866e6
#: Published inferences per second on trn1 (customop-mlp-perf-opt tutorial).
PUBLISHED_IT_PER_S = {"relu_element": 8.10, "relu_tcm": 220.74, "relu_tcm_multicore": 269.94}


def relu_shape(t_in: gpsimd.ShapeTensor) -> gpsimd.ShapeTensor:
    """The output has the input's sizes and dtype."""
    return gpsimd.zeros(t_in.sizes(), t_in.dtype)


def relu_backward_shape(grad: gpsimd.ShapeTensor, t_in: gpsimd.ShapeTensor) -> gpsimd.ShapeTensor:
    return gpsimd.zeros(t_in.sizes(), t_in.dtype)


def _blocks(start: int, stop: int, block: int = BLOCK) -> Any:
    for offset in range(start, stop, block):
        yield offset, min(block, stop - offset)


def relu_element(ctx: gpsimd.CoreContext, t_in: Any) -> Any:
    """``max(x, 0)`` element by element through the standard accessor."""
    t_out = ctx.zeros(t_in.sizes(), t_in.dtype)
    src, dst = t_in.accessor(), t_out.accessor()
    for index in np.ndindex(*t_in.sizes()):
        v = src[index]
        dst[index] = v if v > 0 else 0.0
    return t_out


def relu_tcm(ctx: gpsimd.CoreContext, t_in: Any) -> Any:
    """``max(x, 0)`` in 1024-element TCM blocks on one core."""
    t_out = ctx.get_dst_tensor()
    buf = ctx.tcm_malloc(BLOCK * 4, gpsimd.kFloat)
    src, dst = t_in.tcm_accessor(), t_out.tcm_accessor()
    for offset, count in _blocks(0, t_in.numel()):
        src.tensor_to_tcm(buf, offset, count)
        np.maximum(buf[:count], 0, out=buf[:count])
        dst.tcm_to_tensor(buf, offset, count)
    ctx.tcm_free(buf)
    return t_out


def relu_tcm_multicore(ctx: gpsimd.CoreContext, t_in: Any) -> Any:
    """``max(x, 0)``; core ``k`` of ``n`` takes elements ``[k*n_elem//n, (k+1)*n_elem//n)``."""
    t_out = ctx.get_dst_tensor()
    cpu, cpus = ctx.get_cpu_id(), ctx.get_cpu_count()
    total = t_in.numel()
    start, stop = cpu * total // cpus, (cpu + 1) * total // cpus
    buf = ctx.tcm_malloc(BLOCK * 4, gpsimd.kFloat)
    src, dst = t_in.tcm_accessor(), t_out.tcm_accessor()
    for offset, count in _blocks(start, stop):
        src.tensor_to_tcm(buf, offset, count)
        np.maximum(buf[:count], 0, out=buf[:count])
        dst.tcm_to_tensor(buf, offset, count)
    ctx.tcm_free(buf)
    return t_out


def relu_backward_tcm(ctx: gpsimd.CoreContext, grad: Any, t_in: Any) -> Any:
    """``grad * (x > 0)`` in TCM blocks (two buffers of 4 KB)."""
    t_out = ctx.get_dst_tensor()
    g_buf = ctx.tcm_malloc(BLOCK * 4, gpsimd.kFloat)
    x_buf = ctx.tcm_malloc(BLOCK * 4, gpsimd.kFloat)
    g_acc, x_acc, out_acc = grad.tcm_accessor(), t_in.tcm_accessor(), t_out.tcm_accessor()
    for offset, count in _blocks(0, t_in.numel()):
        g_acc.tensor_to_tcm(g_buf, offset, count)
        x_acc.tensor_to_tcm(x_buf, offset, count)
        np.multiply(g_buf[:count], x_buf[:count] > 0, out=g_buf[:count])
        out_acc.tcm_to_tensor(g_buf, offset, count)
    ctx.tcm_free(g_buf)
    ctx.tcm_free(x_buf)
    return t_out


def make_libraries() -> dict[str, gpsimd.Op]:
    """One library per version (the multicore mode is a library setting): the three ReLU ops."""
    single = gpsimd.Library("relu_ops")
    single.shape("relu_element")(relu_shape)
    single.kernel("relu_element")(relu_element)
    single.shape("relu_tcm")(relu_shape)
    single.kernel("relu_tcm")(relu_tcm)
    single.shape("relu_tcm_backward")(relu_backward_shape)
    single.kernel("relu_tcm_backward")(relu_backward_tcm)
    single.backward("relu_tcm", "relu_tcm_backward")
    multi = gpsimd.Library("relu_mc_ops", multicore=True)
    multi.shape("relu_tcm_multicore")(relu_shape)
    multi.kernel("relu_tcm_multicore")(relu_tcm_multicore)
    return {
        "relu_element": single.relu_element,
        "relu_tcm": single.relu_tcm,
        "relu_tcm_multicore": multi.relu_tcm_multicore,
    }


def mlp_relu_ns(op: gpsimd.Op, target: str = "trn1", sample: int | None = None) -> float:
    """Simulated time of one inference's ReLUs (both layers).

    With ``sample``, each layer runs on its first ``sample`` rows' worth of elements only and the
    time is scaled linearly (for the slow element-accessor version).
    """
    rng = np.random.default_rng(0)
    total = 0.0
    for rows, cols in MLP_LAYERS:
        n = rows * cols
        m = n if sample is None else min(n, sample)
        x = rng.standard_normal(m).astype(np.float32)
        result = gpsimd.run(op, [x], target=target)
        assert np.array_equal(result.outputs, np.maximum(x, 0))
        launch = result.profile.instructions[0].duration_ns
        total += launch + (result.total_ns - launch) * n / m
    return total


def mlp_iterations_per_second(op: gpsimd.Op, target: str = "trn1", sample: int | None = None) -> float:
    """Simulated MLP inferences per second with this ReLU (the published benchmark's metric)."""
    return 1e9 / (MLP_REST_NS + mlp_relu_ns(op, target, sample))


def main() -> None:
    ops = make_libraries()
    x = np.random.default_rng(1).standard_normal((64, 100)).astype(np.float32)
    for name, op in ops.items():
        out = gpsimd.run(op, [x]).outputs
        assert np.array_equal(out, np.maximum(x, 0)), name
    print("ReLU in a simulated MNIST MLP on trn1 (inferences/s; published in parentheses):")
    for name, op in ops.items():
        sample = 8192 if name == "relu_element" else None
        its = mlp_iterations_per_second(op, sample=sample)
        print(f"  {name:20s} {its:8.2f}  ({PUBLISHED_IT_PER_S[name]})")


if __name__ == "__main__":
    main()
