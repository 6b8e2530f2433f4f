"""The NKI front end: argument passing, buffers, indexing, fresh memory, targets and kernel calls.

Every expected value is computed here with numpy or by hand, never by nkisim.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nkisim
import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl

ENV = "NEURON_PLATFORM_TARGET_OVERRIDE"
RNG = np.random.default_rng(20250)


@pytest.fixture(autouse=True)
def _no_target_from_the_environment(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def load(src, buffer=nl.sbuf):
    """Copy an HBM tensor into a new on-chip tile of its shape."""
    tile = nl.ndarray(src.shape, src.dtype, buffer=buffer)
    nisa.dma_copy(dst=tile, src=src)
    return tile


def store(tile, dtype=None):
    """Copy a tile into a new HBM output tensor (through SBUF, as DMA does not read PSUM)."""
    if nl.is_psum(tile.buffer):
        staged = nl.ndarray(tile.shape, tile.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=staged, src=tile)
        tile = staged
    out = nl.ndarray(tile.shape, dtype or tile.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


@nki.jit
def add_kernel(a_input, b_input):
    a = load(a_input)
    b = load(b_input)
    c = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.add)
    return store(c)


# -- calling instructions -----------------------------------------------------------------


def test_dst_may_be_passed_positionally():
    def kernel(a_input, b_input):
        a, b = load(a_input), load(b_input)
        c = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(c, a, b, nl.subtract)
        return store(c)

    a, b = rand(128, 64), rand(128, 64)
    np.testing.assert_array_equal(nkisim.run(kernel, [a, b]).outputs, a - b)


def test_matmul_with_positional_operands():
    def kernel(s_input, m_input):
        s, m = load(s_input), load(m_input)
        result = nl.ndarray((32, 48), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(result, s, m)
        return store(result)

    s = (RNG.integers(-4, 5, (64, 32))).astype(np.float32)
    m = (RNG.integers(-4, 5, (64, 48))).astype(np.float32)
    np.testing.assert_array_equal(nkisim.run(kernel, [s, m]).outputs, s.T @ m)


@pytest.mark.parametrize("dtype", [nl.float32, "float32", np.float32])
def test_redundant_dtype_equal_to_dst_dtype_is_accepted(dtype):
    def kernel(a_input):
        a = load(a_input)
        b = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=b, src=a, dtype=dtype)
        return store(b)

    a = rand(128, 16)
    np.testing.assert_array_equal(nkisim.run(kernel, [a]).outputs, a)


@pytest.mark.parametrize(
    ("on_chip", "hbm"),
    [(nl.sbuf, nl.shared_hbm), ("sbuf", "shared_hbm"), ("sbuf", "hbm"), (nl.psum, nl.hbm), ("psum", "private_hbm")],
)
def test_buffers_as_strings_or_nl_objects(on_chip, hbm):
    def kernel(a_input):
        a = nl.ndarray(a_input.shape, a_input.dtype, buffer=on_chip)
        if nl.is_psum(on_chip):  # dma_copy does not write PSUM: fill it through the Vector Engine
            nisa.tensor_copy(dst=a, src=load(a_input))
        else:
            nisa.dma_copy(dst=a, src=a_input)
        doubled = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=doubled, data=a, op0=nl.multiply, operand0=2.0)
        out = nl.ndarray(a.shape, a.dtype, buffer=hbm)
        nisa.dma_copy(dst=out, src=doubled)
        return out, a.buffer, out.buffer

    x = rand(128, 32)
    out, tile_buffer, out_buffer = nkisim.run(kernel, [x]).outputs
    np.testing.assert_array_equal(out, x + x)
    assert tile_buffer == on_chip
    assert out_buffer == hbm


def test_buffer_predicates():
    assert nl.is_sbuf(nl.sbuf) and nl.is_sbuf("sbuf") and nl.is_sbuf(None)
    assert nl.is_psum("psum") and not nl.is_psum(nl.sbuf)
    assert all(nl.is_hbm(b) for b in (nl.hbm, "hbm", nl.private_hbm, "shared_hbm"))
    assert nl.is_on_chip("sbuf") and nl.is_on_chip(nl.psum) and not nl.is_on_chip(nl.shared_hbm)


# -- indexing -----------------------------------------------------------------------------


def test_integer_index_shapes():
    def kernel(x):
        tile = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        tile3 = nl.ndarray((128, 4, 16), nl.float32, buffer=nl.sbuf)
        hbm3 = nl.ndarray((8, 4, 16), nl.float32, buffer=nl.hbm)
        return {
            "tile[3]": tile[3].shape,
            "tile[3, 5]": tile[3, 5].shape,
            "tile[:, 5]": tile[:, 5].shape,
            "tile[-1]": tile[-1].shape,
            "tile3[2]": tile3[2].shape,
            "tile3[:, 1]": tile3[:, 1].shape,
            "x[3]": x[3].shape,
            "x[3, 5]": x[3, 5].shape,
            "x[:, 5]": x[:, 5].shape,
            "hbm3[2]": hbm3[2].shape,
            "hbm3[2, 1]": hbm3[2, 1].shape,
        }

    shapes = nkisim.run(kernel, [rand(128, 64)]).outputs
    assert shapes == {
        # On chip, dim 0 is the partition dim: an integer index keeps it with size 1,
        # and a view stays at least 2-D.
        "tile[3]": (1, 64),
        "tile[3, 5]": (1, 1),
        "tile[:, 5]": (128, 1),
        "tile[-1]": (1, 64),
        "tile3[2]": (1, 4, 16),
        "tile3[:, 1]": (128, 16),
        # In HBM an integer index drops the dim, as in numpy.
        "x[3]": (64,),
        "x[3, 5]": (),
        "x[:, 5]": (128,),
        "hbm3[2]": (4, 16),
        "hbm3[2, 1]": (16,),
    }


def test_on_chip_integer_index_selects_one_partition():
    def kernel(x):
        tile = load(x)
        out = nl.ndarray((1, 64), x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tile[37])
        return out

    x = rand(128, 64)
    np.testing.assert_array_equal(nkisim.run(kernel, [x]).outputs, x[37:38])


def test_hbm_integer_index_drops_the_dim():
    def kernel(x):
        row = nl.ndarray((1, 64), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=row, src=x[5])
        return store(row)

    x = rand(128, 64)
    np.testing.assert_array_equal(nkisim.run(kernel, [x]).outputs, x[5].reshape(1, 64))


def test_ds_slices_start_and_size():
    def kernel(x):
        tile = nl.ndarray((16, 24), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[nl.ds(8, 16), nl.ds(4, 24)])
        big = load(x)
        part = nl.ndarray((16, 24), x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=part, src=big[nl.ds(100, 16), nl.ds(40, 24)])
        return store(tile), store(part)

    x = rand(128, 64)
    # trn2: trn1's partition-start rule (docs/checks.md) would refuse a tile view starting at 100
    from_hbm, from_tile = nkisim.run(kernel, [x], target="trn2").outputs
    np.testing.assert_array_equal(from_hbm, x[8:24, 4:28])
    np.testing.assert_array_equal(from_tile, x[100:116, 40:64])


def test_negative_indices_and_slices():
    def kernel(x):
        last_row = nl.ndarray((1, 64), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=last_row, src=x[-1])
        corner = nl.ndarray((16, 8), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=corner, src=x[-16:, -8:])
        tile = load(x)
        tile_corner = nl.ndarray((2, 3), x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=tile_corner, src=tile[-2:, -3:])
        tile_last = nl.ndarray((1, 64), x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=tile_last, src=tile[-128])
        return store(last_row), store(corner), store(tile_corner), store(tile_last)

    x = rand(128, 64)
    # trn2: trn1's partition-start rule (docs/checks.md) would refuse a tile view starting at 126
    last_row, corner, tile_corner, tile_first = nkisim.run(kernel, [x], target="trn2").outputs
    np.testing.assert_array_equal(last_row, x[127:128])
    np.testing.assert_array_equal(corner, x[112:128, 56:64])
    np.testing.assert_array_equal(tile_corner, x[126:128, 61:64])
    np.testing.assert_array_equal(tile_first, x[0:1])


def test_strided_slices():
    def kernel(x):
        tile = load(x)
        evens = nl.ndarray((64, 32), x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=evens, src=tile[0:128:2, ::2])
        return store(evens)

    x = rand(128, 64)
    np.testing.assert_array_equal(nkisim.run(kernel, [x]).outputs, x[::2, ::2])


def test_reshape_of_an_on_chip_tile_keeps_the_partition_dim():
    def kernel(x):
        tile = load(x)
        split = tile.reshape((128, 4, 16))
        merged = split.reshape([128, 64])
        sums = nl.ndarray((128, 4), x.dtype, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=sums, op=nl.add, data=split, axis=2)
        return store(sums), merged.shape

    x = RNG.integers(-8, 9, (128, 64)).astype(np.float32)
    sums, merged_shape = nkisim.run(kernel, [x]).outputs
    np.testing.assert_array_equal(sums, x.reshape(128, 4, 16).sum(axis=2))
    assert merged_shape == (128, 64)


# -- fresh memory -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("buffer", "dtype", "zero"),
    [
        (nl.sbuf, nl.float32, np.float32(0)),
        (nl.sbuf, nl.bfloat16, ml_dtypes.bfloat16(0)),
        (nl.sbuf, nl.int32, np.int32(0)),
        (nl.psum, nl.float32, np.float32(0)),
        (nl.shared_hbm, nl.float16, np.float16(0)),
    ],
)
def test_zeros_fills_with_zeros(buffer, dtype, zero):
    def kernel(x):
        tile = nl.zeros((128, 96), dtype, buffer=buffer)
        if buffer == nl.shared_hbm:
            return tile
        staged = nl.ndarray(tile.shape, tile.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=staged, src=tile)
        return store(staged)

    out = nkisim.run(kernel, [rand(1, 1)]).outputs
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, np.full((128, 96), zero))


def test_liveness_lets_a_loop_allocate_more_than_sbuf_holds():
    # 40 iterations x (128 x 2048 float32 = 8 KiB per partition) = 320 KiB per
    # partition in total, far more than trn1's 192 KiB per partition of SBUF.
    def kernel(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0] // 128):
            rows = slice(i * 128, (i + 1) * 128)
            tile = nl.ndarray((128, 2048), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=a[rows, :])
            nisa.tensor_scalar(dst=tile, data=tile, op0=nl.multiply, operand0=2.0, op1=nl.add, operand1=1.0)
            nisa.dma_copy(dst=out[rows, :], src=tile)
        return out

    a = rand(128 * 40, 2048)
    result = nkisim.run(kernel, [a], target="trn1")
    np.testing.assert_array_equal(result.outputs, a * np.float32(2) + np.float32(1))


# -- calling kernels ----------------------------------------------------------------------


def test_direct_call_matches_run():
    a, b = rand(128, 512), rand(128, 512)
    direct = add_kernel(a, b)
    via_run = nkisim.run(add_kernel, [a, b]).outputs
    np.testing.assert_array_equal(direct, a + b)
    np.testing.assert_array_equal(direct, via_run)
    np.testing.assert_array_equal(add_kernel(a, b_input=b), a + b)


def test_inputs_as_keyword_dict():
    a, b = rand(128, 64), rand(128, 64)
    np.testing.assert_array_equal(nkisim.run(add_kernel, {"b_input": b, "a_input": a}).outputs, a + b)
    np.testing.assert_array_equal(add_kernel(b_input=b, a_input=a), a + b)


def test_plain_function_kernel_with_non_array_arguments():
    def kernel(x, scale, bias=None):
        tile = load(x)
        nisa.tensor_scalar(dst=tile, data=tile, op0=nl.multiply, operand0=scale)
        return store(tile), bias

    x = rand(128, 8)
    out, bias = nkisim.run(kernel, [x, 3.0]).outputs
    np.testing.assert_array_equal(out, x * np.float32(3))
    assert bias is None


def test_kernel_returning_a_tuple():
    def kernel(a_input, b_input):
        a, b = load(a_input), load(b_input)
        total = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        product = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=total, data1=a, data2=b, op=nl.add)
        nisa.tensor_tensor(dst=product, data1=a, data2=b, op=nl.multiply)
        return store(total), store(product)

    a, b = rand(128, 64), rand(128, 64)
    outputs = nkisim.run(kernel, [a, b]).outputs
    assert isinstance(outputs, tuple) and len(outputs) == 2
    np.testing.assert_array_equal(outputs[0], a + b)
    np.testing.assert_array_equal(outputs[1], a * b)


def test_inputs_are_not_modified():
    def kernel(a_input, b_input):
        zero = nl.zeros(a_input.shape, a_input.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_input, src=zero)  # writes the kernel's HBM copy of the input
        nisa.dma_copy(dst=b_input[0:64], src=zero[0:64])
        return a_input, store(load(b_input))

    a, b = rand(128, 64), rand(128, 64)
    a_before, b_before = a.copy(), b.copy()
    a_out, b_out = nkisim.run(kernel, [a, b]).outputs
    np.testing.assert_array_equal(a, a_before)
    np.testing.assert_array_equal(b, b_before)
    np.testing.assert_array_equal(a_out, np.zeros_like(a))
    np.testing.assert_array_equal(b_out, np.concatenate([np.zeros((64, 64), np.float32), b[64:]]))
    assert not np.shares_memory(a_out, a)


def test_outputs_of_two_runs_are_independent():
    a, b = rand(128, 64), rand(128, 64)
    first = add_kernel(a, b)
    second = add_kernel(b, b)
    np.testing.assert_array_equal(first, a + b)
    np.testing.assert_array_equal(second, b + b)


# -- targets ------------------------------------------------------------------------------


def _version_kernel(x):
    return nisa.get_nc_version()


def test_default_target_is_trn1():
    result = nkisim.run(_version_kernel, [rand(1, 1)])
    assert result.target == "trn1"
    assert result.outputs == nisa.nc_version.gen2


@pytest.mark.parametrize(("name", "version"), [("trn2", nisa.nc_version.gen3), ("trn3", nisa.nc_version.gen4)])
def test_environment_selects_the_target(monkeypatch, name, version):
    monkeypatch.setenv(ENV, name)
    result = nkisim.run(_version_kernel, [rand(1, 1)])
    assert result.target == name
    assert result.outputs == version
    assert nki.jit(_version_kernel)(rand(1, 1)) == version


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_every_target_models_the_first_silicon_revision(target):
    result = nkisim.run(lambda x: nisa.get_nc_sub_version(), [rand(1, 1)], target=target)
    assert result.outputs == 0  # "0 - first revision (default)" in the nki.isa reference


def test_platform_target_is_used_and_beats_the_environment(monkeypatch):
    kernel = nki.jit(platform_target="trn2")(_version_kernel)
    assert nkisim.run(kernel, [rand(1, 1)]).target == "trn2"
    assert kernel(rand(1, 1)) == nisa.nc_version.gen3
    monkeypatch.setenv(ENV, "trn3")
    assert nkisim.run(kernel, [rand(1, 1)]).target == "trn2"


def test_run_target_overrides_platform_target(monkeypatch):
    monkeypatch.setenv(ENV, "trn1")
    kernel = nki.jit(platform_target="trn2")(_version_kernel)
    result = nkisim.run(kernel, [rand(1, 1)], target="trn3")
    assert result.target == "trn3"
    assert result.outputs == nisa.nc_version.gen4


def test_jit_with_and_without_parentheses():
    def body(x):
        return nl.num_programs()

    assert nki.jit(body)(rand(1, 1)) == 1
    assert nki.jit()(body)(rand(1, 1)) == 1
    assert nki.jit(mode="auto")(body)(rand(1, 1)) == 1


# -- nki.language odds and ends -----------------------------------------------------------


def test_program_id_and_num_programs():
    def kernel(x):
        return nl.program_id(0), nl.program_id(axis=0), nl.num_programs(), nl.num_programs(axes=0)

    assert nkisim.run(kernel, [rand(1, 1)]).outputs == (0, 0, 1, 1)


def test_device_print_prints_when_the_kernel_reaches_it(capsys):
    def kernel(x):
        tile = nl.ndarray((2, 3), nl.float32, buffer=nl.sbuf)
        nisa.memset(tile, 1.5)
        nl.device_print("first-print", tile)
        print("between the prints")
        nisa.memset(tile, -7.0)
        nl.device_print("second-print", tile)

    print("before the run")
    nkisim.run(kernel, [rand(1, 1)])
    text = capsys.readouterr().out
    order = [text.index(s) for s in ("before the run", "first-print", "between the prints", "second-print")]
    assert order == sorted(order)
    first, second = text.split("between the prints")
    assert "1.5" in first and "-7" not in first
    assert "-7" in second and "1.5" not in second


def test_tile_size_pmax():
    assert nl.tile_size.pmax == 128

    def kernel(x):
        return nl.tile_size.pmax

    for target in ("trn1", "trn2", "trn3"):
        assert nkisim.run(kernel, [rand(1, 1)], target=target).outputs == 128


NKI_DTYPES = {
    # name: (string it equals, bytes per element)
    "bool_": ("bool", 1),
    "int8": ("int8", 1),
    "int16": ("int16", 2),
    "int32": ("int32", 4),
    "uint8": ("uint8", 1),
    "uint16": ("uint16", 2),
    "uint32": ("uint32", 4),
    "float16": ("float16", 2),
    "bfloat16": ("bfloat16", 2),
    "tfloat32": ("tfloat32", 4),
    "float32": ("float32", 4),
    "float8_e4m3": ("float8_e4m3", 1),
    "float8_e5m2": ("float8_e5m2", 1),
    "float8_e4m3fn": ("float8_e4m3fn", 1),
}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            name,
            marks=pytest.mark.xfail(
                strict=True, reason="nl.tfloat32 is float32 with metadata; numpy cannot parse 'tfloat32' to compare"
            ),
        )
        if name == "tfloat32"
        else name
        for name in NKI_DTYPES
    ],
)
def test_dtype_equals_its_string_name(name):
    string, _ = NKI_DTYPES[name]
    assert getattr(nl, name) == string


@pytest.mark.parametrize("name", list(NKI_DTYPES))
def test_every_nki_dtype_makes_tiles(name):
    string, itemsize = NKI_DTYPES[name]

    def kernel(x):
        by_constant = nl.ndarray((128, 4), getattr(nl, name), buffer=nl.sbuf)
        by_string = nl.ndarray((128, 4), string if name != "bool_" else "bool_", buffer=nl.sbuf)
        return by_constant.dtype, by_string.dtype, by_constant.itemsize

    by_constant, by_string, size = nkisim.run(kernel, [rand(1, 1)]).outputs
    assert by_constant == getattr(nl, name)
    assert by_string == getattr(nl, name)
    assert size == itemsize


def _round_to_tfloat32(values: np.ndarray) -> np.ndarray:
    """Round float32 to 10 mantissa bits, ties to even, by integer arithmetic on the bits."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.int64)
    dropped = bits & 0x1FFF  # the 13 low mantissa bits that tfloat32 lacks
    kept = bits - dropped
    halfway = 0x1000
    lsb_odd = (kept >> 13) & 1 == 1
    up = (dropped > halfway) | ((dropped == halfway) & lsb_odd)
    return np.where(up, kept + 0x2000, kept).astype(np.uint32).view(np.float32)


# 1 + 2**-11 is halfway between 1 and 1 + 2**-10: ties go to the even 1.0.
# 1 + 3 * 2**-11 is halfway between 1 + 2**-10 and 1 + 2**-9: ties go to even 1 + 2**-9.
TFLOAT32_CASES = [
    (1 + 2**-11, 1.0),
    (1 + 3 * 2**-11, 1 + 2**-9),
    (1 + 2**-11 + 2**-20, 1 + 2**-10),
    (1 + 2**-12, 1.0),
    (-(1 + 2**-10 - 2**-23), -(1 + 2**-10)),
    (3.0, 3.0),
    (2**-126 * (1 + 2**-11), 2**-126),
]


def _tf32_kernel(how):
    def kernel(x):
        src = load(x)
        dst = nl.ndarray(x.shape, nl.tfloat32, buffer=nl.sbuf)
        if how == "tensor_scalar":
            nisa.tensor_scalar(dst=dst, data=src, op0=nl.multiply, operand0=1.0)
        elif how == "activation":
            nisa.activation(dst=dst, op=nl.copy, data=src)
        elif how == "tensor_copy":
            nisa.tensor_copy(dst=dst, src=src)
        else:
            nisa.dma_copy(dst=dst, src=x)
        return store(dst, nl.float32)

    return kernel


@pytest.mark.parametrize(
    "how",
    [
        "tensor_scalar",
        "activation",
        "tensor_copy",
        "dma_copy",
    ],
)
def test_tfloat32_tiles_round_to_10_mantissa_bits_on_write(how):
    hand = np.array([[value for value, _ in TFLOAT32_CASES]], np.float32).repeat(128, axis=0)
    randoms = rand(128, 57) * np.float32(1000)
    x = np.concatenate([hand, randoms], axis=1)
    out = nkisim.run(_tf32_kernel(how), [x]).outputs
    np.testing.assert_array_equal(out[:, : len(TFLOAT32_CASES)], np.array([[r for _, r in TFLOAT32_CASES]] * 128))
    np.testing.assert_array_equal(out, _round_to_tfloat32(x))
    assert (out.view(np.uint32) & 0x1FFF == 0).all()


def _input_buffer(x):
    assert x.buffer == nl.hbm, x.buffer  # as NKI's own samples assert of kernel inputs
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)
    return out


def test_kernel_inputs_report_hbm_in_runs_and_profiles():
    x = rand(4, 8)
    np.testing.assert_array_equal(nkisim.run(_input_buffer, [x]).outputs, x)
    assert nkisim.profile(_input_buffer, [((4, 8), "float32")]).instruction_count == 1


def test_view_reads_a_tiles_bytes_as_another_type_of_one_size():
    """``tile.view(dtype)``: the same bytes, no copy: int32 words read back as float32 bit patterns."""

    def kernel(x):
        tile = load(x)
        floats = tile.view(nl.float32)
        out = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out, src=floats)
        return store(out), floats.shape

    words = RNG.integers(0, 2**31 - 1, (128, 16)).astype(np.int32)
    words[words % 5 == 0] = 0x3F800000  # 1.0
    got, shape = nkisim.run(kernel, [words]).outputs
    np.testing.assert_array_equal(got.view(np.int32), words)
    assert shape == (128, 16)
