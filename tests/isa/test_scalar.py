"""Scalar Engine: nisa.activation, op(data * scale + bias), and its reduce_regs accumulators.

Activation functions are references written in float64 from their mathematical
definitions; the hardware approximates them (piecewise polynomials), so they are
compared with a float32-level tolerance inside each function's valid input range.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nkisim.nki.isa as nisa
import nkisim.nki.language as nl

from .conftest import (
    BF16,
    FAST,
    FLOATS,
    FP16,
    FP32,
    INT8,
    PER_OP,
    erf64,
    f32,
    load,
    random_values,
    run_kernel,
    run_tile,
    seeds,
    store,
    targets,
    tile_shapes,
    ulp_rtol,
)


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def softplus(z):
    return np.logaddexp(0.0, z)


def phi(z):  # standard normal pdf
    return np.exp(-0.5 * z * z) / np.sqrt(2.0 * np.pi)


# name -> (float64 reference, input domain)
ACTIVATIONS = {
    "copy": (lambda z: z, "any"),
    "square": (lambda z: z * z, "any"),
    "relu": (lambda z: np.maximum(z, 0.0), "any"),
    "sigmoid": (sigmoid, "any"),
    "tanh": (np.tanh, "any"),
    "exp": (np.exp, "any"),
    "gelu": (lambda z: 0.5 * z * (1.0 + erf64(z / np.sqrt(2.0))), "any"),
    "gelu_dx": (lambda z: 0.5 * (1.0 + erf64(z / np.sqrt(2.0))) + z * phi(z), "any"),
    "gelu_apprx_tanh": (lambda z: 0.5 * z * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (z + 0.044715 * z**3))), "any"),
    "gelu_apprx_sigmoid": (lambda z: z * sigmoid(1.702 * z), "any"),
    "gelu_apprx_sigmoid_dx": (
        lambda z: sigmoid(1.702 * z) + 1.702 * z * sigmoid(1.702 * z) * (1.0 - sigmoid(1.702 * z)),
        "any",
    ),
    "silu": (lambda z: z * sigmoid(z), "any"),
    "silu_dx": (lambda z: sigmoid(z) * (1.0 + z * (1.0 - sigmoid(z))), "any"),
    "softplus": (softplus, "any"),
    "mish": (lambda z: z * np.tanh(softplus(z)), "any"),
    "erf": (erf64, "any"),
    "erf_dx": (lambda z: 2.0 / np.sqrt(np.pi) * np.exp(-z * z), "any"),
    "sign": (np.sign, "any"),
    "abs": (np.abs, "any"),
    "log": (np.log, "positive"),
    "sqrt": (np.sqrt, "positive"),
    "rsqrt": (lambda z: 1.0 / np.sqrt(z), "positive"),
    "reciprocal": (lambda z: 1.0 / z, "positive"),
    "sin": (np.sin, "small"),
    "arctan": (np.arctan, "small"),
}


def operands(rng, shape, domain, dtype):
    """data, a (P, 1) scale column and a (P, 1) bias column with data * scale + bias inside the domain."""
    p = shape[0]
    if domain == "positive":
        data = rng.uniform(0.25, 4.0, size=shape)
        scale = rng.uniform(0.5, 2.0, size=(p, 1))
        bias = rng.uniform(0.0, 1.0, size=(p, 1))
    elif domain == "small":  # |data * scale + bias| <= 1.25, inside [-pi/2, pi/2]
        data = rng.uniform(-0.5, 0.5, size=shape)
        scale = rng.uniform(-1.5, 1.5, size=(p, 1))
        bias = rng.uniform(-0.5, 0.5, size=(p, 1))
    else:
        data = np.clip(rng.standard_normal(shape) * 1.5, -4, 4)
        scale = rng.uniform(-2.0, 2.0, size=(p, 1))
        bias = rng.uniform(-1.0, 1.0, size=(p, 1))
    if dtype == INT8:
        data = np.rint(data)  # |z| <= 9 keeps exp() inside float16
    return data.astype(dtype), scale.astype(np.float32), bias.astype(np.float32)


def assert_activation_close(got, expected64, dtype):
    """float32-level agreement, plus one ulp of dst's dtype for the final cast."""
    rtol = 4e-6 + ulp_rtol(dtype)
    atol = 1e-6 + ulp_rtol(dtype) * 1e-3
    np.testing.assert_allclose(got.astype(np.float64), expected64, rtol=rtol, atol=atol)


@st.composite
def activation_cases(draw, op):
    domain = ACTIVATIONS[op][1]
    target = draw(targets)
    return {
        "op": op,
        "target": target,
        "dtype": draw(st.sampled_from((*FLOATS, INT8) if domain == "any" else FLOATS)),
        "out": draw(st.sampled_from(FLOATS)),
        "scale": draw(st.sampled_from(["none", "imm", "vector"])),
        "scale_imm": draw(st.sampled_from([1.0, -0.5, 1.5, 0.75])),
        # scalar bias needs NeuronCore-v3 or newer
        "bias": draw(st.sampled_from(["none", "vector"] + (["imm"] if target != "trn1" else []))),
        "bias_imm": draw(st.sampled_from([0.0, 0.25, -0.5])),
        # the bias tile may be float32, float16 or bfloat16
        "bias_dtype": draw(st.sampled_from(FLOATS)),
        "psum_data": draw(st.booleans()),
        "psum_dst": draw(st.booleans()),
    }


@pytest.mark.parametrize("op", sorted(ACTIVATIONS))
@PER_OP
@given(data=st.data(), shape=tile_shapes(), seed=seeds)
def test_activation_scale_bias(op, data, shape, seed):
    """dst = op(data * scale + bias): float32 math, scale and bias scalars or (P, 1) columns."""
    case = data.draw(activation_cases(op))
    dtype, out = case["dtype"], case["out"]
    fn, domain = ACTIVATIONS[op]
    rng = np.random.default_rng(seed)
    data, scale_col, bias_col = operands(rng, shape, domain, dtype)
    bias_col = bias_col.astype(case["bias_dtype"])
    if domain != "any":  # keep immediates inside the domain too
        case = {**case, "scale_imm": abs(case["scale_imm"]) if domain == "positive" else case["scale_imm"]}
        case = {**case, "bias_imm": abs(case["bias_imm"])}

    def body(dst, x, sc, bi):
        kwargs = {}
        if case["scale"] == "imm":
            kwargs["scale"] = case["scale_imm"]
        elif case["scale"] == "vector":
            kwargs["scale"] = sc
        if case["bias"] == "imm":
            kwargs["bias"] = case["bias_imm"]
        elif case["bias"] == "vector":
            kwargs["bias"] = bi
        nisa.activation(dst=dst, op=getattr(nl, op), data=x, **kwargs)

    got = run_tile(
        body,
        [data, scale_col, bias_col],
        shape,
        out,
        target=case["target"],
        in_buffers=["psum" if case["psum_data"] else "sbuf", "sbuf", "sbuf"],
        out_buffer="psum" if case["psum_dst"] else "sbuf",
    )

    p = shape[0]
    z = f32(data).reshape(p, -1)
    if case["scale"] == "imm":
        z = z * np.float32(case["scale_imm"])
    elif case["scale"] == "vector":
        z = z * scale_col
    if case["bias"] == "imm":
        z = z + np.float32(case["bias_imm"])
    elif case["bias"] == "vector":
        z = z + f32(bias_col)
    expected = fn(z.astype(np.float64)).reshape(shape)
    assert_activation_close(got, expected, out)


def test_activation_hand_cases():
    x = np.array([[-2.0, -0.5, 0.0, 0.5, 3.0], [1.0, 2.0, -1.0, 4.0, -4.0]], np.float32)
    scale = np.array([[2.0], [-1.0]], np.float32)
    bias = np.array([[1.0], [0.5]], np.float32)

    def body(op):
        return lambda d, s, sc, b: nisa.activation(dst=d, op=op, data=s, scale=sc, bias=b)

    got = run_tile(body(nl.relu), [x, scale, bias], x.shape, FP32)
    # row 0: 2x + 1 -> [-3, 0, 1, 2, 7]; row 1: -x + 0.5 -> [-0.5, -1.5, 1.5, -3.5, 4.5]
    np.testing.assert_array_equal(got, [[0, 0, 1, 2, 7], [0, 0, 1.5, 0, 4.5]])
    got = run_tile(body(nl.copy), [x, scale, bias], x.shape, INT8)
    np.testing.assert_array_equal(got, [[-3, 0, 1, 2, 7], [0, -2, 2, -4, 4]])  # -0.5 -> 0, -1.5 -> -2, 4.5 -> 4
    got = run_tile(body(nl.square), [x, scale, bias], x.shape, BF16)
    np.testing.assert_array_equal(got.astype(np.float32), [[9, 0, 1, 4, 49], [0.25, 2.25, 2.25, 12.25, 20.25]])


# -- reduce_regs ----------------------------------------------------------------------

CMDS = ("idle", "reset", "reduce", "reset_reduce")
SIMPLE = {
    "copy": lambda z: z,
    "exp": np.exp,
    "relu": lambda z: np.maximum(z, 0.0),
    "square": lambda z: z * z,
    "tanh": np.tanh,
}


@st.composite
def reduce_programs(draw):
    """A sequence of activations with reduce commands; the first one resets the registers."""
    n = draw(st.integers(1, 5))
    first = draw(st.sampled_from(["reset", "reset_reduce"]))
    cmds = [first] + [draw(st.sampled_from(CMDS)) for _ in range(n - 1)]
    ops = [draw(st.sampled_from(sorted(SIMPLE))) for _ in range(n)]
    scales = [draw(st.sampled_from([1.0, 0.5, -1.0])) for _ in range(n)]
    return cmds, ops, scales


@FAST
@given(
    shape=tile_shapes(max_dims=3, max_size=256),
    program=reduce_programs(),
    dtype=st.sampled_from((FP32, BF16, FP16)),
    target=targets,
    seed=seeds,
)
def test_activation_reduce_regs_accumulate_across_calls(shape, program, dtype, target, seed):
    """reduce_cmd drives per-partition float32 registers that persist across activations.

    reset/reset_reduce zero them first; reduce/reset_reduce add the sum over all free
    axes of the activation output; idle leaves them; reduce_res reads them out.
    """
    cmds, ops, scales = program
    rng = np.random.default_rng(seed)
    p = shape[0]
    datas = [np.clip(rng.standard_normal(shape), -3, 3).astype(dtype) for _ in cmds]

    def kernel(*xs):
        res = nl.ndarray((p, len(xs)), dtype=nl.float32, buffer=nl.sbuf)
        outs = []
        for i, x in enumerate(xs):
            dst = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(
                dst=dst,
                op=getattr(nl, ops[i]),
                data=load(x),
                scale=scales[i],
                reduce_op=nl.add,
                reduce_res=res[:, i : i + 1],
                reduce_cmd=getattr(nisa.reduce_cmd, cmds[i]),
            )
            outs.append(dst)
        return store(res)

    got = run_kernel(kernel, datas, target)

    regs = np.zeros(p)
    expected = np.zeros((p, len(cmds)))
    magnitude = np.zeros(p)
    bound = np.zeros((p, len(cmds)))
    for i, (cmd, op, scale) in enumerate(zip(cmds, ops, scales)):
        out = SIMPLE[op](f32(datas[i]).astype(np.float64) * scale).reshape(p, -1)
        if cmd in ("reset", "reset_reduce"):
            regs[:] = 0.0
            magnitude[:] = 0.0
        if cmd in ("reduce", "reset_reduce"):
            regs += out.sum(axis=1)
            magnitude += np.abs(out).sum(axis=1)
        expected[:, i] = regs
        bound[:, i] = magnitude
    n = int(np.prod(shape[1:])) * len(cmds)
    assert np.all(np.abs(got - expected) <= bound * (n * 2.0**-24 + 4e-6) + 1e-30), (got, expected)


def test_activation_reduce_hand_case():
    """reset_reduce, then idle (no change), then reduce: registers hold sum(A) + sum(C)."""
    a = np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 4.0]], np.float32)
    b = np.array([[100.0, 100.0, 100.0], [100.0, 100.0, 100.0]], np.float32)
    c = np.array([[0.5, 0.5, 0.5], [2.0, -3.0, 1.0]], np.float32)

    def kernel(xa, xb, xc):
        res = nl.ndarray((2, 1), dtype=nl.float32, buffer=nl.sbuf)
        junk = nl.ndarray((2, 3), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=junk, op=nl.copy, data=load(xa), reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        # other engines' instructions and DMAs do not touch the Scalar Engine registers
        tmp = nl.ndarray((2, 3), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=tmp, data1=junk, data2=junk, op=nl.add)
        nisa.activation(dst=junk, op=nl.copy, data=load(xb), reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.idle)
        nisa.activation(
            dst=junk, op=nl.relu, data=load(xc), reduce_op=nl.add, reduce_res=res, reduce_cmd=nisa.reduce_cmd.reduce
        )
        return store(res)

    # A sums: 6, 3. C after relu: 1.5, 3.
    np.testing.assert_array_equal(run_kernel(kernel, [a, b, c]), [[7.5], [6.0]])


def test_activation_reset_zeroes_and_reduce_res_reads_registers():
    a = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)

    def kernel(x):
        res = nl.ndarray((2, 3), dtype=nl.float32, buffer=nl.sbuf)
        out = nl.ndarray((2, 2), dtype=nl.float32, buffer=nl.sbuf)
        tile = load(x)
        nisa.activation(
            dst=out, op=nl.exp, data=tile, reduce_op=nl.add, reduce_res=res[:, 0:1], reduce_cmd=nisa.reduce_cmd.reset
        )
        nisa.activation(
            dst=out,
            op=nl.square,
            data=tile,
            reduce_op=nl.add,
            reduce_res=res[:, 1:2],
            reduce_cmd=nisa.reduce_cmd.reset_reduce,
        )
        nisa.activation(
            dst=out, op=nl.copy, data=tile, scale=-1.0, reduce_res=res[:, 2:3], reduce_cmd=nisa.reduce_cmd.idle
        )
        return store(res), store(out)

    res, out = run_kernel(kernel, [a])
    np.testing.assert_array_equal(res, [[0.0, 5.0, 5.0], [0.0, 25.0, 25.0]])
    np.testing.assert_array_equal(out, -a)


@FAST
@given(
    shape=tile_shapes(max_dims=3, max_size=256),
    op=st.sampled_from(sorted(SIMPLE)),
    out=st.sampled_from(FLOATS),
    target=targets,
    seed=seeds,
)
def test_activation_reduce_sums_all_free_axes(shape, op, out, target, seed):
    """A single reset_reduce gives the per-partition sum of op(data * scale + bias) over every free axis."""
    rng = np.random.default_rng(seed)
    p = shape[0]
    data = np.clip(rng.standard_normal(shape), -3, 3).astype(np.float32)
    bias = rng.uniform(-1, 1, size=(p, 1)).astype(np.float32)

    def kernel(x, b):
        dst = nl.ndarray(x.shape, dtype=out, buffer=nl.sbuf)
        res = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(
            dst=dst,
            op=getattr(nl, op),
            data=load(x),
            bias=load(b),
            scale=0.5,
            reduce_op=nl.add,
            reduce_res=res,
            reduce_cmd=nisa.reduce_cmd.reset_reduce,
        )
        return store(dst), store(res)

    got_dst, got_res = run_kernel(kernel, [data, bias], target)
    z = (data.reshape(p, -1) * np.float32(0.5) + bias).astype(np.float64)
    act = SIMPLE[op](z)
    assert_activation_close(got_dst, act.reshape(shape), out)
    ref = act.sum(axis=1, keepdims=True)
    bound = np.abs(act).sum(axis=1, keepdims=True) * (act.shape[1] * 2.0**-24 + 4e-6)
    assert np.all(np.abs(got_res - ref) <= bound + 1e-30)
    assert got_res.dtype == FP32


@FAST
@given(shape=tile_shapes(max_dims=2), dtype=st.sampled_from((FP32, BF16, FP16)), target=targets, seed=seeds)
def test_activation_copy_psum_in_and_out(shape, dtype, target, seed):
    """data and dst may be in PSUM; copy with scale 1 and no bias is exact."""
    a = random_values(np.random.default_rng(seed), shape, dtype)
    got = run_tile(
        lambda d, s: nisa.activation(dst=d, op=nl.copy, data=s),
        [a],
        shape,
        dtype,
        target=target,
        in_buffers=["psum"],
        out_buffer="psum",
    )
    np.testing.assert_array_equal(got.astype(np.float64), a.astype(np.float64))
