"""Generation differences are named capabilities in the generation files.

Every published capability value is pinned here with its source; the instructions ask
the capabilities (never the NeuronCore version), so a what-if generation that drops or
adds one changes what kernels may do on it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim import TargetError
from nkisim.hw import load_target
from nkisim.hw.model import Capabilities, capability_holders, packaged_generations
from nkisim.isa import REGISTRY
from nkisim.isa.spec import InstructionSpec, instruction, missing_capability, needs

GENERATIONS = Path(nkisim.__file__).parent / "hw" / "generations"
TARGETS = ("trn1", "trn2", "trn3")
FEATURES = Capabilities.features()

# Published values (trn1, trn2, trn3). Sources: the nki.isa API reference page of the
# instruction named ([api]), its NKI 0.1 "Estimated instruction cost" edition ([isa]),
# and the Trainium2/Trainium3 architecture guides ([trn2 arch], [trn3 arch]).
PUBLISHED = {
    # [api nc_matmul_mx], [api quantize_mx]: "Available only on NeuronCore-v4 and newer."
    "mx_formats": (False, False, True),
    # [api exponential]: NeuronCore-v4 and newer; [trn3 arch] Fast Exponential Evaluation.
    "vector_exponential": (False, False, True),
    # [api range_select]: "Available only on NeuronCore-v3 and newer."
    "vector_range_select": (False, True, True),
    # [api nonzero_with_count]: "Available only on NeuronCore-v3 and newer."
    "gpsimd_nonzero_with_count": (False, True, True),
    # [api rand2]: "Available only on NeuronCore-v4 and newer."
    "vector_rand2": (False, False, True),
    # [api rng]: engines "NeuronCore-v2: Vector. NeuronCore-v3+: GpSimd, Vector";
    # [api rand_set_state], [api rand_get_state]: "Supported arch versions: NeuronCore-v3+".
    "gpsimd_prng": (False, True, True),
    # [api rand_get_state]: engines "NeuronCore-v3: GpSimd. NeuronCore-v4+: GpSimd, Vector".
    "vector_prng_state": (False, False, True),
    # [api rand_get_state]: dst "must be in SBUF (NeuronCore-v3) or SBUF/PSUM (NeuronCore-v4+)".
    "rand_get_state_to_psum": (False, False, True),
    # [api tensor_copy]: "On NeuronCore v2, tensor_copy is not supported on the Scalar Engine";
    # engines "NeuronCore v3+: Vector, Scalar, GpSimd".
    "scalar_tensor_copy": (False, True, True),
    # [api nc_matmul]: "On NeuronCore-v2, performance mode is not supported. On NeuronCore-v3 and
    # NeuronCore-v4, Tensor Engine supports FP8 double performance mode".
    "matmul_double_row": (False, True, True),
    # [api nc_matmul]: "2x 64 row tiles (NeuronCore-v2 or newer), or 4x 32 row tiles (NeuronCore-v3 or newer)".
    "pe_tile_sizes": ((128, 64), (128, 64, 32), (128, 64, 32)),
    # [isa activation_reduce]: "On NeuronCore-v2, the reduce_op can only be an addition".
    # (trn2/trn3's maximum/minimum are nkisim's choice: the docs name no list.)
    "activation_reduce_ops": (("add",), ("add", "maximum", "minimum"), ("add", "maximum", "minimum")),
    # [isa nc_matmul]: "float8_e4m3/float8_e5m2/bfloat16/float16/tfloat32/float32 input data types";
    # [api nc_matmul] for NeuronCore-v4 adds float8_e4m3fn.
    "matmul_input_dtypes": (
        ("float8_e4m3", "float8_e5m2", "bfloat16", "float16", "tfloat32", "float32"),
        ("float8_e4m3", "float8_e5m2", "bfloat16", "float16", "tfloat32", "float32"),
        ("float8_e4m3", "float8_e5m2", "float8_e4m3fn", "bfloat16", "float16", "tfloat32", "float32"),
    ),
    # [isa nc_matmul]: "The matmul accumulation and results are always in float32" (v2/v3);
    # [api nc_matmul]: NeuronCore-v4 may write a bfloat16 dst.
    "matmul_output_dtypes": (("float32",), ("float32",), ("float32", "bfloat16")),
    # [api rand_get_state]: "24 elements (Vector)" of XORWOW state = 4 streams of 6 words (v4);
    # [trn3 arch]: 4 x 32-bit random values per lane per cycle. Before v4, one word per lane (nkisim's xorshift32).
    "vector_prng_streams": (1, 1, 4),
    # [api rand2]: "Uses XORWOW PRNG algorithm" (v4); v2/v3's "LFSR" is nkisim's xorshift32.
    "vector_prng": ("xorshift32", "xorshift32", "xorwow"),
    # [api dma_copy] and the DGE guide: the hardware DGE block of the Trainium2 architecture.
    "hardware_dge": (False, True, True),
    # LNC=2 (two NeuronCores per logical core) is a Trainium2/Trainium3 feature [api core_barrier].
    "lnc2_collectives": (False, True, True),
    # nki.collectives pages: "This document is relevant for: Trn2, Trn3" [api nki.collectives].
    "replica_collectives": (False, True, True),
    # [trn1 arch] SBUF access: on NeuronCore-v2 an access of more than 64 partitions starts at 0,
    # of 33-64 at 0 or 64, of up to 32 at a multiple of 32; no such rule is published for v3/v4.
    "partition_start_quadrants": (True, False, False),
    # nkisim's reading of nc_matmul's accumulate= (docs/checks.md): defined onto any PSUM value from v4.
    "psum_accumulate_onto_any_write": (False, False, True),
    # [arch] access patterns: up to 4 free dims, each with a uint16 size and an int16 stride in elements.
    "access_pattern_free_dims": (4, 4, 4),
    "access_pattern_max_size": (65535, 65535, 65535),
    "access_pattern_max_stride": (32767, 32767, 32767),
    # [api nc_matmul]: is_transpose passes stationary's data through on NeuronCore-v3+.
    "transpose_passes_dtype": (False, True, True),
    # [api dma_transpose] (NKI 0.3): an indirect (vector_offset) source needs NeuronCore-v3+.
    "dma_indirect_transpose": (False, True, True),
    # [isa activation]: NeuronCore-v2 adds "another vector bias"; the 0.2 API takes float | tile.
    "activation_scalar_bias": (False, True, True),
    # [api activate2]: "Available only on NeuronCore-v4 and newer."
    "scalar_activate2": (False, False, True),
}

#: nkisim's own readings, not published numbers (docs/semantics.md): checked for consistency only.
OUR_CHOICES = {"matmul_dst_psum_banks": (1, 1, 8)}


def _toml_capabilities(name: str) -> dict[str, object]:
    """The ``[capabilities]`` table of a packaged generation file, read without nkisim."""
    return tomllib.loads((GENERATIONS / f"{name}.toml").read_text())["capabilities"]


@pytest.mark.parametrize("index", range(3), ids=TARGETS)
def test_published_capabilities(index: int) -> None:
    caps = load_target(TARGETS[index]).capabilities
    for name, values in {**PUBLISHED, **OUR_CHOICES}.items():
        assert getattr(caps, name) == values[index], f"{TARGETS[index]}: {name}"


def test_every_capability_is_pinned_and_stated_in_every_file() -> None:
    assert set(PUBLISHED) | set(OUR_CHOICES) == set(Capabilities.model_fields)
    for name in TARGETS:
        assert set(_toml_capabilities(name)) == set(Capabilities.model_fields), name


def test_capabilities_are_required_frozen_and_strict() -> None:
    data = load_target("trn2").capabilities.model_dump()
    del data["hardware_dge"]
    with pytest.raises(ValueError, match="hardware_dge"):
        Capabilities.model_validate(data)
    caps = load_target("trn2").capabilities
    with pytest.raises(ValueError):
        caps.hardware_dge = False  # type: ignore[misc]
    with pytest.raises(ValueError, match="xorshift32"):
        Capabilities.model_validate({**caps.model_dump(), "vector_prng_streams": 4})


def test_hbm_capacity_per_neuroncore_is_published() -> None:
    # Device memory per chip over NeuronCores per chip: trn1 32 GiB / 2 [trainium_inferentia2_arch],
    # trn2 96 GiB / 8 [trainium2_arch], trn3 144 GiB / 8 [trainium3_arch].
    gib = 1 << 30
    assert [load_target(t).hbm.capacity_bytes for t in TARGETS] == [16 * gib, 12 * gib, 18 * gib]


def test_moving_fmax_is_one_psum_bank_then_the_whole_psum() -> None:
    # [isa nc_matmul]: moving free size <= 512 (one 2 KiB PSUM bank of fp32) on trn1/trn2;
    # trn3: all 8 banks (nkisim's reading, docs/semantics.md).
    for name, banks in zip(TARGETS, (1, 1, 8)):
        hw = load_target(name)
        assert (
            hw.tensor.moving_fmax * 4
            == hw.psum.bank_bytes * banks
            == hw.psum.bank_bytes * hw.capabilities.matmul_dst_psum_banks
        )


# -- requires and missing_capability ------------------------------------------------------


def _spec(requires: tuple[str, ...]) -> InstructionSpec:
    base = REGISTRY["iota"]
    return InstructionSpec(base.name, base.operands, base.engines, base.semantics, base.cost, requires=requires)


@settings(max_examples=200, deadline=None)
@given(target=st.sampled_from(TARGETS), requires=st.lists(st.sampled_from(FEATURES), max_size=5, unique=True))
def test_missing_capability_agrees_with_the_toml_table(target: str, requires: list[str]) -> None:
    table = _toml_capabilities(target)
    expected = next((name for name in requires if table[name] is not True), None)
    assert missing_capability(_spec(tuple(requires)), load_target(target)) == expected


def test_requires_names_only_boolean_capabilities() -> None:
    iota = REGISTRY["iota"]
    with pytest.raises(ValueError, match="pe_tile_sizes"):
        instruction("bogus", iota.operands, iota.engines, iota.cost, requires=("pe_tile_sizes",), registry={})


def test_instructions_require_the_capabilities_that_name_them() -> None:
    requires = {name: spec.requires for name, spec in REGISTRY.items() if spec.requires}
    assert requires == {
        "core_barrier": ("lnc2_collectives",),
        "sendrecv": ("lnc2_collectives",),
        "quantize_mx": ("mx_formats",),
        "nc_matmul_mx": ("mx_formats",),
        "exponential": ("vector_exponential",),
        "range_select": ("vector_range_select",),
        "nonzero_with_count": ("gpsimd_nonzero_with_count",),
        "rand2": ("vector_rand2",),
        "activate2": ("scalar_activate2",),
        "rand_set_state": ("gpsimd_prng",),
        "rand_get_state": ("gpsimd_prng",),
    }


def test_the_error_names_the_capability_and_who_has_it() -> None:
    assert needs("mx_formats") == "needs mx_formats, which trn3 (NeuronCore-v4) has"
    assert (
        needs("lnc2_collectives") == "needs lnc2_collectives, which trn2 (NeuronCore-v3) and trn3 (NeuronCore-v4) have"
    )
    assert [hw.name for hw in capability_holders("hardware_dge")] == ["trn2", "trn3"]
    assert [hw.name for hw in packaged_generations()] == list(TARGETS)

    def kernel():
        src = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
        dst = nl.ndarray((128, 16), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
        scale = nl.ndarray((128, 16), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(dst=dst, src=src, dst_scale=scale)

    with pytest.raises(
        TargetError, match=r"nisa\.quantize_mx \[Vector, trn2\]: needs mx_formats, which trn3 \(NeuronCore-v4\) has$"
    ):
        nkisim.profile(kernel, [], target="trn2")


# -- a what-if generation changes behaviour by capability, not by version ------------------


def _whatif(tmp_path: Path, base: str, capabilities: str) -> Path:
    path = tmp_path / "whatif.toml"
    path.write_text(f'base = "{base}"\nname = "{base}-whatif"\n[capabilities]\n{capabilities}\n')
    return path


@pytest.mark.placeholder_tiles
def test_a_trn3_without_mx_refuses_quantize_mx(tmp_path: Path) -> None:
    path = _whatif(tmp_path, "trn3", "mx_formats = false")

    def kernel():
        src = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
        dst = nl.ndarray((128, 16), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
        scale = nl.ndarray((128, 16), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(dst=dst, src=src, dst_scale=scale)

    nkisim.profile(kernel, [], target="trn3")
    with pytest.raises(TargetError, match=r"\[Vector, trn3-whatif\]: needs mx_formats"):
        nkisim.profile(kernel, [], target=path)


def test_a_trn1_with_hardware_dge_accepts_hwdge(tmp_path: Path) -> None:
    path = _whatif(tmp_path, "trn1", "hardware_dge = true")

    def kernel(x):
        tile = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x, dge_mode=nisa.dge_mode.hwdge)

    shapes = [((128, 64), "float32")]
    with pytest.raises(TargetError, match=r"hwdge .* \(capability hardware_dge\)"):
        nkisim.profile(kernel, shapes, target="trn1")
    assert nkisim.profile(kernel, shapes, target=path).target == "trn1-whatif"


@pytest.mark.placeholder_tiles
def test_a_trn2_with_trn3s_matmul_dtypes_takes_bf16_dst(tmp_path: Path) -> None:
    path = _whatif(tmp_path, "trn2", 'matmul_output_dtypes = ["float32", "bfloat16"]')

    def kernel():
        a = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
        dst = nl.ndarray((128, 256), dtype=nl.bfloat16, buffer=nl.psum)
        nisa.nc_matmul(dst=dst, stationary=a, moving=nl.ndarray((128, 256), dtype=nl.bfloat16, buffer=nl.sbuf))

    with pytest.raises(nkisim.DtypeError, match=r"dst dtype bfloat16 must be float32$"):
        nkisim.profile(kernel, [], target="trn2")
    nkisim.profile(kernel, [], target=path)


@pytest.mark.placeholder_tiles
def test_transpose_mode_needs_a_square_moving_tile() -> None:
    """Where transpose_passes_dtype holds, dst = stationary.T: the moving (identity) tile is [K, K]."""

    def kernel(dst_dtype):
        def body():
            s = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
            m = nl.ndarray((128, 256), dtype=nl.bfloat16, buffer=nl.sbuf)
            d = nl.ndarray((128, 256), dtype=dst_dtype, buffer=nl.psum)
            nisa.nc_matmul(dst=d, stationary=s, moving=m, is_transpose=True)

        return body

    for target in ("trn2", "trn3"):
        with pytest.raises(nkisim.ShapeError, match=r"moving free size 256 must equal the contraction size 128"):
            nkisim.profile(kernel(nl.bfloat16), [], target=target)
    nkisim.profile(kernel(nl.float32), [], target="trn1")  # no transpose mode: a plain matmul
