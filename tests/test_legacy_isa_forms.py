"""Legacy ``neuronxcc.nki`` forms: ``nisa.tensor_scalar_cumulative`` (given ``dst=`` or returned),
``nisa.dma_transpose`` returning its result with a ``dge_mode``, and ``neuronxcc.nki.isa.constants``.

Each result is compared with a numpy reference written here; negative tests check that the
error names the kernel's file:line, the instruction, the operand and the rule.
"""

import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nkisim
import nkisim.nki.legacy as nki
import nkisim.nki.legacy.isa as nisa
import nkisim.nki.legacy.language as nl
from nkisim.errors import OperandError, ShapeError
from nkisim.frontend.legacy_launch import run_legacy

RNG = np.random.default_rng(29)
HERE = r"test_legacy_isa_forms\.py:\d+: "

#: numpy's function for each ALU op used here.
NP_OPS = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "maximum": np.maximum,
    "minimum": np.minimum,
}
#: The accumulator's start under ``reset_reduce``: the identity of the scan's op.
IDENTITY = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}


def scan(x, op0, imm0, op1, start):
    """``reg = op1(op0(x[:, i], imm0), reg); out[:, i] = reg`` per row, in float32, one column at a time."""
    x = np.asarray(x, np.float32)
    reg = np.broadcast_to(np.asarray(start, np.float32).reshape(-1), (x.shape[0],)).copy()
    imm = np.broadcast_to(np.asarray(imm0, np.float32).reshape(-1, 1), (x.shape[0], 1))[:, 0]
    out = np.empty_like(x)
    for i in range(x.shape[1]):
        reg = NP_OPS[op1](NP_OPS[op0](x[:, i], imm), reg).astype(np.float32)
        out[:, i] = reg
    return out


def opcodes(kernel, *args, target="trn1"):
    return [r.opcode for r in run_legacy(kernel, args, {}, target=target).profile.instructions]


# -- neuronxcc.nki.isa.constants --------------------------------------------------------


def test_isa_constants_import_through_the_alias_and_name_nisas_enums():
    nkisim.install_nki_alias()
    try:
        import neuronxcc.nki.isa as legacy_isa
        from neuronxcc.nki.isa.constants import dge_mode, dma_engine, engine, fp32, nc_version, oob_mode, reduce_cmd

        assert legacy_isa is nisa
        assert (dge_mode, engine, oob_mode, reduce_cmd) == (nisa.dge_mode, nisa.engine, nisa.oob_mode, nisa.reduce_cmd)
        assert (dma_engine, nc_version, fp32) == (nisa.dma_engine, nisa.nc_version, nisa.fp32)
        assert legacy_isa.constants.engine.tensor is nisa.tensor_engine
        # the values the legacy API documents
        assert [m.name for m in (dge_mode.none, dge_mode.swdge, dge_mode.hwdge, dge_mode.unknown)] == [
            "none",
            "swdge",
            "hwdge",
            "unknown",
        ]
        assert {"reset_reduce", "reduce", "load_reduce", "idle"} <= set(reduce_cmd.__members__)
        assert {"error", "skip"} <= set(oob_mode.__members__)
    finally:
        nkisim.uninstall_nki_alias()
    assert "neuronxcc.nki.isa.constants" not in sys.modules


def test_the_constants_module_is_importable_without_the_alias():
    from nkisim.nki.legacy.isa import constants

    assert constants.dge_mode.hwdge is nisa.dge_mode.hwdge
    assert sorted(constants.__all__) == sorted(
        ["dge_mode", "dma_engine", "engine", "fp32", "nc_version", "oob_mode", "reduce_cmd"]
    )


# -- tensor_scalar_cumulative -------------------------------------------------------------


@nki.jit
def _cumulative_into(x, imm0, op0, op1):
    """``imm0``: an HBM column (one value per partition) or a Python float."""
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    imm = imm0 if isinstance(imm0, float) else nl.load(imm0)
    dst = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_cumulative(dst=dst, src=nl.load(x), op0=op0, op1=op1, imm0=imm)
    nl.store(out, dst)
    return out


@settings(max_examples=25, deadline=None)
@given(
    p=st.integers(1, 128),
    n=st.integers(1, 96),
    op0=st.sampled_from(["add", "subtract", "multiply", "maximum"]),
    op1=st.sampled_from(sorted(NP_OPS)),
    vector_imm=st.booleans(),
)
def test_cumulative_into_a_given_dst_is_the_pseudo_code_scan(p, n, op0, op1, vector_imm):
    x = RNG.uniform(0.8, 1.2, (p, n)).astype(np.float32)
    imm0 = RNG.uniform(-0.1, 0.1, (p, 1)).astype(np.float32) if vector_imm else 0.5
    expected = scan(x, op0, imm0, op1, IDENTITY[op1])
    got = _cumulative_into(x, imm0, getattr(nl, op0), getattr(nl, op1))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@nki.jit
def _cumulative_returned(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    y = nisa.tensor_scalar_cumulative(src=nl.load(x), op0=nl.multiply, op1=nl.add, imm0=2.0)
    nl.store(out, y)
    return out


def test_without_dst_the_result_is_returned_shaped_and_typed_as_src():
    x = RNG.uniform(-1, 1, (64, 40)).astype(ml_dtypes.bfloat16)
    expected = np.cumsum(x.astype(np.float32) * 2, axis=1).astype(ml_dtypes.bfloat16)
    got = _cumulative_returned(x)
    assert got.dtype == ml_dtypes.bfloat16 and got.shape == (64, 40)
    np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32), rtol=2**-7)


@nki.jit
def _cumulative_assigned(x):
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    t[...] = nisa.tensor_scalar_cumulative(src=nl.load(x), op0=nl.add, op1=nl.maximum, imm0=0.0)
    nl.store(out, t)
    return out


def test_a_returned_result_assigned_to_a_tile_is_written_there_without_a_copy():
    x = RNG.normal(size=(32, 50)).astype(np.float32)
    np.testing.assert_array_equal(_cumulative_assigned(x), np.maximum.accumulate(x, axis=1))
    assert opcodes(_cumulative_assigned, x).count("tensor_copy") == 0


@nki.jit
def _cumulative_chain(x, start):
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    first = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    second = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_cumulative(
        dst=first, src=t, op0=nl.add, op1=nl.add, imm0=0.0, imm1=nl.load(start), reduce_cmd=nisa.reduce_cmd.load_reduce
    )
    nisa.tensor_scalar_cumulative(
        dst=second, src=t, op0=nl.subtract, op1=nl.add, imm0=1.0, reduce_cmd=nisa.reduce_cmd.reduce
    )
    nl.store(out, second)
    return out


def test_load_reduce_starts_at_imm1_and_reduce_continues_the_accumulators():
    x = RNG.integers(-4, 5, (16, 12)).astype(np.float32)
    start = RNG.integers(-10, 10, (16, 1)).astype(np.float32)
    after_first = scan(x, "add", 0.0, "add", start)[:, -1]
    expected = scan(x, "subtract", 1.0, "add", after_first)
    np.testing.assert_array_equal(_cumulative_chain(x, start), expected)


@nki.jit
def _cumulative_load_without_imm1(x):
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    y = nisa.tensor_scalar_cumulative(
        src=nl.load(x), op0=nl.add, op1=nl.add, imm0=0.0, reduce_cmd=nisa.reduce_cmd.load_reduce
    )
    nl.store(out, y)
    return out


def test_load_reduce_without_imm1_is_refused():
    with pytest.raises(
        OperandError, match=HERE + r"nisa\.tensor_scalar_cumulative \[Vector, trn1\]: imm1 is required with reduce_cmd"
    ):
        _cumulative_load_without_imm1(np.ones((4, 4), np.float32))


@nki.jit
def _cumulative_positional(x):
    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    y = nisa.tensor_scalar_cumulative(nl.load(x), nl.add, nl.add, 0.0)
    nl.store(out, y)
    return out


def test_cumulative_arguments_are_keywords_only():
    with pytest.raises(OperandError, match=HERE + r"nisa\.tensor_scalar_cumulative: takes at most 0 positional"):
        _cumulative_positional(np.ones((4, 4), np.float32))


# -- dma_transpose returning its result -------------------------------------------------


@nki.jit
def _transpose_from_hbm(a):
    b = nisa.dma_transpose(a[:, :])
    out = nl.ndarray(b.shape, b.dtype, buffer=nl.shared_hbm)
    nl.store(out, b)
    return out


@nki.jit
def _transpose_in_sbuf(a):
    b = nisa.dma_transpose(nl.load(a)[:, :], dge_mode=nisa.dge_mode.none)
    out = nl.ndarray(b.shape, b.dtype, buffer=nl.shared_hbm)
    nl.store(out, b)
    return out


@settings(max_examples=15, deadline=None)
@given(
    p=st.integers(1, 128),
    f=st.integers(1, 128),
    dtype=st.sampled_from([np.float32, np.float16, ml_dtypes.bfloat16, np.int8]),
    kernel=st.sampled_from([_transpose_from_hbm, _transpose_in_sbuf]),
)
def test_dma_transpose_returns_the_transposed_tile(p, f, dtype, kernel):
    a = RNG.integers(-100, 100, (p, f)).astype(dtype)
    got = kernel(a)
    assert got.dtype == a.dtype
    np.testing.assert_array_equal(got, np.transpose(a))


@nki.jit(platform_target="trn2")
def _transpose_hwdge(a):
    b = nisa.dma_transpose(a[:, :], dge_mode=nisa.dge_mode.hwdge)
    out = nl.ndarray(b.shape, b.dtype, buffer=nl.shared_hbm)
    nl.store(out, b)
    return out


def test_dma_transpose_through_the_hardware_dge():
    a = RNG.uniform(-8, 8, (16, 128)).astype(np.float16)
    np.testing.assert_array_equal(_transpose_hwdge(a), a.T)


def test_a_returned_transpose_wider_than_the_partitions_is_refused():
    with pytest.raises(ShapeError, match=HERE + r"nisa\.dma_transpose \[trn2\]: partition dim 256 exceeds 128$"):
        _transpose_hwdge(np.zeros((16, 256), np.float16))


def test_a_hardware_dge_transpose_of_other_than_16_rows_is_refused():
    with pytest.raises(
        ShapeError, match=HERE + r"nisa\.dma_transpose \[DMA, trn2\]: src shape\[0\] is 32; a hwdge transpose needs 16"
    ):
        _transpose_hwdge(np.zeros((32, 128), np.float16))


@nki.jit
def _transpose_swdge(a):
    b = nisa.dma_transpose(a[:, :], dge_mode=nisa.dge_mode.swdge)
    out = nl.ndarray(b.shape, b.dtype, buffer=nl.shared_hbm)
    nl.store(out, b)
    return out


def test_a_software_dge_for_a_direct_transpose_is_refused():
    with pytest.raises(
        OperandError, match=HERE + r"nisa\.dma_transpose \[DMA, trn1\]: dge_mode swdge is not valid for a direct"
    ):
        _transpose_swdge(np.zeros((8, 8), np.float32))
