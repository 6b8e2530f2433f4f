"""Broken rules raise typed errors naming the kernel line, the TPC and member, and the rule."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nkisim
import nkisim.tpc as tpc

_SOURCE = open(__file__).read().splitlines()  # noqa: SIM115


def line(marker: str) -> str:
    """``test_errors.py:<n>`` of the one line holding ``marker``, as messages cite it."""
    found = [i + 1 for i, text in enumerate(_SOURCE) if marker in text and "line(" not in text]
    assert len(found) == 1, marker
    return f"test_errors.py:{found[0]}"


@tpc.kernel
def off_by_one(ctx: Any, x: tpc.tensor, out: tpc.tensor) -> None:
    s = ctx.get_index_space_offset()
    e = s + ctx.get_index_space_size()
    c = ctx.int5()
    for d in range(s[0] * 64, e[0] * 64, 64):
        c[0] = d + 1  # one element past the member's piece
        ctx.v_f32_st_tnsr(c, out, ctx.v_f32_ld_tnsr_b(c, x))  # off


def test_access_pattern_violation() -> None:
    x = np.ones(4 * 64, dtype=np.float32)
    with pytest.raises(tpc.TpcAccessPatternError) as info:
        tpc.run(off_by_one, [x], device="gaudi")
    err = info.value
    assert isinstance(err, nkisim.KernelError)
    message = str(err)
    assert message.startswith(f"{line('ctx.v_f32_st_tnsr(c, out, ctx.v_f32_ld_tnsr_b(c, x))  # off')}: tpc off_by_one")
    assert "[TPC 0, member 0, gaudi]:" in message
    assert "reads tensor 0 dim 0 elements 1..64, outside its access pattern" in message
    assert "64*i + [0, 63]" in message


@tpc.kernel
def neighbours(ctx: Any, x: tpc.tensor, out: tpc.tensor) -> None:
    i = int(ctx.get_index_space_offset()[0])
    c = ctx.int5([64 * i, 0, 0, 0, 0])
    ctx.v_f32_st_tnsr(c, out, ctx.v_f32_ld_tnsr_b(c, x))  # mine
    c[0] = 64 * (i + 1)
    ctx.v_f32_ld_tnsr_b(c, out)  # the next member's output


@pytest.mark.filterwarnings("ignore::nkisim.tpc.TpcCoherenceWarning")
def test_store_then_load_race_between_members() -> None:
    x = np.ones(4 * 64, dtype=np.float32)
    with pytest.raises(tpc.TpcRaceError) as info:
        tpc.run(neighbours, [x], device="gaudi", check_mapping=False)
    message = str(info.value)
    head = f"{line('the next member')}: tpc neighbours [TPC 0, member 0, gaudi]: store-then-load race:"
    assert message.startswith(head)
    assert f"loads tensor 1 element [64] that member 1 (TPC 1) stores at {line('# mine')}" in message


@tpc.kernel
def vlm_hog(ctx: Any, x: tpc.tensor, out: tpc.tensor) -> None:
    c = ctx.int5()
    buf = ctx.local_array(400, "float64")  # 100 KiB
    buf[0] = ctx.v_f32_ld_tnsr_b(c, x)
    ctx.v_f32_st_tnsr(c, out, buf[0])


@tpc.kernel
def vlm_with_exp(ctx: Any, x: tpc.tensor, out: tpc.tensor) -> None:
    c = ctx.int5()
    buf = ctx.local_array(100, "float64")  # 25 KiB: fits 80 KiB, not the 16 KiB left with LOOKUP
    buf[0] = ctx.v_exp_f32(ctx.v_f32_ld_tnsr_b(c, x))
    ctx.v_f32_st_tnsr(c, out, buf[0])


@tpc.kernel
def slm_hog(ctx: Any, x: tpc.tensor, out: tpc.tensor) -> None:
    ctx.local_array(512, np.float32)  # 2 KiB of scalars
    c = ctx.int5()
    ctx.v_f32_st_tnsr(c, out, ctx.v_f32_ld_tnsr_b(c, x))


def test_local_arrays_over_budget() -> None:
    x = np.ones(64, dtype=np.float32)
    with pytest.raises(tpc.TpcLocalMemoryError, match=line("# 100 KiB") + ": .*exceed the 81920-byte VLM of gaudi2"):
        tpc.run(vlm_hog, [x])
    with pytest.raises(tpc.TpcLocalMemoryError) as info:
        tpc.run(vlm_with_exp, [x])
    message = str(info.value)
    assert message.startswith(f"{line('# 25 KiB')}: tpc vlm_with_exp [TPC 0, member 0, gaudi2]: 25600 bytes")
    assert f"LOOKUP or special functions (v_exp_f32 at {line('buf[0] = ctx.v_exp_f32')})" in message
    with pytest.raises(tpc.TpcLocalMemoryError, match=r"exceed the 1024-byte SLM of gaudi"):
        tpc.run(slm_hog, [x], device="gaudi")
    tpc.run(slm_hog, [x], device="gaudi2")  # 16 KB of SLM on Gaudi2


def test_too_many_tensors() -> None:
    names = ", ".join(f"t{i}: tpc.tensor" for i in range(17))
    scope: dict[str, Any] = {"tpc": tpc}
    exec(f"def wide(ctx, {names}):\n    pass", scope)
    wide = tpc.kernel(scope["wide"])
    arrays = [np.ones(64, dtype=np.float32)] * 16
    with pytest.raises(tpc.TpcSignatureError, match=r"17 tensors .*a TPC kernel takes at most 16"):
        tpc.run(wide, arrays, outputs=[((64,), np.float32)])


@tpc.kernel
def scalar_first(ctx: Any, alpha: float, x: tpc.tensor, out: tpc.tensor) -> None:
    pass


def test_tensors_come_first() -> None:
    with pytest.raises(tpc.TpcSignatureError, match=r"parameter 'alpha' is out of place .*tensors come first"):
        tpc.run(scalar_first, [np.ones(64, dtype=np.float32)], params=[1.0])


@tpc.kernel
def half_done(ctx: Any, x: tpc.tensor, out: tpc.tensor) -> None:
    c = ctx.int5()
    ctx.v_f32_st_tnsr(c, out, ctx.v_f32_ld_tnsr_b(c, x))


def test_unwritten_output() -> None:
    with pytest.raises(tpc.TpcUnwrittenOutputError, match=r"64 of 128 elements of output tensor 1 were written by no"):
        tpc.run(half_done, [np.ones(128, dtype=np.float32)], index_space=[1])


@tpc.kernel
def wrong_type(ctx: Any, x: tpc.tensor, out: tpc.tensor) -> None:
    c = ctx.int5()
    ctx.v_f32_ld_tnsr_b(c, x)  # f32


def test_load_type_must_match_the_tensor() -> None:
    import ml_dtypes

    x = np.ones(128, dtype=ml_dtypes.bfloat16)
    with pytest.raises(
        tpc.TpcTypeError, match=line("ctx.v_f32_ld_tnsr_b(c, x)  # f32") + ": .*on tensor 0, whose elem"
    ):
        tpc.run(wrong_type, [x])


@tpc.kernel
def store_then_reload(ctx: Any, x: tpc.tensor, out: tpc.tensor) -> None:
    c = ctx.int5()
    ctx.v_f32_st_tnsr(c, out, ctx.v_f32_ld_tnsr_b(c, x))
    ctx.v_f32_st_tnsr(c, out, ctx.v_f32_add_b(ctx.v_f32_ld_tnsr_b(c, out), 1.0))


def test_load_after_store_without_aso_warns() -> None:
    x = np.ones(64, dtype=np.float32)
    with pytest.warns(tpc.TpcCoherenceWarning, match="without aso"):
        r = tpc.run(store_then_reload, [x])
    np.testing.assert_array_equal(r.outputs[0], x + 1)


class FailingGlue(tpc.Glue):
    def GetKernelName(self) -> str:
        return "failing"

    def GetGcDefinitions(self, in_defs: Any, out_defs: Any) -> tpc.GlueCodeReturn:
        return tpc.GlueCodeReturn.GLUE_INCOMPATIBLE_DATA_TYPE


def test_glue_error_code() -> None:
    with pytest.raises(tpc.TpcGlueError, match="GetGcDefinitions returned GLUE_INCOMPATIBLE_DATA_TYPE"):
        tpc.run(FailingGlue(), [np.ones(64, dtype=np.float32)])


@tpc.kernel
def list_coords_off(ctx: Any, x: tpc.tensor, out: tpc.tensor) -> None:
    s = ctx.get_index_space_offset()
    fast = ctx.int5()
    fast[0] = s[0] * 64
    ctx.v_f32_st_tnsr(fast, out, ctx.v_f32_ld_tnsr_b(fast, x))  # fast path first
    for d in range(int(s[0]) * 64, int(s[0]) * 64 + 64, 64):
        ctx.v_f32_st_tnsr([d, 0], out, ctx.v_f32_ld_tnsr_b([d + 1, 0], x))  # list coords


def test_error_line_of_an_access_recorded_by_the_full_method() -> None:
    """Accesses the recording closures hand to the full method (list coordinates) still name their line."""
    x = np.ones(4 * 64, dtype=np.float32)
    with pytest.raises(tpc.TpcAccessPatternError) as info:
        tpc.run(list_coords_off, [x], device="gaudi")
    message = str(info.value)
    assert message.startswith(f"{line('# list coords')}: tpc list_coords_off")
    assert "[TPC 0, member 0, gaudi]:" in message
    assert "reads tensor 0 dim 0 elements 1..64" in message
