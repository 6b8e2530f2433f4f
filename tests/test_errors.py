"""Negative tests: an illegal kernel raises a KernelError whose message points at the kernel's own line.

Every message starts with ``file:line:`` of the offending kernel statement, then names
the instruction, its engine and the target, the operand and the rule. The expected
line is found from a marker comment (``# @name``) on the offending line, so editing
this file never silently breaks the line numbers.
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
from nkisim import (
    BoundsError,
    CapacityError,
    DtypeError,
    ExecutionError,
    KernelError,
    MemoryKindError,
    OperandError,
    ShapeError,
    TargetError,
)
from nkisim.memory import Tensor

FILE = Path(__file__).name
_LINES = Path(__file__).read_text().splitlines()


def line_of(marker: str) -> int:
    """The line number of the one line of this file that ends with ``# @marker``."""
    tag = f"# @{marker}"
    hits = [n for n, text in enumerate(_LINES, start=1) if text.rstrip().endswith(tag)]
    assert len(hits) == 1, f"marker {tag!r} is on {len(hits)} lines"
    return hits[0]


def at(marker: str) -> str:
    """A regex for the start of a message about the line marked ``# @marker``."""
    return rf"^{re.escape(FILE)}:{line_of(marker)}: "


def run(kernel, inputs=None, target="trn1"):
    inputs = [np.ones((128, 64), np.float32)] if inputs is None else inputs
    return nkisim.run(kernel, inputs, target=target)


def test_line_of_finds_markers():
    assert line_of("self-check") == _LINES.index("# a marker for the helper's own test  # @self-check") + 1


# a marker for the helper's own test  # @self-check


# -- partition dim ----------------------------------------------------------------------


@pytest.mark.parametrize("buffer", [nl.sbuf, nl.psum])
def test_ndarray_partition_dim_over_128(buffer):
    def kernel(x):
        nl.ndarray((256, 4), nl.float32, buffer=buffer)  # @ndarray-256

    with pytest.raises(ShapeError, match=at("ndarray-256") + r"nl\.ndarray: partition dim 256 exceeds 128$"):
        run(kernel)


def test_instruction_operand_partition_dim_over_128():
    # nl.ndarray and Tensor.reshape refuse on-chip tensors of more than 128 partitions,
    # so the instruction-level rule is reached here with a hand-built view of SBUF.
    def kernel(x):
        tile = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        big = Tensor(np.zeros((256, 64), np.float32), tile.dtype, tile.buffer, "big", tile.storage, None)
        nisa.tensor_tensor(dst=tile, data1=big, data2=tile, op=nl.add)  # @operand-256

    pattern = at("operand-256") + r"nisa\.tensor_tensor \[Vector, trn1\]: data1 partition dim 256 exceeds 128$"
    with pytest.raises(ShapeError, match=pattern):
        run(kernel)


def test_reshape_cannot_change_the_partition_dim():
    def kernel(x):
        row = nl.ndarray((1, 512), nl.float32, buffer=nl.sbuf)
        row.reshape((256, 2))  # @reshape-256

    with pytest.raises(ShapeError, match=at("reshape-256") + r"cannot reshape \[1, 512\] to \[256, 2\].*partition"):
        run(kernel)


# -- memory kinds -----------------------------------------------------------------------


def test_matmul_dst_must_be_in_psum():
    def kernel(x):
        stationary = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.sbuf)
        moving = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.sbuf)
        result = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        nisa.nc_matmul(result, stationary, moving)  # @matmul-dst

    pattern = at("matmul-dst") + r"nisa\.nc_matmul \[Tensor, trn1\]: dst must be in PSUM, not SBUF"
    with pytest.raises(MemoryKindError, match=pattern):
        run(kernel)


@pytest.mark.parametrize("operand", ["stationary", "moving"])
def test_matmul_inputs_must_be_in_sbuf(operand):
    def kernel(x):
        bufs = {"stationary": nl.sbuf, "moving": nl.sbuf, operand: nl.psum}
        stationary = nl.ndarray((128, 128), nl.bfloat16, buffer=bufs["stationary"])
        moving = nl.ndarray((128, 128), nl.bfloat16, buffer=bufs["moving"])
        result = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=result, stationary=stationary, moving=moving)  # @matmul-in

    pattern = at("matmul-in") + rf"nisa\.nc_matmul \[Tensor, trn1\]: {operand} must be in SBUF, not PSUM"
    with pytest.raises(MemoryKindError, match=pattern):
        run(kernel)


def test_tensor_tensor_inputs_not_both_in_psum():
    def kernel(x):
        a = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
        b = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
        c = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.add)  # @tt-psum

    pattern = at("tt-psum") + r"nisa\.tensor_tensor \[Vector, trn1\]: data1 and data2 must not both be in PSUM"
    with pytest.raises(MemoryKindError, match=pattern):
        run(kernel)


def test_iota_into_psum_is_refused_on_gpsimd():
    def kernel(x):
        dst = nl.ndarray((128, 64), nl.int32, buffer=nl.psum)
        nisa.iota(dst, [[1, 64]], 0)  # @iota-psum

    pattern = at("iota-psum") + r"nisa\.iota \[GpSimd, trn1\]: dst is in PSUM, which the GpSimd Engine cannot access"
    with pytest.raises(MemoryKindError, match=pattern):
        run(kernel)


def test_tensor_copy_on_gpsimd_cannot_read_psum():
    def kernel(x):
        src = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
        dst = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=dst, src=src, engine=nisa.gpsimd_engine)  # @copy-gpsimd

    pattern = at("copy-gpsimd") + r"nisa\.tensor_copy \[GpSimd, trn1\]: src is in PSUM, which the GpSimd Engine"
    with pytest.raises(MemoryKindError, match=pattern):
        run(kernel)


def test_compute_instruction_cannot_read_hbm():
    def kernel(x):
        dst = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=dst, src=x)  # @copy-hbm

    pattern = at("copy-hbm") + r"nisa\.tensor_copy \[Vector, trn1\]: src must be in SBUF or PSUM, not hbm \(x\)"
    with pytest.raises(MemoryKindError, match=pattern):
        run(kernel)


def test_compute_instruction_cannot_write_hbm():
    def kernel(x):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.hbm)
        tile = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=out, data1=tile, data2=tile, op=nl.multiply)  # @tt-hbm

    pattern = at("tt-hbm") + r"nisa\.tensor_tensor \[Vector, trn1\]: dst must be in SBUF or PSUM, not hbm"
    with pytest.raises(MemoryKindError, match=pattern):
        run(kernel)


# -- element counts ---------------------------------------------------------------------


def test_dma_copy_element_counts_must_match():
    def kernel(x):
        dst = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=dst, src=x)  # @dma-count

    pattern = (
        at("dma-count")
        + r"nisa\.dma_copy \[DMA, trn1\]: dst has 4096 elements \(\[128, 32\]\) but src has 8192 \(\[128, 64\]\)"
    )
    with pytest.raises(ShapeError, match=pattern):
        run(kernel)


def test_dma_copy_allows_different_shapes_with_equal_counts():
    def kernel(x):
        tile = nl.ndarray((64, 128), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        out = nl.ndarray((64, 128), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tile)
        return out

    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    np.testing.assert_array_equal(run(kernel, [x]).outputs, x.reshape(64, 128))


def test_tensor_tensor_element_counts_must_match():
    def kernel(x):
        a = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
        b = nl.zeros((128, 32), nl.float32, buffer=nl.sbuf)
        c = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.add)  # @tt-count

    rule = r"data2 has 32 elements per partition but data1 has 64"
    pattern = at("tt-count") + r"nisa\.tensor_tensor \[Vector, trn1\]: " + rule
    with pytest.raises(ShapeError, match=pattern):
        run(kernel)


def test_tensor_tensor_partition_counts_must_match():
    def kernel(x):
        a = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
        c = nl.ndarray((64, 128), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=c, data1=a, data2=a, op=nl.add)  # @tt-parts

    pattern = at("tt-parts") + r"nisa\.tensor_tensor \[Vector, trn1\]: dst partition dim 64 differs from data1"
    with pytest.raises(ShapeError, match=pattern):
        run(kernel)


# -- dtypes -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [nl.float32, nl.bfloat16])
def test_bitvec_op_needs_integer_tiles(dtype):
    def kernel(x):
        a = nl.zeros((128, 64), dtype, buffer=nl.sbuf)
        c = nl.ndarray((128, 64), dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=c, data1=a, data2=a, op=nl.bitwise_and)  # @bitvec

    name = "float32" if dtype == nl.float32 else "bfloat16"
    pattern = (
        at("bitvec") + rf"nisa\.tensor_tensor \[Vector, trn1\]: data1 dtype {name} is not an integer type.*bitwise_and"
    )
    with pytest.raises(DtypeError, match=pattern):
        run(kernel)


def test_bitvec_op_on_integer_tiles_is_accepted():
    def kernel(x):
        a = nl.ndarray((128, 4), nl.int32, buffer=nl.sbuf)
        nisa.iota(a, [[1, 4]], 0, channel_multiplier=4)
        c = nl.ndarray((128, 4), nl.int32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=c, data1=a, data2=a, op=nl.bitwise_xor)
        out = nl.ndarray((128, 4), nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=c)
        return out

    np.testing.assert_array_equal(run(kernel).outputs, np.zeros((128, 4), np.int32))


@pytest.mark.parametrize(("stationary", "moving"), [(nl.float32, nl.bfloat16), (nl.bfloat16, nl.float32)])
def test_matmul_fp32_cannot_pair_with_bf16(stationary, moving):
    def kernel(x):
        s = nl.zeros((128, 128), stationary, buffer=nl.sbuf)
        m = nl.zeros((128, 128), moving, buffer=nl.sbuf)
        result = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(result, s, m)  # @matmul-fp32

    pattern = at("matmul-fp32") + r"nisa\.nc_matmul \[Tensor, trn1\]: moving float32/tfloat32 inputs must be paired"
    with pytest.raises(DtypeError, match=pattern):
        run(kernel)


def test_nc_transpose_dtypes_must_match():
    def kernel(x):
        data = nl.zeros((128, 64), nl.bfloat16, buffer=nl.sbuf)
        dst = nl.ndarray((64, 128), nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=dst, data=data)  # @transpose

    pattern = at("transpose") + r"nisa\.nc_transpose \[Tensor, trn1\]: dst dtype float32 must equal data's bfloat16"
    with pytest.raises(DtypeError, match=pattern):
        run(kernel)


def test_redundant_dtype_argument_must_agree_with_dst():
    def kernel(x):
        src = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
        dst = nl.ndarray((128, 64), nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy(dst=dst, src=src, dtype=nl.float32)  # @dtype-arg

    pattern = at("dtype-arg") + r"nisa\.tensor_copy: dtype float32 differs from dst dtype bfloat16"
    with pytest.raises(OperandError, match=pattern):
        run(kernel)


def test_ndarray_rejects_non_nki_dtype():
    def kernel(x):
        nl.ndarray((128, 4), np.float64, buffer=nl.sbuf)  # @float64

    with pytest.raises(DtypeError, match=at("float64") + r"nl\.ndarray: float64 is not an NKI data type"):
        run(kernel)


# -- bounds -----------------------------------------------------------------------------


def test_slice_past_the_end_of_an_hbm_tensor():
    def kernel(x):
        dst = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=dst, src=x[64:192, :])  # @slice-oob

    pattern = at("slice-oob") + r"slice 64:192 is out of bounds for dim 0 of size 128 of Tensor\(x: float32\[128, 64\]"
    with pytest.raises(BoundsError, match=pattern):
        run(kernel)


def test_ds_past_the_end_of_an_hbm_tensor():
    def kernel(x):
        dst = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=dst, src=x[:, nl.ds(48, 32)])  # @ds-oob

    with pytest.raises(BoundsError, match=at("ds-oob") + r"slice 48:80 is out of bounds for dim 1 of size 64"):
        run(kernel)


@pytest.mark.parametrize(("index", "shown"), [(128, "128"), (-129, "-129")])
def test_integer_index_out_of_range(index, shown):
    def kernel(x):
        dst = nl.ndarray((1, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=dst, src=x[index])  # @int-oob

    pattern = at("int-oob") + rf"index {shown} is out of bounds for dim 0 of size 128 of Tensor\(x:"
    with pytest.raises(BoundsError, match=pattern):
        run(kernel)


def test_integer_index_out_of_range_on_a_tile():
    def kernel(x):
        tile = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        tile[5, 64]  # @tile-oob

    with pytest.raises(BoundsError, match=at("tile-oob") + r"index 64 is out of bounds for dim 1 of size 64"):
        run(kernel)


def test_bounds_error_is_also_an_index_error():
    assert issubclass(BoundsError, IndexError)


# -- capacity ---------------------------------------------------------------------------


def test_sbuf_overflow_names_the_line_and_the_live_allocations():
    # trn1 SBUF: 24 MiB over 128 partitions = 196608 bytes per partition; a 128x2048
    # float32 tile takes 8192 bytes per partition, so 24 fit and the 25th does not.
    # spill=False: the kernel must fit, so the tile that does not is an error, not a spill.
    runs = []  # a kernel that does not fit is traced again with compiler liveness: count the first run

    def kernel(x):
        runs.append([])
        for _ in range(100):
            runs[-1].append(nl.ndarray((128, 2048), nl.float32, buffer=nl.sbuf))  # @sbuf-full

    line = line_of("sbuf-full")
    pattern = (
        rf"(?s){at('sbuf-full')}SBUF is full: cannot allocate 8192 bytes per partition for \S+ float32\[128, 2048\]: "
        r"196608 of 196608 bytes per partition in use, 0 free; the request exceeds the free space by 8192 bytes "
        r"per partition\. An automatic SBUF tile that does not fit .* Live allocations:\n"
        rf"  \S+ float32\[128, 2048\]: 8192 B/partition, offset 0 at {re.escape(FILE)}:{line}\n"
        rf"  \S+ float32\[128, 2048\]: 8192 B/partition, offset 8192 at {re.escape(FILE)}:{line}\n"
    )
    with pytest.raises(CapacityError, match=pattern) as info:
        run(nki.jit(spill=False)(kernel))
    assert len(runs[0]) == 24
    assert isinstance(info.value, MemoryError)
    assert info.value.loc.line == line


def test_sbuf_overflow_says_by_how_much_the_request_exceeds_the_free_space_and_when_tiles_spill():
    # trn1 SBUF: 196608 bytes per partition. 23 float32[128, 2048] tiles take 23 x 8192 = 188416,
    # leaving 196608 - 188416 = 8192 free; a float32[128, 3072] tile needs 3072 x 4 = 12288,
    # 12288 - 8192 = 4096 more than is free.
    def kernel(x):
        tiles = [nl.ndarray((128, 2048), nl.float32, buffer=nl.sbuf) for _ in range(23)]
        tiles.append(nl.ndarray((128, 3072), nl.float32, buffer=nl.sbuf))  # @sbuf-exceeds

    with pytest.raises(CapacityError) as info:
        run(nki.jit(spill=False)(kernel))
    message = str(info.value)
    assert re.match(at("sbuf-exceeds"), message)
    first = message.splitlines()[0]
    assert "cannot allocate 12288 bytes per partition for " in first
    assert "float32[128, 3072]: 188416 of 196608 bytes per partition in use, 8192 free;" in first
    assert "the request exceeds the free space by 4096 bytes per partition." in first
    assert (
        "An automatic SBUF tile that does not fit even with tiles freed after their last use is spilled to device "
        "memory, as the compiler does, unless the kernel forbids it (nki.jit(spill=False)); tiles placed with "
        "address= never spill (docs/semantics.md, 'Spilling')."
    ) in first
    assert first.endswith("Live allocations:")
    assert message.count("float32[128, 2048]: 8192 B/partition") == 12  # the twelve largest are listed
    assert message.splitlines()[-1] == "  ... and 11 more"


def test_sbuf_overflow_with_enough_free_bytes_names_the_longest_free_range():
    # trn1 SBUF, 196608 bytes per partition: tiles a, b, c of 65536 (float32[128, 16384]) fill it;
    # freeing a and c leaves 2 x 65536 free, in two ranges of 65536 around b, and a 98304-byte
    # tile (float32[128, 24576]) fits neither, although 131072 bytes are free.
    def kernel(x):
        a = nl.ndarray((128, 16384), nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((128, 16384), nl.float32, buffer=nl.sbuf)
        c = nl.ndarray((128, 16384), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=b, value=0.0)
        del a, c
        nl.ndarray((128, 24576), nl.float32, buffer=nl.sbuf)  # @sbuf-split
        nisa.memset(dst=b, value=1.0)

    with pytest.raises(CapacityError) as info:
        run(nki.jit(spill=False)(kernel))
    first = str(info.value).splitlines()[0]
    assert re.match(at("sbuf-split"), first)
    assert "cannot allocate 98304 bytes per partition for " in first
    assert "65536 of 196608 bytes per partition in use, 131072 free;" in first
    assert "the free bytes are split: the longest free range is 65536 bytes." in first


def test_psum_overflow():
    # trn1 PSUM: 16 KiB per partition; a 128x512 float32 tile is one 2 KiB bank.
    runs = []

    def kernel(x):
        runs.append([])
        while True:
            runs[-1].append(nl.ndarray((128, 512), nl.float32, buffer=nl.psum))  # @psum-full

    with pytest.raises(CapacityError, match=at("psum-full") + r"PSUM is full.* An automatic PSUM tile"):
        run(kernel)
    assert len(runs[0]) == 8


# -- targets ----------------------------------------------------------------------------


def _scalar_copy(x):
    src = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=src, src=x)
    dst = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=dst, src=src, engine=nisa.scalar_engine)  # @scalar-copy
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=dst)
    return out


def test_tensor_copy_on_scalar_engine_is_refused_on_trn1():
    pattern = at("scalar-copy") + r"nisa\.tensor_copy \[Scalar, trn1\]: engine .*NeuronCore-v3"
    with pytest.raises(TargetError, match=pattern):
        run(_scalar_copy, target="trn1")


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_tensor_copy_on_scalar_engine_works_on_newer_targets(target):
    x = np.linspace(-4, 4, 128 * 64, dtype=np.float32).reshape(128, 64)
    result = run(_scalar_copy, [x], target=target)
    assert result.target == target
    np.testing.assert_array_equal(result.outputs, x)


def test_unknown_target_name_in_run():
    # An unknown name is a usage error of nkisim.run; it is not (yet) a KernelError.
    with pytest.raises((ValueError, TargetError), match=r"unknown target 'trn9'.*trn1.*trn2.*trn3"):
        run(_scalar_copy, target="trn9")


def test_unknown_target_name_in_jit():
    with pytest.raises((ValueError, TargetError), match=r"unknown target 'trn9'"):
        nki.jit(platform_target="trn9")(_scalar_copy)


def test_unknown_target_name_in_environment(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn9")
    with pytest.raises((ValueError, TargetError), match=r"unknown target 'trn9'"):
        nkisim.run(_scalar_copy, [np.ones((128, 64), np.float32)])


# -- arguments --------------------------------------------------------------------------


def test_misspelled_keyword():
    def kernel(x):
        dst = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=dst, source=x)  # @misspelled

    rule = r"source is not an argument of this instruction; did you mean 'src'\?"
    pattern = at("misspelled") + r"nisa\.dma_copy \[trn1\]: " + rule
    with pytest.raises(OperandError, match=pattern):
        run(kernel)


def test_missing_required_argument():
    def kernel(x):
        tile = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=tile, data1=tile, data2=tile)  # @missing

    with pytest.raises(OperandError, match=at("missing") + r"nisa\.tensor_tensor \[trn1\]: op is a required argument"):
        run(kernel)


@pytest.mark.parametrize("op", ["add", 1, None])
def test_wrong_type_for_op(op):
    def kernel(x):
        tile = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=tile, data1=tile, data2=tile, op=op)  # @op-type

    pattern = at("op-type") + rf"nisa\.tensor_tensor \[trn1\]: op got {type(op).__name__} {re.escape(repr(op))}"
    with pytest.raises(OperandError, match=pattern):
        run(kernel)


def test_activation_function_is_not_an_alu_op():
    def kernel(x):
        tile = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=tile, data1=tile, data2=tile, op=nl.exp)  # @op-exp

    pattern = at("op-exp") + r"nisa\.tensor_tensor \[Vector, trn1\]: op nl\.exp is not an ALU operator"
    with pytest.raises(OperandError, match=pattern):
        run(kernel)


def test_argument_given_by_position_and_keyword():
    def kernel(x):
        tile = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(tile, tile, dst=tile)  # @twice

    pattern = at("twice") + r"nisa\.tensor_copy: dst is given both by position and by keyword"
    with pytest.raises(OperandError, match=pattern):
        run(kernel)


def test_too_many_positional_arguments():
    def kernel(x):
        tile = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(tile, tile, nisa.vector_engine, None, 1)  # @too-many

    with pytest.raises(OperandError, match=at("too-many") + r"nisa\.tensor_copy: takes at most 4 positional"):
        run(kernel)


def test_engine_the_instruction_cannot_run_on():
    def kernel(x):
        tile = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=tile, data1=tile, data2=tile, op=nl.add, engine=nisa.tensor_engine)  # @engine

    pattern = at("engine") + r"nisa\.tensor_tensor \[trn1\]: engine Tensor is not one of this instruction's engines"
    with pytest.raises(OperandError, match=pattern):
        run(kernel)


def test_kernel_inputs_that_do_not_bind():
    def kernel(a, b):  # @bind
        return None

    with pytest.raises(KernelError, match=at("bind") + r"cannot bind inputs to .*kernel\(a, b\): missing .*'b'"):
        run(kernel, [np.ones((4, 4), np.float32)])


def test_input_array_of_non_nki_dtype():
    def kernel(x):  # @input-dtype
        return None

    with pytest.raises(OperandError, match=at("input-dtype") + r"input 'x' float64 is not an NKI data type"):
        run(kernel, [np.ones((4, 4), np.float64)])


def test_a_call_spread_over_lines_is_reported_at_its_first_line():
    def kernel(x):
        tile = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(  # @multi-line
            dst=tile,
            data1=tile,
            data2=x,
            op=nl.add,
        )

    with pytest.raises(MemoryKindError, match=at("multi-line") + r"nisa\.tensor_tensor \[Vector, trn1\]: data2 must"):
        run(kernel)


def test_errors_from_a_direct_kernel_call_name_the_same_line():
    @nki.jit(platform_target="trn2")
    def kernel(x):
        dst = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
        nisa.dma_copy(dst=dst, src=x)  # @direct-call

    pattern = at("direct-call") + r"nisa\.dma_copy \[DMA, trn2\]: dst must be in HBM or .*SBUF, not PSUM"
    with pytest.raises(MemoryKindError, match=pattern):
        kernel(np.ones((128, 64), np.float32))


# -- no raw Python or numpy errors ------------------------------------------------------


def _tile(shape=(128, 64), dtype=nl.float32, buffer=nl.sbuf):
    return nl.ndarray(shape, dtype, buffer=buffer)


BAD_KERNELS = {
    "list index": lambda x: _tile()[[0, 1]],
    "float index": lambda x: _tile()[1.5],
    "None index": lambda x: _tile()[None],
    "too many indices": lambda x: _tile()[0, 0, 0],
    "negative step": lambda x: x[::-1],
    "zero step": lambda x: x[:, 0:4:0],
    "empty slice": lambda x: nisa.tensor_copy(dst=_tile()[0:0], src=_tile()[0:0]),
    "fractional shape": lambda x: nl.ndarray((128, 2.5), nl.float32),
    "negative shape": lambda x: nl.ndarray((128, -1), nl.float32),
    "1-D tile": lambda x: nl.ndarray((128,), nl.float32),
    "float64 tile": lambda x: nl.ndarray((128, 4), "float64"),
    "unknown buffer": lambda x: nl.ndarray((128, 4), nl.float32, buffer="dram"),
    "reshape count": lambda x: _tile().reshape((128, 65)),
    "numpy array operand": lambda x: nisa.dma_copy(dst=_tile(), src=np.ones((128, 64), np.float32)),
    "scalar for a tile": lambda x: nisa.tensor_tensor(dst=_tile(), data1=_tile(), data2=3.0, op=nl.add),
    "string value": lambda x: nisa.memset(_tile(), "zero"),
    "string engine": lambda x: nisa.tensor_copy(dst=_tile(), src=_tile(), engine="vector"),
    "reduce over axis 0": lambda x: nisa.tensor_reduce(dst=_tile((128, 1)), op=nl.add, data=_tile(), axis=0),
    "reduce past the last axis": lambda x: nisa.tensor_reduce(dst=_tile((128, 1)), op=nl.add, data=_tile(), axis=3),
    "bad iota pattern": lambda x: nisa.iota(_tile(dtype=nl.int32), [[1]], 0),
    "wide scale": lambda x: nisa.activation(dst=_tile(), op=nl.exp, data=_tile(), scale=_tile((128, 2))),
    "matmul contraction": lambda x: nisa.nc_matmul(
        _tile((128, 128), buffer=nl.psum), _tile((128, 128)), _tile((64, 128))
    ),
    "redundant dtype not a dtype": lambda x: nisa.tensor_copy(dst=_tile(), src=_tile(), dtype="float64"),
    "device_print of a number": lambda x: nl.device_print("value", 5),
    "shared_constant of float64": lambda x: nl.shared_constant(np.ones((2, 2)), "float64"),
    "nl.add called as a function": lambda x: nl.add(x, x),
}

#: Known gaps, each a bug to fix outside the front end (strict: a fix makes the test fail until this is updated).
KNOWN_RAW: dict[str, str] = {}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.xfail(reason=KNOWN_RAW[name], strict=True)) if name in KNOWN_RAW else name
        for name in BAD_KERNELS
    ],
)
def test_illegal_kernels_raise_kernel_errors_not_raw_exceptions(name):
    with pytest.raises(Exception) as info:  # any class: the test is about which one arrives
        run(BAD_KERNELS[name])
    error = info.value
    assert isinstance(error, KernelError), f"{name}: {type(error).__name__}: {error}"
    assert not isinstance(error, ExecutionError), f"{name}: an internal failure, not a rule: {error}"
    assert str(error).startswith(f"{FILE}:"), str(error)
    assert error.__cause__ is None, f"{name}: chained to {error.__cause__!r}"


def test_nki_calls_outside_a_kernel():
    with pytest.raises(KernelError, match="only work inside a kernel"):
        nl.ndarray((128, 4), nl.float32)
    with pytest.raises(KernelError, match="only work inside a kernel"):
        nisa.memset(None, 0)


def test_view_needs_a_type_of_the_same_item_size():
    def kernel(x):
        tile = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        tile.view(nl.bfloat16)  # @view-size

    pattern = at("view-size") + r".*view\(bfloat16\): its item size 2 differs from float32's 4"
    with pytest.raises(DtypeError, match=pattern):
        run(kernel)
