"""Sequencer registers: register_alloc/move/load/store, dynamic loops, and registers as scalar offsets.

Registers hold 32 bits (read as signed): a load sign- or zero-extends a narrower
integer, a store keeps the low bytes. Register instructions run on the Sync Engine's
sequencer; costs are hand-computed from the hw constants.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.errors import DtypeError, MemoryKindError, OperandError, ShapeError
from nkisim.hw import load_target

from .conftest import FAST, INT8, INT16, INT32, UINT8, UINT16, UINT32, load, run_kernel, store, targets

INT_DTYPES = (INT32, UINT32, INT16, UINT16, INT8, UINT8)
int32s = st.integers(-(2**31), 2**32 - 1)


def ref_store(value: int, dtype: np.dtype) -> np.ndarray:
    """The low ``itemsize`` bytes of the 32-bit two's complement of ``value`` (little-endian)."""
    low = (value & 0xFFFF_FFFF) & ((1 << (8 * dtype.itemsize)) - 1)
    return np.frombuffer(low.to_bytes(dtype.itemsize, "little"), dtype=dtype).reshape(1, 1)


def ref_signed32(value: int) -> int:
    bits = value & 0xFFFF_FFFF
    return bits - 2**32 if bits >= 2**31 else bits


@FAST
@given(value=int32s, dtype=st.sampled_from(INT_DTYPES), buffer=st.sampled_from(["sbuf", "hbm"]), target=targets)
def test_register_move_then_store_writes_the_low_bytes(value, dtype, buffer, target):
    def kernel():
        reg = nisa.register_alloc()
        nisa.register_move(reg, value)
        if buffer == "hbm":
            out = nl.ndarray((1, 1), dtype=dtype, buffer=nl.shared_hbm)
            nisa.register_store(out, reg)
            return out
        tile = nl.ndarray((1, 1), dtype=dtype, buffer=nl.sbuf)
        nisa.register_store(dst=tile, src=reg)
        return store(tile)

    got = run_kernel(kernel, [], target)
    np.testing.assert_array_equal(got, ref_store(value, dtype))


@FAST
@given(dtype=st.sampled_from(INT_DTYPES), data=st.data(), buffer=st.sampled_from(["sbuf", "hbm"]), target=targets)
def test_register_load_extends_the_value_to_32_bits(dtype, data, buffer, target):
    info = np.iinfo(dtype)
    value = data.draw(st.integers(int(info.min), int(info.max)))
    x = np.array([[value]], dtype=dtype)

    def kernel(src):
        reg = nisa.register_alloc()
        nisa.register_load(reg, src if buffer == "hbm" else load(src))
        tile = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_store(tile, reg)
        return store(tile)

    got = run_kernel(kernel, [x], target)
    np.testing.assert_array_equal(got, np.array([[ref_signed32(value)]], dtype=np.int32))


def test_register_alloc_initial_value_and_register_to_register_move():
    def kernel():
        a = nisa.register_alloc(-5)
        b = nisa.register_alloc()
        nisa.register_move(b, a)  # NKI 0.3+ form: a register as the source
        nisa.register_move(a, 2**32 - 1)
        outs = []
        for reg in (a, b):
            t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.register_store(t, reg)
            outs.append(store(t))
        return tuple(outs)

    a, b = run_kernel(kernel)
    assert (int(a[0, 0]), int(b[0, 0])) == (-1, -5)


def test_registers_read_back_in_python():
    def kernel():
        reg = nisa.register_alloc(3)
        assert bool(reg) and reg.read() == 3
        nisa.register_move(reg, 0)
        assert not reg
        with pytest.raises(TypeError, match="device register"):
            int(reg)
        assert isinstance(reg, nisa.VirtualRegister)

    run_kernel(kernel)


# -- dynamic loops --------------------------------------------------------------------


@FAST
@given(n=st.integers(0, 6), start=st.integers(-3, 3), step=st.integers(1, 3), target=targets)
def test_dynamic_range_runs_between_register_bounds(n, start, step, target):
    def kernel(bound):
        tile = load(bound)
        hi = nisa.register_alloc()
        nisa.register_load(hi, tile)
        lo = nisa.register_alloc(start)
        seen = list(nl.dynamic_range(lo, hi, step))
        assert seen == list(range(start, n, step))
        assert list(nl.dynamic_range(hi)) == list(range(n))
        assert list(nl.dynamic_range(2, 5)) == [2, 3, 4]

    run_kernel(kernel, [np.array([[n]], dtype=np.int32)], target)


@FAST
@given(rows=st.integers(1, 12), cols=st.integers(1, 16), data=st.data(), target=targets)
def test_fori_loop_index_register_drives_a_scalar_offset(rows, cols, data, target):
    """out[i] = sum(a[0..i]) for i < n, with n loaded from memory into a register."""
    n = data.draw(st.integers(0, rows))
    a = np.random.default_rng(rows * cols).standard_normal((rows, cols)).astype(np.float32)
    base = np.full((rows, cols), 7.0, dtype=np.float32)

    def kernel(x, out, count):
        reg = nisa.register_alloc()
        nisa.register_load(reg, count)
        acc = nl.zeros((1, cols), dtype=nl.float32, buffer=nl.sbuf)
        row = nl.ndarray((1, cols), dtype=nl.float32, buffer=nl.sbuf)

        def body(i):
            nisa.dma_copy(dst=row, src=x.ap([[cols, 1], [1, cols]], scalar_offset=i, indirect_dim=0))
            nisa.tensor_tensor(dst=acc, data1=acc, data2=row, op=nl.add)
            nisa.dma_copy(dst=out.ap([[cols, 1], [1, cols]], scalar_offset=i, indirect_dim=0), src=acc)

        nl.fori_loop(0, reg, body)
        return out

    got = run_kernel(kernel, [a, base, np.array([[n]], dtype=np.int32)], target)
    expected = base.copy()
    total = np.zeros(cols, dtype=np.float32)
    for i in range(n):
        total = (total + a[i]).astype(np.float32)
        expected[i] = total
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("count", [0, 1, 4])
def test_while_loop_and_while_reg_count_down(count):
    def kernel(c):
        counter = load(c)
        one = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=one, value=1)
        reg = nisa.register_alloc()
        nisa.register_load(reg, counter)
        runs = []

        def body(r):
            runs.append(r.read())
            nisa.tensor_tensor(dst=counter, data1=counter, data2=one, op=nl.subtract)
            nisa.register_load(r, counter)
            return r

        nl.while_loop(reg, body)
        assert runs == list(range(count, 0, -1))
        nisa.register_move(reg, 2)
        passes = 0
        while reg:  # a register's truth is its value, read when the loop tests it
            passes += 1
            nisa.register_move(reg, 0)
        assert passes == 1

    run_kernel(kernel, [np.array([[count]], dtype=np.int32)])


# -- timing ---------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_register_instructions_are_sync_sequencer_instructions(target):
    hw = load_target(target)
    clock = hw.sync_engine.clock_ghz

    def kernel(x):
        reg = nisa.register_alloc()
        nisa.register_move(reg, 1)
        tile = load(x)
        nisa.register_load(reg, tile)
        nisa.register_load(reg, x)
        nisa.register_store(tile, reg)

    move, dma, load_sbuf, load_hbm, store_sbuf = nkisim.run(
        kernel, [np.zeros((1, 1), np.int32)], target=target
    ).profile.instructions
    assert {move.engine, load_sbuf.engine, load_hbm.engine, store_sbuf.engine} == {"Sync"}
    assert move.start_ns == 0.0
    assert move.end_ns == pytest.approx(hw.sequencer.register_op_cycles / clock)
    # the load waits for the DMA that fills the tile, through a semaphore
    assert load_sbuf.start_ns == pytest.approx(dma.end_ns + hw.sync.semaphore_latency_ns)
    assert load_sbuf.duration_ns == pytest.approx(hw.sequencer.register_sbuf_access_cycles / clock)
    assert load_hbm.start_ns == pytest.approx(load_sbuf.end_ns)
    assert load_hbm.duration_ns == pytest.approx(hw.dma.fixed_latency_ns)
    assert store_sbuf.start_ns == pytest.approx(load_hbm.end_ns)


def test_a_dma_with_a_register_offset_waits_for_the_register():
    hw = load_target("trn2")

    def kernel(x, s):
        where = load(s)
        reg = nisa.register_alloc()
        nisa.register_load(reg, where)
        dst = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=dst, src=x.ap([[4, 1], [1, 4]], scalar_offset=reg, indirect_dim=0))
        return store(dst)

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    result = nkisim.run(kernel, [x, np.array([[2]], np.int32)], target="trn2")
    np.testing.assert_array_equal(result.outputs, x[2:3])
    _, reg_load, gather, _ = result.profile.instructions
    assert gather.producer == reg_load.index
    assert gather.start_ns == pytest.approx(reg_load.end_ns + hw.sync.semaphore_latency_ns)


# -- rules ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "error", "match"),
    [
        (lambda r, t: nisa.register_load(r, nl.ndarray((1, 1), nl.int32, buffer=nl.psum)), MemoryKindError, "SBUF"),
        (lambda r, t: nisa.register_load(r, nl.ndarray((1, 1), nl.float32)), DtypeError, "integer type"),
        (lambda r, t: nisa.register_load(r, nl.ndarray((1, 1), nl.bfloat16)), DtypeError, "integer type"),
        (lambda r, t: nisa.register_load(r, nl.ndarray((1, 2), nl.int32)), ShapeError, "exactly one element"),
        (lambda r, t: nisa.register_load(r, nl.ndarray((2, 1), nl.int32)), ShapeError, "exactly one element"),
        (lambda r, t: nisa.register_store(nl.ndarray((1, 1), nl.float16), r), DtypeError, "integer type"),
        (lambda r, t: nisa.register_store(nl.ndarray((1, 3), nl.int8), r), ShapeError, "exactly one element"),
        (lambda r, t: nisa.register_load(t, t), OperandError, "dst"),
        (lambda r, t: nisa.register_store(r, r), OperandError, "dst"),
        (lambda r, t: nisa.register_move(r, 2**32), OperandError, "does not fit"),
        (lambda r, t: nisa.register_move(r, -(2**31) - 1), OperandError, "does not fit"),
        (lambda r, t: nisa.register_move(r, 1.5), OperandError, "compile-time integer"),
        (lambda r, t: nisa.register_alloc(2.0), OperandError, "must be an integer"),
        (lambda r, t: nisa.register_alloc(2**33), OperandError, "does not fit"),
        (lambda r, t: list(nl.dynamic_range(nisa.register_alloc())), OperandError, "read before"),
        (lambda r, t: list(nl.dynamic_range(r, step=0)), OperandError, "positive"),
        (lambda r, t: list(nl.dynamic_range(r, step=r)), OperandError, "positive"),
        (lambda r, t: list(nl.dynamic_range(1.5)), OperandError, "integer or a register"),
        (lambda r, t: nl.while_loop(r, lambda reg: 3), OperandError, "must be a register"),
    ],
)
def test_register_rules(body, error, match):
    def kernel():
        reg = nisa.register_alloc(2)
        tile = nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        body(reg, tile)

    with pytest.raises(error, match=match):
        run_kernel(kernel)


def test_register_errors_name_the_sync_engine_and_the_line():
    def kernel():
        reg = nisa.register_alloc()
        nisa.register_load(reg, nl.ndarray((1, 1), nl.float32))

    with pytest.raises(DtypeError, match=r"test_registers\.py:\d+: nisa\.register_load \[Sync, trn2\]: src dtype"):
        run_kernel(kernel, target="trn2")


def test_profile_from_shapes_cannot_run_a_register_bounded_loop():
    def kernel(count):
        reg = nisa.register_alloc()
        nisa.register_load(reg, count)
        for _ in nl.dynamic_range(reg):
            pass

    with pytest.raises(OperandError, match=r"nkisim\.profile does not compute"):
        nkisim.profile(kernel, [((1, 1), np.int32)])
