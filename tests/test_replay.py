"""``nkisim.compile``: a kernel recorded once and replayed on new values.

Every replay is compared with a fresh ``nkisim.run`` on the same values (outputs bit for
bit, the profile's instructions and findings) and with a numpy formula written here.
"""

from __future__ import annotations

import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nkisim
import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.errors import CheckError, CheckWarning, OperandError, SignatureError
from nkisim.examples import matmul as mm
from nkisim.examples.attention import causal_attention
from nkisim.examples.cumsum import cumsum_rows
from nkisim.examples.layernorm import layernorm
from nkisim.examples.pooling import avg_pool2d
from nkisim.examples.rmsnorm import rmsnorm
from nkisim.examples.softmax import softmax_rows
from nkisim.examples.tensor_add import nki_tensor_add
from nkisim.examples.transpose import transpose2d
from nkisim.hw import load_target

BF16 = np.dtype(ml_dtypes.bfloat16)
TARGETS = ("trn1", "trn2", "trn3")
REPLAYS = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _normal(rng: np.random.Generator, shape: tuple[int, ...], dtype: object = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def _softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _attention(q_t: np.ndarray, k_t: np.ndarray, v: np.ndarray) -> np.ndarray:
    q, k = q_t.T.astype(np.float64), k_t.T.astype(np.float64)
    scores = q @ k.T / np.sqrt(q.shape[1])
    scores[np.triu(np.ones(scores.shape, dtype=bool), 1)] = -np.inf
    return _softmax(scores) @ v.astype(np.float64)


def _layernorm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=1, keepdims=True)
    return (x64 - mean) / np.sqrt(var + 1e-5) * gamma + beta


#: name -> (kernel, inputs from a generator, numpy reference, tolerance)
CASES = {
    "add": (
        nki_tensor_add,
        lambda rng: [_normal(rng, (256, 1024)), _normal(rng, (256, 1024))],
        lambda a, b: a.astype(np.float64) + b,
        1e-6,
    ),
    "matmul_tiled_f32": (
        mm.matmul_tiled,
        lambda rng: [_normal(rng, (256, 128)), _normal(rng, (256, 512))],
        lambda lt, r: lt.astype(np.float64).T @ r,
        1e-4,
    ),
    "matmul_hoisted_bf16": (
        mm.matmul_hoisted,
        lambda rng: [_normal(rng, (256, 256), BF16), _normal(rng, (256, 512), BF16)],
        lambda lt, r: lt.astype(np.float64).T @ r.astype(np.float64),
        5e-2,
    ),
    "matmul_blocked_f32": (
        mm.matmul_blocked,
        lambda rng: [_normal(rng, (256, 256)), _normal(rng, (256, 1024))],
        lambda lt, r: lt.astype(np.float64).T @ r,
        1e-4,
    ),
    "softmax": (
        softmax_rows,
        lambda rng: [_normal(rng, (128, 300)) * 3],
        lambda x: _softmax(x.astype(np.float64)),
        1e-5,
    ),
    "layernorm": (
        layernorm,
        lambda rng: [_normal(rng, (128, 256)), _normal(rng, (256,)), _normal(rng, (256,))],
        _layernorm,
        1e-4,
    ),
    "rmsnorm": (
        rmsnorm,
        lambda rng: [_normal(rng, (128, 64)), _normal(rng, (64,))],
        lambda x, g: x.astype(np.float64) / np.sqrt((x.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-6) * g,
        1e-5,
    ),
    "attention": (
        causal_attention,
        lambda rng: [_normal(rng, (64, 256)), _normal(rng, (64, 256)), _normal(rng, (256, 64))],
        _attention,
        1e-4,
    ),
    "transpose": (transpose2d, lambda rng: [_normal(rng, (128, 256))], lambda x: x.T, 0.0),
    "cumsum": (cumsum_rows, lambda rng: [_normal(rng, (128, 96))], lambda x: np.cumsum(x.astype(np.float64), 1), 1e-4),
    "avg_pool": (
        avg_pool2d,
        lambda rng: [_normal(rng, (64, 8, 8))],
        lambda x: x.astype(np.float64).reshape(64, 4, 2, 4, 2).mean(axis=(2, 4)),
        1e-5,
    ),
}


def assert_same_run(got: nkisim.RunResult, expected: nkisim.RunResult) -> None:
    """Outputs bit for bit, and the same profile: every instruction's placement, and the findings."""
    outs = got.outputs if isinstance(got.outputs, tuple) else (got.outputs,)
    refs = expected.outputs if isinstance(expected.outputs, tuple) else (expected.outputs,)
    assert len(outs) == len(refs)
    for out, ref in zip(outs, refs):
        assert out.dtype == ref.dtype and out.shape == ref.shape
        assert np.ascontiguousarray(out).tobytes() == np.ascontiguousarray(ref).tobytes()
    assert got.target == expected.target
    assert got.profile.instructions == expected.profile.instructions
    assert got.profile.total_ns == expected.profile.total_ns
    assert got.profile.diagnostics == expected.profile.diagnostics


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(CASES))
@REPLAYS
@given(seed=st.integers(0, 2**32 - 1))
def test_replay_equals_a_fresh_run_and_the_formula(name, target, seed):
    kernel, make, formula, tol = CASES[name]
    prog = _compiled(name, target)
    assert prog.replayable and prog.reason is None
    inputs = make(np.random.default_rng(seed))
    got = prog(inputs)
    assert_same_run(got, nkisim.run(kernel, inputs, target=target))
    expected = formula(*inputs)
    np.testing.assert_allclose(got.outputs.astype(np.float64), expected, rtol=tol, atol=tol)


_PROGRAMS: dict[tuple[str, str], nkisim.CompiledKernel] = {}


def _compiled(name: str, target: str) -> nkisim.CompiledKernel:
    """One program per case and target for all the examples (compiled with inputs of seed 0)."""
    key = (name, target)
    if key not in _PROGRAMS:
        kernel, make, _, _ = CASES[name]
        _PROGRAMS[key] = nkisim.compile(kernel, make(np.random.default_rng(0)), target=target)
    return _PROGRAMS[key]


def test_the_profile_is_the_compiled_one_when_findings_agree():
    prog = _compiled("add", "trn2")
    result = prog(CASES["add"][1](np.random.default_rng(5)))
    assert result.profile is prog.profile
    assert result.target == "trn2"


def test_keyword_inputs_and_non_array_arguments():
    rng = np.random.default_rng(1)
    lhs_t, rhs = _normal(rng, (256, 256)), _normal(rng, (256, 1024))
    prog = nkisim.compile(mm.matmul_blocked, {"lhsT": lhs_t, "rhs": rhs, "blocks_n": 2})
    new = {"lhsT": _normal(rng, (256, 256)), "rhs": _normal(rng, (256, 1024)), "blocks_n": 2}
    got = prog(new)
    assert_same_run(got, nkisim.run(mm.matmul_blocked, new))
    np.testing.assert_allclose(got.outputs, new["lhsT"].astype(np.float64).T @ new["rhs"], rtol=1e-4, atol=1e-4)


# -- signatures -------------------------------------------------------------------------------


def test_a_different_shape_is_refused_naming_expected_and_got():
    prog = _compiled("add", "trn1")
    a = np.zeros((128, 512), np.float32)
    with pytest.raises(
        SignatureError,
        match=r"input 'a_input' is an array float32\[128, 512\], but the program was "
        r"compiled for an array float32\[256, 1024\]",
    ):
        prog([a, a])


def test_a_different_dtype_is_refused_and_is_a_type_error():
    prog = _compiled("add", "trn1")
    a = np.zeros((256, 1024), np.float32)
    with pytest.raises(TypeError, match=r"input 'b_input' is an array bfloat16\[256, 1024\].*float32\[256, 1024\]"):
        prog([a, a.astype(BF16)])


def test_a_different_argument_value_is_refused():
    rng = np.random.default_rng(2)
    inputs = {"lhsT": _normal(rng, (256, 256)), "rhs": _normal(rng, (256, 1024)), "blocks_n": 2}
    prog = nkisim.compile(mm.matmul_blocked, inputs)
    with pytest.raises(SignatureError, match="input 'blocks_n' is int 1, but the program was compiled for int 2"):
        prog({**inputs, "blocks_n": 1})
    with pytest.raises(SignatureError, match=r"input 'blocks_n' is float 2\.0, but the program was compiled for int 2"):
        prog({**inputs, "blocks_n": 2.0})


def test_missing_inputs_are_refused():
    prog = _compiled("add", "trn1")
    with pytest.raises(SignatureError, match="cannot bind inputs to nki_tensor_add"):
        prog([np.zeros((256, 1024), np.float32)])


# -- threads and aliasing ------------------------------------------------------------------------


def test_outputs_are_fresh_arrays_never_aliased():
    prog = _compiled("add", "trn1")
    rng = np.random.default_rng(3)
    first_in, second_in = CASES["add"][1](rng), CASES["add"][1](rng)
    first = prog(first_in).outputs
    kept = first.copy()
    second = prog(second_in).outputs
    np.testing.assert_array_equal(first, kept)
    assert not np.shares_memory(first, second)
    first[...] = 0  # writing an output changes nothing the program uses
    np.testing.assert_array_equal(prog(second_in).outputs, second)


def test_concurrent_calls_from_threads_agree_with_sequential_ones():
    prog = _compiled("matmul_tiled_f32", "trn2")
    inputs = [CASES["matmul_tiled_f32"][1](np.random.default_rng(seed)) for seed in range(6)]
    sequential = [prog(x).outputs for x in inputs]
    start = threading.Barrier(3)

    def call(x):
        if x is inputs[0]:
            start.wait()  # the three first calls begin together
        return prog(x).outputs

    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(call, x) for x in [inputs[0]] * 3 + inputs[1:] * 2]
        results = [f.result() for f in futures]
    sequential = [sequential[0]] * 3 + sequential[1:] * 2
    inputs = [inputs[0]] * 3 + inputs[1:] * 2
    for got, expected, x in zip(results, sequential, inputs):
        assert got.tobytes() == expected.tobytes()
        np.testing.assert_allclose(got, x[0].astype(np.float64).T @ x[1], rtol=1e-4, atol=1e-4)


# -- state the replay starts from -----------------------------------------------------------------


def test_registers_start_from_their_first_value_on_every_replay():
    @nki.jit
    def kernel(x):
        reg = nisa.register_alloc(-5)
        before = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_store(before, reg)
        nisa.register_move(reg, 7)
        after = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_store(after, reg)
        out = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[:, 0:1], src=before)
        nisa.dma_copy(dst=out[:, 1:2], src=after)
        tile = nl.ndarray((1, 4), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        y = nl.ndarray((1, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=y, src=tile)
        return out, y

    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    prog = nkisim.compile(kernel, [x])
    assert prog.replayable
    for _ in range(2):
        out, y = prog([x + 1]).outputs
        np.testing.assert_array_equal(out, [[-5, 7]])
        np.testing.assert_array_equal(y, x + 1)


def test_never_written_memory_reads_as_nan_on_every_replay():
    """Half of the output is never written: it keeps the poison (NaN), replay after replay."""

    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        tile = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        nisa.dma_copy(dst=out[:, 0:4], src=tile)
        return out

    x = np.ones((128, 4), np.float32)
    prog = nkisim.compile(kernel, [x], check="off")
    for scale in (2.0, 3.0):
        out = prog([x * scale]).outputs
        np.testing.assert_array_equal(out[:, :4], x * scale)
        assert np.isnan(out[:, 4:]).all()


def test_an_hbm_zeros_tensor_is_zeroed_again_on_every_replay():
    @nki.jit
    def kernel(x):
        acc = nl.zeros((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=acc, src=x, dst_rmw_op=nl.add)
        return acc

    x = np.full((128, 4), 1.5, np.float32)
    prog = nkisim.compile(kernel, [x])
    for value in (2.0, -1.0):
        got = prog([np.full((128, 4), value, np.float32)])
        np.testing.assert_array_equal(got.outputs, np.full((128, 4), value, np.float32))
        assert_same_run(got, nkisim.run(kernel, [np.full((128, 4), value, np.float32)]))


def test_device_print_prints_the_new_values(capsys):
    @nki.jit
    def kernel(x):
        tile = nl.ndarray((1, 3), dtype=nl.float32, buffer=nl.sbuf, name="t")
        nisa.dma_copy(dst=tile, src=x)
        nl.device_print("tile:", tile)
        out = nl.ndarray((1, 3), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tile)
        return out

    prog = nkisim.compile(kernel, [np.zeros((1, 3), np.float32)])
    capsys.readouterr()
    prog([np.array([[1.0, 2.0, 3.0]], np.float32)])
    assert capsys.readouterr().out == f"tile: t[1, 3]:\n{np.array([[1.0, 2.0, 3.0]], np.float32)}\n"


# -- findings that depend on values --------------------------------------------------------------


@nki.jit
def to_int8(x):
    tile = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    small = nl.ndarray(x.shape, dtype=nl.int8, buffer=nl.sbuf)
    nisa.tensor_copy(dst=small, src=tile)
    out = nl.ndarray(x.shape, dtype=nl.int8, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=small)
    return out


def test_saturation_findings_follow_the_new_values():
    calm = np.full((128, 4), 3.0, np.float32)
    wild = calm.copy()
    wild[0, :3] = 1000.0  # three values beyond int8's 127
    prog = nkisim.compile(to_int8, [calm], check="warn")
    assert prog.profile.diagnostics == ()
    with pytest.warns(CheckWarning, match=r"3 values saturated to int8's range \[-128, 127\]"):
        got = prog([wild])
    assert [d.check for d in got.profile.diagnostics] == ["saturation"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckWarning)
        assert_same_run(got, nkisim.run(to_int8, [wild], check="warn"))
    np.testing.assert_array_equal(got.outputs, np.clip(np.round(wild), -128, 127).astype(np.int8))
    assert prog([calm]).profile.diagnostics == ()


def test_a_check_ignored_while_compiling_applies_again_when_not_ignored():
    @nki.jit
    def kernel(x):
        tile = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile[:, 0:4], src=x)
        out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tile)  # reads four columns nothing wrote
        return out

    x = np.ones((128, 4), np.float32)
    with nkisim.ignore_checks("uninitialized-read"):
        prog = nkisim.compile(kernel, [x], check="strict")
        assert np.isnan(prog([x]).outputs[:, 4:]).all()
    with pytest.raises(CheckError, match="reads 512 of the 1024 elements of SBUF tile") as replayed:
        prog([x])
    with pytest.raises(CheckError) as fresh:
        nkisim.run(kernel, [x], check="strict")
    assert str(replayed.value) == str(fresh.value)


# -- kernels that are not replayed ---------------------------------------------------------------


@nki.jit
def sum_first_rows(x, count):
    """Adds up the first ``count[0, 0]`` rows of x into one row (a loop bound read from data)."""
    n = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=n, src=count)
    bound = nisa.register_alloc()
    nisa.register_load(bound, n)  # replay-refusing line
    acc = nl.ndarray((1, x.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    for i in nl.dynamic_range(bound):
        row = nl.ndarray((1, x.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=row, src=x[i : i + 1])
        nisa.tensor_tensor(dst=acc, data1=acc, data2=row, op=nl.add)
    out = nl.ndarray((1, x.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    return out


def _line_of(func, marker: str) -> int:
    import inspect

    lines, first = inspect.getsourcelines(func)
    return first + next(i for i, line in enumerate(lines) if marker in line)


def test_a_loop_bound_read_from_data_falls_back_to_full_runs():
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    prog = nkisim.compile(sum_first_rows, [x, np.array([[2]], np.int32)])
    assert not prog.replayable
    line = _line_of(sum_first_rows.func, "replay-refusing line")
    assert prog.reason == (
        f"nisa.register_load at test_replay.py:{line} loads a register from tensor data, which can steer "
        "control flow and addresses"
    )
    assert "runs in full" in repr(prog)
    for n in (5, 0, 3):
        count = np.array([[n]], np.int32)
        got = prog([x, count])
        assert_same_run(got, nkisim.run(sum_first_rows, [x, count]))
        np.testing.assert_array_equal(got.outputs, x[:n].sum(axis=0, keepdims=True))
    with pytest.raises(SignatureError, match="input 'count'"):
        prog([x, np.array([[2]], np.int64)])


def test_a_run_time_offset_falls_back_to_full_runs():
    @nki.jit
    def pick_row(x, where):
        at = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=where)
        row = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=row, src=x.ap([[4, 1], [1, 4]], scalar_offset=at, indirect_dim=0))  # offset line
        out = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=row)
        return out

    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    prog = nkisim.compile(pick_row, [x, np.array([[1]], np.int32)])
    line = _line_of(pick_row.func, "# offset line")
    assert prog.reason == (
        f"nisa.dma_copy at test_replay.py:{line} addresses an operand at a run-time offset read from tensor data"
    )
    for i in (3, 0):
        got = prog([x, np.array([[i]], np.int32)])
        np.testing.assert_array_equal(got.outputs, x[i : i + 1])
        assert_same_run(got, nkisim.run(pick_row, [x, np.array([[i]], np.int32)]))


def test_a_multi_core_launch_falls_back_to_full_runs():
    @nki.jit
    def halves(a):
        rows = a.shape[0] // 2
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        part = slice(nl.program_id(0) * rows, (nl.program_id(0) + 1) * rows)
        tile = nl.ndarray((rows, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=a[part])
        doubled = nl.ndarray((rows, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=doubled, data1=tile, data2=tile, op=nl.add)
        nisa.dma_copy(dst=out[part], src=doubled)
        return out

    a = np.ones((256, 8), np.float32)
    prog = nkisim.compile(halves[2], [a], target="trn2")
    assert not prog.replayable
    assert "several NeuronCores" in prog.reason
    b = np.arange(256 * 8, dtype=np.float32).reshape(256, 8)
    got = prog([b])
    np.testing.assert_array_equal(got.outputs, 2 * b)
    assert_same_run(got, nkisim.run(halves[2], [b], target="trn2"))


def test_a_legacy_kernel_is_refused_with_what_to_do():
    from nkisim.nki.legacy import jit as legacy_jit

    @legacy_jit
    def legacy(a):
        return a

    with pytest.raises(OperandError, match=r"nkisim\.compile takes NKI kernels .* a legacy neuronxcc\.nki kernel"):
        nkisim.compile(legacy, [np.zeros((2, 2), np.float32)])


def test_replays_reach_collect_profiles():
    prog = _compiled("add", "trn1")
    inputs = CASES["add"][1](np.random.default_rng(9))
    with nkisim.collect_profiles() as profiles:
        prog(inputs)
        prog(inputs)
    assert profiles == [prog.profile, prog.profile]


def test_a_kernel_that_fits_only_with_compiler_liveness_is_recorded_from_its_last_attempt():
    """Six tiles of over a quarter of SBUF, all kept in a list: the run is retried with compiler liveness."""
    cols = load_target("trn2").sbuf.bytes_per_partition // 16 + 16
    count = 6

    @nki.jit
    def kernel(x):
        out = nl.ndarray((count, 128, cols), nl.float32, buffer=nl.shared_hbm)
        tiles = []
        for i in range(count):
            t = nl.ndarray((128, cols), nl.float32, buffer=nl.sbuf)
            tiles.append(t)  # still reachable after its last use
            nisa.dma_copy(dst=t, src=x)
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=float(i + 1))
            nisa.dma_copy(dst=out[i], src=t)
        return out

    rng = np.random.default_rng(4)
    prog = nkisim.compile(kernel, [_normal(rng, (128, cols))], target="trn2")
    assert prog.replayable
    x = _normal(rng, (128, cols))
    got = prog([x])
    assert_same_run(got, nkisim.run(kernel, [x], target="trn2"))
    np.testing.assert_array_equal(got.outputs, np.arange(1, count + 1, dtype=np.float32)[:, None, None] * x)
