"""Timing rule 7 of docs/timing.md, one small hand-computed case each.

trn2/trn3: 16-bit tensor_copy/tensor_scalar run 4x with every stream in SBUF at unit stride,
else 2x (capped by ``perf_mode_max``); tensor_tensor at most 2x, both inputs in SBUF; an SBUF
stream with innermost stride over 16 bytes is ``wide_stride_slowdown`` times slower.
"""

from __future__ import annotations

import pytest
from timing_helpers import REL, TARGETS, P, psum, sbuf

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.hw import load_target


def records(kernel, inputs=(), target="trn1"):
    return nkisim.run(kernel, list(inputs), target=target).profile.instructions


def ns(cfg, cycles):
    """``cycles`` of an engine at its clock."""
    return cycles / cfg.clock_ghz


def mode(cfg, streams_16bit, sbuf_unit_stride, at_most=4):
    """Elements per lane per cycle of rule 7: 4x for 16-bit SBUF unit-stride streams, else 2x for 16-bit ones."""
    if not streams_16bit:
        return 1
    return min(cfg.perf_mode_max, 4 if sbuf_unit_stride else 2, at_most)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    ("case", "sixteen", "unit"),
    [
        ("bf16 sbuf", True, True),
        ("bf16 strided", True, False),  # every other element: 4-byte stride, not wide
        ("bf16 from psum", True, False),
        ("fp32", False, True),
        ("bf16 to fp32", False, True),
    ],
)
def test_tensor_copy_and_tensor_scalar_performance_modes(target, case, sixteen, unit):
    hw = load_target(target)
    n = 1024
    dst_dtype = nl.float32 if case in ("fp32", "bf16 to fp32") else nl.bfloat16
    src_dtype = nl.float32 if case == "fp32" else nl.bfloat16

    def kernel():
        if case == "bf16 strided":
            src = sbuf((P, 2 * n), src_dtype)[:, ::2]
        elif case == "bf16 from psum":
            src = psum((P, n), src_dtype)
        else:
            src = sbuf((P, n), src_dtype)
        nisa.tensor_copy(dst=sbuf((P, n), dst_dtype), src=src)
        nisa.tensor_scalar(dst=sbuf((P, n), dst_dtype), data=src, op0=nl.multiply, operand0=2.0)
        nisa.tensor_scalar(dst=sbuf((P, n), dst_dtype), data=src, op0=nl.add, operand0=1.0, engine=nisa.scalar_engine)

    copy, vscalar, sscalar = records(kernel, target=target)
    assert hw.vector.perf_mode_max == (1 if target == "trn1" else 4)
    assert hw.scalar.perf_mode_max == (2 if target == "trn3" else 1)
    vector_cycles = max(hw.vector.min_ii_cycles, n / mode(hw.vector, sixteen, unit))
    assert copy.duration_ns == pytest.approx(ns(hw.vector, vector_cycles), rel=REL)
    assert vscalar.duration_ns == pytest.approx(ns(hw.vector, vector_cycles), rel=REL)
    scalar_cycles = max(hw.scalar.min_ii_cycles, n / mode(hw.scalar, sixteen, unit))
    assert sscalar.duration_ns == pytest.approx(ns(hw.scalar, scalar_cycles), rel=REL)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    ("dtype", "op", "data2_in", "per_element", "sbuf_inputs"),
    [
        ("bfloat16", "add", "sbuf", 1, True),  # the all-bf16 add fast path, then at most 2x
        ("bfloat16", "maximum", "sbuf", 2, True),
        ("bfloat16", "add", "psum", 1, False),  # an input in PSUM: no mode
        ("float32", "add", "sbuf", 2, True),
    ],
)
def test_tensor_tensor_gets_at_most_the_2x_mode(target, dtype, op, data2_in, per_element, sbuf_inputs):
    hw = load_target(target)
    n = 1024
    dt = getattr(nl, dtype)

    def kernel():
        data2 = sbuf((P, n), dt) if data2_in == "sbuf" else psum((P, n), dt)
        nisa.tensor_tensor(dst=sbuf((P, n), dt), data1=sbuf((P, n), dt), data2=data2, op=getattr(nl, op))

    (rec,) = records(kernel, target=target)
    speedup = mode(hw.vector, dtype == "bfloat16" and sbuf_inputs, True, at_most=2)
    assert speedup == (2 if target != "trn1" and dtype == "bfloat16" and sbuf_inputs else 1)
    expected = ns(hw.vector, max(hw.vector.min_ii_cycles, per_element * n / speedup))
    assert rec.duration_ns == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("target", TARGETS)
def test_an_sbuf_stride_over_16_bytes_halves_the_bandwidth(target):
    hw = load_target(target)
    n = 512
    slow = hw.sbuf.wide_stride_slowdown
    assert (slow, hw.sbuf.wide_stride_bytes) == (2.0, 16)

    def kernel():
        src = sbuf((P, 8 * n))
        nisa.tensor_copy(dst=sbuf((P, n)), src=src[:, 0 : 4 * n : 4])  # fp32 every 4th: 16 bytes, not wide
        nisa.tensor_copy(dst=sbuf((P, n)), src=src[:, ::8])  # 32 bytes: wide
        nisa.tensor_tensor(dst=sbuf((P, n)), data1=src[:, ::8], data2=sbuf((P, n)), op=nl.add)  # 2N, wide
        acc = psum((P, 8 * n))
        nisa.tensor_copy(dst=sbuf((P, n)), src=acc[:, ::8])  # PSUM: no SBUF penalty
        bf = sbuf((P, 16 * n), nl.bfloat16)
        nisa.tensor_copy(dst=sbuf((P, n), nl.bfloat16), src=bf[:, ::16])  # bf16, 32 bytes: 2x mode, 2x slower

    narrow, wide, tt, from_psum, bf16 = records(kernel, target=target)
    vec = hw.vector
    assert narrow.duration_ns == pytest.approx(ns(vec, n), rel=REL)
    assert wide.duration_ns == pytest.approx(ns(vec, n * slow), rel=REL)
    assert tt.duration_ns == pytest.approx(ns(vec, 2 * n * slow), rel=REL)
    assert from_psum.duration_ns == pytest.approx(ns(vec, n), rel=REL)
    assert bf16.duration_ns == pytest.approx(ns(vec, n * slow / mode(vec, True, False)), rel=REL)
