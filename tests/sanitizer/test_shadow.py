"""The sanitizer's record of who last touched each byte: boxes split exactly, strided views fall back to bytes.

The reference is a per-byte numpy array of event ids painted by hand for each access.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nkisim.memory import Buffer, Tensor
from nkisim.memory.space import Storage
from nkisim.sim.loops import _Shadow

ROWS, ROW_BYTES = 8, 64


def _tensor(storage: Storage, view: np.ndarray) -> Tensor:
    return Tensor(view, view.dtype, Buffer.sbuf, "t", storage, None)


views = st.tuples(
    st.integers(0, ROWS - 1),
    st.integers(1, ROWS),
    st.integers(0, ROW_BYTES // 4 - 1),
    st.integers(1, ROW_BYTES // 4),
    st.sampled_from([1, 1, 1, 2, 3]),
)


@settings(max_examples=400, deadline=None)
@given(accesses=st.lists(views, min_size=1, max_size=12), probe=views)
def test_events_match_a_per_byte_reference(accesses, probe):
    storage = Storage("sbuf", ROWS, ROW_BYTES)
    floats = storage.bytes.view(np.float32)  # 8 x 16 float32 over the storage's bytes
    shadow = _Shadow(storage)
    reference = np.zeros((ROWS, ROW_BYTES), dtype=np.int64)

    def view_of(spec):
        r0, nr, c0, nc, step = spec
        return floats[r0 : min(ROWS, r0 + nr), c0 : min(ROW_BYTES // 4, c0 + nc * step) : step]

    def painted(view: np.ndarray) -> np.ndarray:
        mask = np.zeros(storage.bytes.shape, dtype=bool)
        as_bytes = np.ndarray(
            (*view.shape, 4),
            np.bool_,
            buffer=mask,
            offset=view.__array_interface__["data"][0] - storage.bytes.__array_interface__["data"][0],
            strides=(*view.strides, 1),
        )
        as_bytes[...] = True
        return mask

    for event, spec in enumerate(accesses, start=1):
        view = view_of(spec)
        shadow.stamp(_tensor(storage, view), event)
        reference[painted(view)] = event
    probe_view = view_of(probe)
    expected = sorted({int(e) for e in reference[painted(probe_view)] if e})
    assert shadow.events(_tensor(storage, probe_view)) == expected


@given(
    marks=st.lists(st.integers(0, 255), min_size=1, max_size=64).flatmap(
        lambda row: st.tuples(st.just(row), st.integers(1, 4), st.sampled_from([1, 2]))
    )
)
def test_the_written_box_scan_matches_a_numpy_formula(marks):
    from nkisim.sim.checks import _box_written

    row, rows, mostly = marks
    box = np.full((rows, 96), mostly, dtype=np.uint8)[:, 8 : 8 + len(row)]  # a box of rows inside wider rows
    box[rows - 1] = row
    assert _box_written(box) == bool(np.all((box >= 1) & (box <= 2)))  # 1: engine write, 2: Tensor Engine
