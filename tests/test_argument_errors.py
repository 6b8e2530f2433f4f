"""Kernel-author slips with arguments: each raises a typed error at the kernel's line, never a wrong result.

Loop bounds that are not integers, ``nl`` helpers called with arguments they do not take, shapes
numpy would infer, bitvec scalars wider than 32 bits, dropout probabilities outside [0, 1], HBM
tensors larger than the machine's memory, and loops too long to list.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import nkisim
import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim import BudgetError, CapacityError, MemoryKindError, OperandError
from nkisim.frontend import loops
from nkisim.memory import system

FILE = Path(__file__).name
_LINES = Path(__file__).read_text().splitlines()


def at(marker: str) -> str:
    """A regex for the start of a message about the one line of this file that ends with ``# @marker``."""
    hits = [n for n, text in enumerate(_LINES, start=1) if text.rstrip().endswith(f"# @{marker}")]
    assert len(hits) == 1, marker
    return rf"^{re.escape(FILE)}:{hits[0]}: "


# -- loop bounds --------------------------------------------------------------------------


def _copy_in_blocks(loop, bound_of):
    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in loop(bound_of(a)):  # @loop
            t = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a[i * 128 : (i + 1) * 128])
            nisa.dma_copy(dst=out[i * 128 : (i + 1) * 128], src=t)
        return out

    return kernel


@pytest.mark.parametrize("loop", ["affine_range", "sequential_range", "static_range", "range"])
def test_a_float_loop_bound_names_the_quotient(loop):
    kernel = _copy_in_blocks(getattr(nl, loop), lambda a: a.shape[0] / 128)
    with pytest.raises(OperandError, match=at("loop") + rf"nl\.{loop}: stop 2\.0 must be an integer .*n // d"):
        nkisim.run(kernel, [np.ones((256, 64), np.float32)])


@pytest.mark.parametrize(
    ("bound_of", "rule"),
    [
        (lambda a: "2", r"stop '2' must be an integer known while tracing, not str"),
        (lambda a: True, r"stop True must be an integer"),
    ],
)
def test_a_loop_bound_of_another_type_is_refused(bound_of, rule):
    kernel = _copy_in_blocks(nl.affine_range, bound_of)
    with pytest.raises(OperandError, match=at("loop") + r"nl\.affine_range: " + rule):
        nkisim.run(kernel, [np.ones((256, 64), np.float32)])


def test_a_zero_step_is_refused_and_integer_bounds_of_numpy_types_run():
    kernel = _copy_in_blocks(lambda n: nl.affine_range(0, n, 0), lambda a: a.shape[0] // 128)  # @zero-step
    with pytest.raises(OperandError, match=at("zero-step") + r"nl\.affine_range: step must not be 0"):
        nkisim.run(kernel, [np.ones((256, 64), np.float32)])
    a = np.arange(256 * 64, dtype=np.float32).reshape(256, 64)
    kernel = _copy_in_blocks(lambda n: nl.affine_range(np.int64(0), n, np.int32(1)), lambda a: np.int64(2))
    np.testing.assert_array_equal(nkisim.run(kernel, [a]).outputs, a)


@pytest.mark.parametrize("order", loops.AFFINE_ORDERS)
def test_a_loop_of_a_trillion_iterations_stops_at_the_budget_in_little_memory(order):
    @nki.jit
    def endless(a):
        t = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.sbuf)
        for _ in nl.affine_range(1 << 40):
            nisa.memset(dst=t, value=0.0)  # @memset
        return a

    with pytest.raises(BudgetError, match=at("memset") + r"nisa\.memset: the kernel reached its budget of 100"):
        nkisim.run(endless, [np.zeros((8, 16), np.float32)], max_instructions=100, affine_order=order)


def test_a_long_shuffled_loop_visits_each_iteration_once(monkeypatch):
    """Past MAX_PERMUTED iterations the shuffle is computed per step; it is still a permutation, and not in order."""
    monkeypatch.setattr(loops, "MAX_PERMUTED", 16)
    values = range(3, 3 + 7 * 1000, 7)
    order = list(loops._shuffled(values, (1, 2, 3)))
    assert sorted(order) == list(values)
    assert order != list(values)
    short = list(loops._shuffled(range(10), (1, 2, 3)))  # a short loop: numpy's permutation, as always
    assert short == [range(10)[i] for i in np.random.default_rng((1, 2, 3)).permutation(10)]


# -- nl helpers ---------------------------------------------------------------------------


def _helper_kernel(body):
    @nki.jit
    def kernel(a):
        x = nl.load(a)
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, body(x))
        return out

    return kernel


@pytest.mark.parametrize(
    ("body", "marker", "rule"),
    [
        (lambda x: nl.add(x), "add", r"nl\.add: missing a required argument: 'y'"),  # @add
        (lambda x: nl.add(x, x, nl.float32, 7), "add-4", r"nl\.add: too many positional arguments"),  # @add-4
        (
            lambda x: nl.multiply(x, 2.0, dtpye=nl.float32),  # @multiply
            "multiply",
            r"nl\.multiply: got an unexpected keyword argument 'dtpye'; did you mean 'dtype'\?",
        ),
        (
            lambda x: nl.sum(x, axis=1, keepdim=True),  # @sum
            "sum",
            r"nl\.sum: got an unexpected keyword argument 'keepdim'; did you mean 'keepdims'\?",
        ),
    ],
)
def test_a_helper_called_with_arguments_it_does_not_take_names_them(body, marker, rule):
    with pytest.raises(OperandError, match=at(marker) + rule):
        nkisim.run(_helper_kernel(body), [np.ones((8, 16), np.float32)])


def test_helpers_keep_their_signature_and_results():
    import inspect

    assert "keepdims" in inspect.signature(nl.sum).parameters
    a = np.arange(128, dtype=np.float32).reshape(8, 16)
    np.testing.assert_array_equal(nkisim.run(_helper_kernel(lambda x: nl.add(x, x)), [a]).outputs, a + a)


def test_storing_a_psum_tile_names_the_helper_and_the_copy_it_needs():
    @nki.jit
    def kernel(x, y):
        product = nl.matmul(nl.load(x), nl.load(y), transpose_x=True)
        out = nl.ndarray(product.shape, dtype=product.dtype, buffer=nl.shared_hbm)
        nl.store(out, product)  # @store
        return out

    rule = r"nl\.store \[trn1\]: value psum\d+ is a PSUM tile; copy it into SBUF first"
    with pytest.raises(MemoryKindError, match=at("store") + rule):
        nkisim.run(kernel, [np.ones((8, 16), np.float32)] * 2)


# -- reshape ------------------------------------------------------------------------------


def _reshaped(shape):
    @nki.jit
    def kernel(a):
        out = nl.ndarray((16, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a.reshape(shape))  # @reshape
        return out

    return kernel


@pytest.mark.parametrize(
    ("shape", "rule"),
    [
        ((-1, 8), r"a\.reshape: shape \(-1, 8\) must be a tuple of integers of at least 0; nkisim infers no dimension"),
        ((16.9, 8), r"a\.reshape: shape \(16\.9, 8\) must be a tuple of integers of at least 0$"),
        (None, r"a\.reshape: shape None must be a tuple"),
    ],
)
def test_a_reshape_to_a_shape_of_other_than_integers_is_refused(shape, rule):
    with pytest.raises(OperandError, match=at("reshape") + rule):
        nkisim.run(_reshaped(shape), [np.ones((8, 16), np.float32)])


@pytest.mark.parametrize("shape", [128, (16, 8), [16, 8], (np.int64(16), 8)])
def test_a_reshape_to_integers_runs_as_numpys(shape):
    a = np.arange(128, dtype=np.float32).reshape(8, 16)
    np.testing.assert_array_equal(nkisim.run(_reshaped(shape), [a]).outputs, a.reshape(16, 8))


# -- scalar operands ----------------------------------------------------------------------


def _or_with(value):
    @nki.jit
    def kernel(a):
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.bitwise_or, operand0=value)  # @or
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    return kernel


@pytest.mark.parametrize("value", [2**33 + 1, 2**32, -(2**31) - 1])
def test_a_bitvec_scalar_wider_than_32_bits_is_refused(value):
    with pytest.raises(
        OperandError,
        match=at("or") + rf"nisa\.tensor_scalar \[Vector, trn1\]: operand0 {value} does not fit the 32 bits",
    ):
        nkisim.run(_or_with(value), [np.arange(8, dtype=np.int32).reshape(2, 4)])


@pytest.mark.parametrize("value", [2**32 - 1, -(2**31), 5])
def test_a_bitvec_scalar_of_32_bits_acts_on_the_bit_pattern(value):
    a = np.arange(8, dtype=np.int32).reshape(2, 4)
    expected = a | np.array(value & 0xFFFFFFFF, dtype=np.uint32).view(np.int32)
    np.testing.assert_array_equal(nkisim.run(_or_with(value), [a]).outputs, expected)


def _dropout(prob):
    @nki.jit
    def kernel(a):
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dropout(dst=t, data=t, prob=prob)  # @dropout
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    return kernel


@pytest.mark.parametrize("prob", [1.5, -0.25, float("nan")])
def test_a_dropout_probability_outside_0_to_1_is_refused(prob):
    with pytest.raises(OperandError, match=at("dropout") + rf"nisa\.dropout \[Vector, trn1\]: prob {prob} is not a"):
        nkisim.run(_dropout(prob), [np.ones((2, 8), np.float32)])


def test_dropout_at_the_ends_of_0_to_1_keeps_all_or_nothing():
    a = np.arange(1, 17, dtype=np.float32).reshape(2, 8)
    np.testing.assert_array_equal(nkisim.run(_dropout(0.0), [a]).outputs, a)
    np.testing.assert_array_equal(nkisim.run(_dropout(1.0), [a]).outputs, np.zeros_like(a))


# -- host memory --------------------------------------------------------------------------


@nki.jit
def _scratch(a):
    nl.ndarray((32 << 20,), dtype=nl.float32, buffer=nl.shared_hbm)  # 128 MiB  # @scratch
    return a


def test_an_hbm_tensor_larger_than_the_machines_memory_is_refused(monkeypatch):
    monkeypatch.setattr(system, "host_memory_available", lambda: 100 << 20)
    with pytest.raises(CapacityError, match=at("scratch") + r"hbm\d+ float32\[33554432\] would take 134217728 bytes"):
        nkisim.run(_scratch, [np.zeros((8, 16), np.float32)], target="trn2")


def test_hbm_tensors_are_allocated_when_the_memory_is_there_or_unknown(monkeypatch):
    a = np.arange(128, dtype=np.float32).reshape(8, 16)
    for available in (200 << 20, None):
        monkeypatch.setattr(system, "host_memory_available", lambda available=available: available)
        np.testing.assert_array_equal(nkisim.run(_scratch, [a], target="trn2").outputs, a)


def test_a_shapes_only_profile_takes_no_memory_for_hbm_so_is_not_refused(monkeypatch):
    monkeypatch.setattr(system, "host_memory_available", lambda: 100 << 20)
    profile = nkisim.profile(_scratch, [((8, 16), np.float32)], target="trn2")
    assert profile.instruction_count == 0


def test_the_available_memory_is_read_from_the_system():
    available = system.host_memory_available()
    if Path("/proc/meminfo").exists():
        text = Path("/proc/meminfo").read_text()
        meminfo = int(re.search(r"^MemAvailable:\s+(\d+) kB", text, re.M).group(1)) * 1024
        assert available is not None and 0 < available <= meminfo * 1.5  # it moves between the two reads
    else:
        assert available is None


# -- immediates and targets -----------------------------------------------------------------


def test_scalars_beyond_float32_round_to_infinity_as_a_cast_does_without_a_warning():
    import warnings

    @nki.jit
    def kernel(a):
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1e300)
        u = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.activation(dst=u, op=nl.copy, data=a_tile(a), scale=-1e300)
        v = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.memset(dst=v, value=3.4028235e38 * (1 + 2**-30))  # within half a unit of float32's largest
        out = nl.ndarray((2, 6), dtype=a.dtype, buffer=nl.shared_hbm)
        for i, tile in enumerate((t, u, v)):
            nisa.dma_copy(dst=out[:, 2 * i : 2 * i + 2], src=tile)
        return out

    def a_tile(a):
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        return t

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = nkisim.run(kernel, [np.ones((2, 2), np.float32)]).outputs
    top = np.finfo(np.float32).max
    np.testing.assert_array_equal(out, np.array([[np.inf, np.inf, -np.inf, -np.inf, top, top]] * 2, np.float32))


@pytest.mark.parametrize("target", ["", " "])
def test_an_empty_target_name_is_refused_not_taken_for_the_default(target):
    @nki.jit
    def kernel(a):
        return a

    with pytest.raises(nkisim.TargetError, match=r"unknown target '\s*'; choose one of .*trn2"):
        nkisim.run(kernel, [np.ones((2, 2), np.float32)], target=target)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"/proc/meminfo": "MemTotal: 9 kB\nMemAvailable: 1000 kB\n"}, 1_024_000),
        (
            {
                "/proc/meminfo": "MemAvailable: 1000 kB\n",
                "/sys/fs/cgroup/memory.max": "max\n",
                "/sys/fs/cgroup/memory.current": "1048576\n",
            },
            1_024_000,  # no cgroup limit
        ),
        (
            {
                "/proc/meminfo": "MemAvailable: 1000 kB\n",
                "/sys/fs/cgroup/memory.max": "2048000\n",
                "/sys/fs/cgroup/memory.current": "1048576\n",
            },
            2_048_000 - 1_048_576,  # the cgroup's room is less than the machine's
        ),
        ({"/proc/meminfo": "MemTotal: 9 kB\n"}, None),  # no MemAvailable line (an old kernel)
        ({}, None),  # no /proc (not Linux)
    ],
)
def test_the_available_memory_is_the_least_of_the_machines_and_the_cgroups(monkeypatch, files, expected):
    import io

    def fake_open(path, *args, **kwargs):
        if path not in files:
            raise FileNotFoundError(path)
        return io.StringIO(files[path])

    monkeypatch.setattr(system, "open", fake_open, raising=False)
    assert system.host_memory_available() == expected


@pytest.mark.parametrize(
    ("body", "marker", "rule"),
    [
        (
            lambda x: nl.sum(x, axis=None),  # @axis-none
            "axis-none",
            r"nl\.sum \[trn1\]: axis None must be an int or a tuple of ints",
        ),
        (
            lambda x: nl.broadcast_to(nl.sum(x, axis=1, keepdims=True), 16),  # @broadcast-int
            "broadcast-int",
            r"nl\.broadcast_to \[trn1\]: shape 16 must be a tuple of integers",
        ),
    ],
)
def test_a_helper_given_an_axis_or_shape_of_another_kind_names_it(body, marker, rule):
    with pytest.raises(OperandError, match=at(marker) + rule):
        nkisim.run(_helper_kernel(body), [np.ones((8, 16), np.float32)])


# -- text where a number is meant, a missing dtype, ranks, a compiled program's inputs ---------


@pytest.mark.parametrize(
    ("call", "marker", "operand", "text"),
    [
        (
            lambda t: nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0="3"),  # @operand0
            "operand0",
            "operand0",
            "'3'",
        ),
        (
            lambda t: nisa.tensor_scalar(dst=t, data=t, op0=nl.subtract, operand0=1.0, reverse0="no"),  # @reverse0
            "reverse0",
            "reverse0",
            "'no'",
        ),
        (lambda t: nisa.memset(dst=t, value="1"), "memset-text", "value", "'1'"),  # @memset-text
        (lambda t: nisa.iota(dst=t, pattern=[[1, "8"]], offset=0), "iota", "pattern", "[[1, '8']]"),  # @iota
    ],
)
def test_text_for_a_number_or_a_bool_is_refused_not_read_as_one(call, marker, operand, text):
    """pydantic alone would read "3" as 3 and "no" as False: a kernel that passes text has a slip to show."""

    @nki.jit
    def kernel(a):
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        call(t)
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    rule = rf"nisa\.\w+ \[trn\d\]: {operand} got \w+ {re.escape(text)}: text where a number or a bool is required"
    with pytest.raises(OperandError, match=at(marker) + rule):
        nkisim.run(kernel, [np.ones((128, 8), np.float32)])


def test_the_numbers_only_fields_are_those_of_number_and_bool_types():
    from nkisim.isa import REGISTRY

    assert REGISTRY["tensor_scalar"].operands.number_fields == {"operand0", "operand1", "reverse0", "reverse1"}
    matmul = REGISTRY["nc_matmul"].operands.number_fields
    assert {"is_transpose", "accumulate", "tile_position"} <= matmul
    assert "name" not in matmul and "perf_mode" not in matmul  # text, and an enum NKI names by its value's text
    assert REGISTRY["dma_copy"].operands.number_fields.isdisjoint({"dge_mode", "dst", "src"})


def test_a_missing_dtype_is_named_not_taken_for_float64():
    @nki.jit
    def kernel(a):
        nl.ndarray(a.shape, dtype=None, buffer=nl.sbuf)  # @dtype-none
        return a

    with pytest.raises(nkisim.DtypeError, match=at("dtype-none") + r"nl\.ndarray: a dtype is required, got None$"):
        nkisim.run(kernel, [np.ones((2, 2), np.float32)])


@pytest.mark.parametrize(("ranks", "error"), [(0, ValueError), (-2, ValueError), (1.0, TypeError), (True, TypeError)])
def test_ranks_out_of_range_is_a_value_error_and_of_another_kind_a_type_error(ranks, error):
    @nki.jit
    def kernel(a):
        return a

    with pytest.raises(error, match=r"^nkisim\.run: ranks must be a positive integer \(or None\), got "):
        nkisim.run(kernel, [[np.ones((2, 2), np.float32)]], ranks=ranks)


def test_a_compiled_program_called_with_none_says_what_inputs_are():
    @nki.jit
    def kernel(a):
        return a

    prog = nkisim.compile(kernel, [np.ones((2, 2), np.float32)])
    with pytest.raises(TypeError, match=r"^the compiled program: inputs must be a list .* got NoneType None"):
        prog(None)
