"""A DMA load into a new SBUF tile may keep its values in HBM until the tile is used (nkisim.memory.deferred).

Every kernel here runs twice, with loads that wait and with every load copied at once (``Machine._may_wait``
patched to None), and the two runs must agree bit for bit: outputs, timeline and findings. The outputs are
also compared with numpy formulas written here. A count of the loads that waited shows the first run took the
path under test.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.memory.deferred import DeferredCopies
from nkisim.sim import Machine

ROWS, COLS = 512, 64


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def _load(src):
    tile = nl.ndarray(src.shape, src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=src)
    return tile


def _blocks(rows: int):
    return [slice(r, r + 128) for r in range(0, rows, 128)]


def add_by_tiles(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for rows in _blocks(a.shape[0]):
        x, y = _load(a[rows]), _load(b[rows])
        total = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=total, data1=x, data2=y, op=nl.add)
        nisa.dma_copy(dst=out[rows], src=total)
    return out


def store_loaded(a):
    """A waiting tile stored to HBM again: the store reads the HBM values it waits in."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for rows in _blocks(a.shape[0]):
        nisa.dma_copy(dst=out[rows], src=_load(a[rows]))
    return out


def read_by_a_view(a):
    out = nl.ndarray((a.shape[0], 32), a.dtype, buffer=nl.shared_hbm)
    for rows in _blocks(a.shape[0]):
        x = _load(a[rows])
        half = nl.ndarray((128, 32), a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=half, src=x[:, 16:48])
        nisa.dma_copy(dst=out[rows], src=half)
    return out


def written_in_place(a, b):
    """The waiting tile is written (``x = x * y``) before it is read whole."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for rows in _blocks(a.shape[0]):
        x, y = _load(a[rows]), _load(b[rows])
        nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.multiply)
        nisa.tensor_tensor(dst=y, data1=x, data2=y, op=nl.subtract)
        nisa.dma_copy(dst=out[rows], src=y)
    return out


def source_overwritten(a, b):
    """A tile loaded from ``scratch`` keeps the values it was loaded with after ``scratch`` is written again."""
    scratch = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=scratch, src=a)
    for rows in _blocks(a.shape[0]):
        before = _load(scratch[rows])
        nisa.dma_copy(dst=scratch[rows], src=b[rows])
        total = nl.ndarray(before.shape, a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=total, data1=before, data2=_load(scratch[rows]), op=nl.add)
        nisa.dma_copy(dst=out[rows], src=total)
    return out


def other_engines(a, b):
    """A matmul, an activation and a power read waiting tiles: their copies are made first."""
    out = nl.ndarray((64, 64), nl.float32, buffer=nl.shared_hbm)
    x, y = _load(a[0:128]), _load(b[0:128])
    acc = nl.ndarray((64, 64), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=x, moving=y)
    got = nl.ndarray((64, 64), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=got, src=acc)
    powered = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=powered, data1=_load(a[128:256]), data2=_load(b[128:256]), op=nl.maximum)
    scaled = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=scaled, op=nl.exp, data=_load(a[256:384]), scale=0.5)
    both = nl.ndarray((64, 64), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=both, data1=got, data2=scaled[0:64, :], op=nl.add)
    nisa.tensor_tensor(dst=both, data1=both, data2=powered[0:64, :], op=nl.add)
    nisa.dma_copy(dst=out, src=both)
    return out


def printed(a):
    x = _load(a[0:128])
    nl.device_print("loaded", x)
    out = nl.ndarray((128, COLS), a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)
    return out


def _records(profile) -> list[tuple]:
    tl = profile._tl
    return list(zip(tl.opcode, tl.track, tl.start_ns, tl.end_ns, tl.busy_ns, tl.producer, tl.wait_ns, strict=True))


def _run_both(kernel, inputs, monkeypatch, check="warn", target=None):
    """The run with waiting loads and the count of loads that waited, checked against the run with every copy
    made at once."""
    waited, given = [], []
    defer, settle = DeferredCopies.defer, DeferredCopies.settle

    def counting(self, dst, src):
        kept = defer(self, dst, src)
        waited.append(kept)
        return kept

    def substituting(self, *args):
        substitutes = settle(self, *args)
        given.extend(substitutes or ())
        return substitutes

    with monkeypatch.context() as patch:
        patch.setattr(DeferredCopies, "defer", counting)
        patch.setattr(DeferredCopies, "settle", substituting)
        lazy = nkisim.run(kernel, inputs, check=check, target=target)
    _run_both.given = given  # the operands given an HBM view, for the tests that look
    with monkeypatch.context() as patch:
        patch.setattr(Machine, "_may_wait", lambda self, spec, ops: None)
        eager = nkisim.run(kernel, inputs, check=check, target=target)
    outs = lazy.outputs if isinstance(lazy.outputs, tuple) else (lazy.outputs,)
    eager_outs = eager.outputs if isinstance(eager.outputs, tuple) else (eager.outputs,)
    for got, want in zip(outs, eager_outs, strict=True):
        assert got.tobytes() == want.tobytes()
    assert _records(lazy.profile) == _records(eager.profile)
    assert [repr(d) for d in lazy.profile.diagnostics] == [repr(d) for d in eager.profile.diagnostics]
    return lazy, sum(waited)


@pytest.mark.parametrize("check", ["warn", "off", "strict"])
def test_an_add_by_tiles_reads_its_loads_from_hbm(check, monkeypatch) -> None:
    a, b = rand(ROWS, COLS), rand(ROWS, COLS, seed=1)
    result, waited = _run_both(add_by_tiles, [a, b], monkeypatch, check)
    assert waited == 2 * ROWS // 128
    assert _run_both.given == ["data1", "data2"] * (ROWS // 128)
    np.testing.assert_array_equal(result.outputs, a + b)


@pytest.mark.parametrize(
    "kernel, expected",
    [
        (store_loaded, lambda a, b: a),
        (read_by_a_view, lambda a, b: a[:, 16:48]),
        (written_in_place, lambda a, b: a * b - b),
        (source_overwritten, lambda a, b: a + b),
    ],
    ids=["stored", "view", "in-place", "source-overwritten"],
)
def test_every_other_use_sees_the_loaded_values(kernel, expected, monkeypatch) -> None:
    a, b = rand(ROWS, COLS), rand(ROWS, COLS, seed=1)
    inputs = [a] if kernel is store_loaded or kernel is read_by_a_view else [a, b]
    result, waited = _run_both(kernel, inputs, monkeypatch)
    assert waited > 0
    np.testing.assert_array_equal(result.outputs, expected(a, b))


def test_instructions_that_read_layouts_get_the_copies_first(monkeypatch) -> None:
    a, b = rand(ROWS, COLS), rand(ROWS, COLS, seed=1)
    result, waited = _run_both(other_engines, [a, b], monkeypatch)
    assert waited == 5
    product = a[0:128].T @ b[0:128]
    expected = product + np.exp(0.5 * a[256:320]) + np.maximum(a[128:192], b[128:192])
    np.testing.assert_allclose(result.outputs, expected, rtol=1e-5, atol=1e-5)


def test_a_print_shows_the_loaded_values(monkeypatch, capsys) -> None:
    a = np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS)
    result, waited = _run_both(printed, [a], monkeypatch)
    assert waited == 1
    text = capsys.readouterr().out
    assert text.count("6.400e+01") == 2 and text.count("8.191e+03") == 2 and "nan" not in text.lower()  # both runs
    np.testing.assert_array_equal(result.outputs, a[0:128])


def test_a_tile_freed_while_its_load_waits_leaves_poison_for_the_next(monkeypatch) -> None:
    """The next tile over the same bytes, read in part before it is written, reads NaN as always."""

    def kernel(a):
        outs = []
        for rows in _blocks(a.shape[0]):
            _load(a[rows])  # dropped at once: its load never used
            fresh = nl.ndarray((128, COLS), a.dtype, buffer=nl.sbuf)
            part = nl.ndarray((128, 8), a.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=part, src=fresh[:, 0:8])
            out = nl.ndarray((128, 8), a.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=part)
            outs.append(out)
        return tuple(outs)

    with pytest.warns(nkisim.CheckWarning, match="never written"):
        result, waited = _run_both(kernel, [rand(ROWS, COLS)], monkeypatch)
    assert waited == ROWS // 128
    assert all(np.isnan(out).all() for out in result.outputs)


# -- random programs ---------------------------------------------------------------------

_STEP = st.one_of(
    st.tuples(st.just("load"), st.integers(0, 3), st.integers(0, 3)),  # tile slot <- scratch block
    st.tuples(st.just("store"), st.integers(0, 3), st.integers(0, 3)),  # scratch block <- tile slot
    st.tuples(st.just("add"), st.integers(0, 3), st.integers(0, 3)),  # slot i <- slot i + slot j (new tile)
    st.tuples(st.just("scale"), st.integers(0, 3), st.integers(0, 3)),  # slot i *= slot j, in place
    st.tuples(st.just("half"), st.integers(0, 3), st.integers(0, 3)),  # slot i[:, :32] <- slot j[:, 32:]
    st.tuples(st.just("affine"), st.integers(0, 3), st.integers(0, 3)),  # slot i <- slot j * 0.5 + 1 (new tile)
)


def _program_kernel(steps):
    def kernel(a):
        scratch = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=scratch, src=a)
        blocks = _blocks(a.shape[0])
        slots = [_load(a[blocks[i]]) for i in range(4)]
        for op, i, j in steps:
            if op == "load":
                slots[i] = _load(scratch[blocks[j]])
            elif op == "store":
                nisa.dma_copy(dst=scratch[blocks[j]], src=slots[i])
            elif op == "add":
                total = nl.ndarray((128, COLS), a.dtype, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=total, data1=slots[i], data2=slots[j], op=nl.add)
                slots[i] = total
            elif op == "scale":
                nisa.tensor_tensor(dst=slots[i], data1=slots[i], data2=slots[j], op=nl.multiply)
            elif op == "affine":
                scaled = nl.ndarray((128, COLS), a.dtype, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=scaled, data=slots[j], op0=nl.multiply, operand0=0.5, op1=nl.add, operand1=1.0)
                slots[i] = scaled
            else:
                nisa.tensor_copy(dst=slots[i][:, 0:32], src=slots[j][:, 32:64])
        out = nl.ndarray((4 * 128, COLS), a.dtype, buffer=nl.shared_hbm)
        for i, tile in enumerate(slots):
            nisa.dma_copy(dst=out[blocks[i]], src=tile)
        return scratch, out

    return kernel


def _program_reference(a: np.ndarray, steps) -> tuple[np.ndarray, np.ndarray]:
    scratch = a.copy()
    blocks = _blocks(a.shape[0])
    slots = [a[blocks[i]].copy() for i in range(4)]
    for op, i, j in steps:
        if op == "load":
            slots[i] = scratch[blocks[j]].copy()
        elif op == "store":
            scratch[blocks[j]] = slots[i]
        elif op == "add":
            slots[i] = slots[i] + slots[j]
        elif op == "scale":
            slots[i] = slots[i] * slots[j]
        elif op == "affine":
            slots[i] = slots[j] * np.float32(0.5) + np.float32(1.0)
        else:
            slots[i] = slots[i].copy()
            slots[i][:, 0:32] = slots[j][:, 32:64]
    return scratch, np.concatenate(slots)


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(_STEP, min_size=1, max_size=14))
def test_random_programs_agree_with_numpy_and_with_every_copy_made(steps) -> None:
    a = rand(ROWS, COLS, seed=3)
    with pytest.MonkeyPatch.context() as monkeypatch:
        result, _ = _run_both(_program_kernel(steps), [a], monkeypatch)
    with np.errstate(all="ignore"):
        scratch, out = _program_reference(a, steps)
    assert result.outputs[0].tobytes() == scratch.tobytes()
    assert result.outputs[1].tobytes() == out.tobytes()


def test_a_load_that_rounds_to_tfloat32_is_made_at_once(monkeypatch) -> None:
    """float32 into a tfloat32 tile is a cast (round to nearest even at 10 mantissa bits), not a copy to defer."""
    a = np.array([[1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-12, -(1 + 5 * 2**-12)]] * 128, np.float32)

    def kernel(a):
        t = nl.ndarray(a.shape, nl.tfloat32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        widened = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=widened, src=t)
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=widened)
        return out

    result, waited = _run_both(kernel, [a], monkeypatch)
    assert waited == 0
    expected = np.array([1.0, 1 + 2 * 2**-10, 1.0, -(1 + 2**-10)], np.float32)
    np.testing.assert_array_equal(result.outputs, np.broadcast_to(expected, a.shape))


# -- NaN payloads: of two NaN operands, numpy's loops keep either by layout ---------------------------------


def _nan_tiles(shape, first: int, second: int) -> list[np.ndarray]:
    """Two float32 inputs, every element a quiet NaN, with payloads ``first`` and ``second``."""
    return [np.full(shape, bits, np.uint32).view(np.float32) for bits in (first, second)]


def _elementwise_of_loads(dst_dtype, op, scalar_tile: bool):
    def kernel(a, b):
        x = _load(a)
        t = nl.ndarray(a.shape, dst_dtype, buffer=nl.sbuf)
        if scalar_tile:  # a (P, 1) column of b's NaNs as operand0, a load of its own
            column = _load(b[:, 0:1] if len(b.shape) == 2 else b[:, 0, 0:1])
            nisa.tensor_scalar(dst=t, data=x, op0=op, operand0=column)
        else:
            nisa.tensor_tensor(dst=t, data1=x, data2=_load(b), op=op)
        out = nl.ndarray(a.shape, dst_dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    return kernel


@pytest.mark.parametrize("shape", [(128, 100), (2, 63), (128, 4, 25)])
@pytest.mark.parametrize("dst_dtype", ["float32", "float16", "tfloat32", "bfloat16"])
@pytest.mark.parametrize("op", ["add", "multiply"])
@pytest.mark.parametrize("scalar_tile", [False, True], ids=["tensor_tensor", "tensor_scalar"])
def test_two_nans_keep_the_payload_a_run_with_copies_keeps(shape, dst_dtype, op, scalar_tile, monkeypatch) -> None:
    """NaN + NaN keeps one operand's payload, and which one numpy's loops keep depends on the operands' layout:
    where it may differ the loads do not wait (``_run_both`` compares the bits). Every element is a NaN."""
    a, b = _nan_tiles(shape, 0x7FC02000, 0x7FC04000)
    kernel = _elementwise_of_loads(getattr(nl, dst_dtype), getattr(nl, op), scalar_tile)
    result, _ = _run_both(kernel, [a, b], monkeypatch)
    assert np.isnan(result.outputs.astype(np.float32)).all()


def test_a_scalar_operand_that_is_not_nan_lets_the_load_wait(monkeypatch) -> None:
    """``data * 2.0``: a NaN of ``data`` stays its own NaN in any loop, so the load waits."""
    a = np.full((2, 63), 0x7FC02000, np.uint32).view(np.float32)

    def kernel(a):
        t = nl.ndarray(a.shape, nl.float16, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=t, data=_load(a), op0=nl.multiply, operand0=2.0)
        out = nl.ndarray(a.shape, nl.float16, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    result, waited = _run_both(kernel, [a], monkeypatch)
    assert waited == 1
    assert (result.outputs.view(np.uint16) == 0x7E01).all()  # float32 payload 0x402000 >> 13, quiet


class _Node:
    """A loaded tile in a reference cycle (parent <-> child): the cycle collector frees it, at any allocation."""

    def __init__(self, tile) -> None:
        self.tile, self.parent = tile, self


def test_tiles_the_cycle_collector_frees_while_a_store_settles_the_copies(monkeypatch) -> None:
    """A store to HBM walks the waiting copies; a collection in that walk may free waiting tiles."""
    a = np.arange(128, dtype=np.float32).reshape(128, 1)

    def kernel(a):
        out = nl.ndarray((128, 1), a.dtype, buffer=nl.shared_hbm)
        for _ in range(3000):
            _Node(_load(a))  # cyclic garbage holding a tile whose load waits
            nisa.dma_copy(dst=out, src=_load(a))
        return out

    result, waited = _run_both(kernel, [a], monkeypatch, check="off")
    assert waited > 0
    np.testing.assert_array_equal(result.outputs, a)


def narrow_matmul_and_activations(a, b, bias):
    """A bfloat16 matmul and activations with scalar scale and bias read their loads from HBM; an activation
    with a tile bias (a column read through a view of a loaded tile) gets the copies first."""
    out = nl.ndarray((64, 64), nl.float32, buffer=nl.shared_hbm)
    acts = nl.ndarray((128, 2 * COLS), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((64, 64), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=_load(a[0:128]), moving=_load(b[0:128]))
    got = nl.ndarray((64, 64), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=got, src=acc)
    nisa.dma_copy(dst=out, src=got)
    for i, column in enumerate((None, bias)):
        scaled = nl.ndarray((128, COLS), nl.float32, buffer=nl.sbuf)
        data = _load(a[128 * (i + 1) : 128 * (i + 2)])
        if column is None:
            nisa.activation(dst=scaled, op=nl.exp, data=data, scale=0.5, bias=0.25)
        else:
            nisa.activation(dst=scaled, op=nl.exp, data=data, scale=0.5, bias=_load(column)[:, 0:1])
        nisa.dma_copy(dst=acts[:, COLS * i : COLS * (i + 1)], src=scaled)
    return out, acts


def test_a_bf16_matmul_and_scalar_activations_read_loads_from_hbm(monkeypatch) -> None:
    import ml_dtypes

    a = rand(ROWS, COLS).astype(ml_dtypes.bfloat16)
    b = rand(ROWS, COLS, seed=1).astype(ml_dtypes.bfloat16)
    bias = rand(128, 2, seed=2)
    result, waited = _run_both(narrow_matmul_and_activations, [a, b, bias], monkeypatch, target="trn2")  # scalar bias
    assert waited == 5
    assert _run_both.given == ["stationary", "moving", "data"]  # not the activation with a tile bias
    product, acts = result.outputs
    wide = a.astype(np.float32)
    np.testing.assert_allclose(product, wide[0:128].T @ b[0:128].astype(np.float32), rtol=1e-5, atol=1e-4)
    expected = [np.exp(0.5 * wide[128:256] + 0.25), np.exp(0.5 * wide[256:384] + bias[:, 0:1])]
    np.testing.assert_allclose(acts.astype(np.float32), np.concatenate(expected, axis=1), rtol=1e-2)


@pytest.mark.parametrize("function", ["exp", "copy", "tanh"])
def test_an_activation_of_nans_keeps_their_payload(function, monkeypatch) -> None:
    """``op(data * 0.5)`` of NaNs of one payload: the same NaN bits whether ``data`` is read from HBM or SBUF
    (``_run_both``); the function may give its own NaN (numpy's ``exp`` does), a copy keeps the payload."""
    (a,) = _nan_tiles((128, 100), 0x7FC02000, 0x7FC02000)[:1]

    def kernel(a):
        t = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=t, op=getattr(nl, function), data=_load(a), scale=0.5)
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    result, waited = _run_both(kernel, [a], monkeypatch)
    assert waited == 1 and _run_both.given == ["data"]
    assert np.isnan(result.outputs).all()
    if function == "copy":
        assert (result.outputs.view(np.uint32) == 0x7FC02000).all()


def test_a_float32_matmul_gets_its_copies_first(monkeypatch) -> None:
    """BLAS is given float32 views in place, and its result can follow their strides: [26, 1].T @ [26, 431] (a
    matrix-vector product) gives other bits from a contiguous HBM view than from SBUF rows here, so the loads of
    a float32 matmul are copied first."""
    a, b = rand(26, 1, seed=4), rand(26, 431, seed=5)

    def kernel(a, b):
        acc = nl.ndarray((1, 431), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=_load(a), moving=_load(b))
        got = nl.ndarray((1, 431), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=got, src=acc)
        out = nl.ndarray((1, 431), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=got)
        return out

    result, waited = _run_both(kernel, [a, b], monkeypatch)
    assert waited == 2 and _run_both.given == []
    np.testing.assert_allclose(result.outputs, a.T @ b, rtol=1e-5, atol=1e-5)


def test_a_load_from_a_transposed_view_is_copied_at_once(monkeypatch) -> None:
    """numpy lays out what it computes in the memory order of the view it reads, and a sum over another order
    rounds otherwise: an activation's reduction of a tile loaded from a transposed HBM view (columns as rows)
    must add the tile's rows in the tile's order, so that load does not wait."""
    parts, free = 128, 512
    a = rand(free, parts, seed=6)

    def kernel(a):
        t = nl.ndarray((parts, free), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a.ap([[1, parts], [parts, free]]))  # t[p, f] = a[f, p]
        dst = nl.ndarray((parts, free), nl.float32, buffer=nl.sbuf)
        sums = nl.ndarray((parts, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(
            dst=dst, op=nl.copy, data=t, scale=1.0, bias=0.0, reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_res=sums
        )
        out = nl.ndarray((parts, 1), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=sums)
        return out

    result, waited = _run_both(kernel, [a], monkeypatch, target="trn2")
    assert waited == 0 and _run_both.given == []
    np.testing.assert_allclose(result.outputs[:, 0], a.sum(axis=0), rtol=1e-4, atol=1e-4)


def test_runs_that_slice_an_hbm_output_leave_nothing_behind() -> None:
    """A view's kept blocks refer to no tensor: six runs that slice their 32 MiB output hold no memory after them,
    without the garbage collector (a kept view would refer back to its tensor, a cycle only it frees)."""
    import gc
    import tracemalloc

    def kernel(x):
        out = nl.ndarray((4096, 2048), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[0:128, 0:256], src=_load(x))
        nisa.dma_copy(dst=out[0:128, 0:256], src=_load(x))
        return x

    x = np.ones((128, 256), np.float32)
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        held = []
        for _ in range(6):
            nkisim.run(kernel, [x])
            held.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
        gc.enable()
    assert max(held) < 4 << 20, [h >> 20 for h in held]


@pytest.mark.parametrize(
    ("source", "tile", "waits"),
    [
        ((128, 2, 32), (128, 64), True),  # the same elements in row-major order: a view of the tile's shape
        ((64, 4, 32), (128, 32), False),  # [:, 0:2] of it: rows 2 apart, no view of [128, 32] but a copy
    ],
)
def test_a_load_of_another_shape_waits_as_a_view_of_the_tiles_shape(source, tile, waits, monkeypatch) -> None:
    a = rand(*source, seed=7)
    block = a if waits else a[:, 0:2]

    def kernel(a):
        t = nl.ndarray(tile, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a if waits else a[:, 0:2])
        doubled = nl.ndarray(tile, nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=doubled, data1=t, data2=t, op=nl.add)
        out = nl.ndarray(tile, nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=doubled)
        return out

    result, waited = _run_both(kernel, [a], monkeypatch)
    assert waited == waits and _run_both.given == (["data1", "data2"] if waits else [])
    np.testing.assert_array_equal(result.outputs, (block + block).reshape(tile))
