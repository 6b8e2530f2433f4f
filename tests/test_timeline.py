"""The compact timeline: shared call sites, strict operand identity, merging, records made when read."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

import nkisim
import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.errors import SourceLoc
from nkisim.hw import load_target
from nkisim.isa.ops import OPS
from nkisim.memory.dtypes import TFLOAT32
from nkisim.report import InstructionRecord, Profile
from nkisim.sim import Timeline

LOC = SourceLoc("kernel.py", 7, "k")
F32 = np.dtype(np.float32)


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if text.endswith(marker))


@nki.jit
def ping_pong(a, b, steps):
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)  # @load a
    nisa.dma_copy(dst=y, src=b)  # @load b
    for i in range(steps):
        if i % 2:
            nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.multiply)  # @multiply
        else:
            nisa.tensor_tensor(dst=y, data1=x, data2=y, op=nl.add)  # @add
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)  # @store
    return out


def _append(tl: Timeline, args: tuple[tuple[str, object], ...], track: str = "Vector", **values: float) -> None:
    """One instruction on ``track`` with the given operands; times default to 0."""
    tl.append(
        values.get("opcode", "op"),  # type: ignore[arg-type]
        tl.track_number(track),
        values.get("start", 0.0),
        values.get("end", 0.0),
        values.get("busy", 0.0),
        values.get("wait", 0.0),
        LOC,
        int(values.get("producer", -1)),
        int(values.get("pred", -1)),
        0,
        0.0,
        args,
    )


def test_instructions_of_one_line_share_a_site() -> None:
    a = np.ones((4, 8), np.float32)
    steps = 50
    tl = nkisim.run(ping_pong, {"a": a, "b": a, "steps": steps}).profile._tl
    # two loads, the add and multiply lines, one store: five call sites for 53 instructions
    assert len(tl) == steps + 3
    assert len(tl.sites) == 5
    lines = [_line(m) for m in ("@load a", "@load b")]
    lines += [_line("@add") if i % 2 == 0 else _line("@multiply") for i in range(steps)]
    lines.append(_line("@store"))
    assert [loc.line for loc in tl.source] == lines
    assert tl.opcode == ["dma_copy"] * 2 + ["tensor_tensor"] * steps + ["dma_copy"]
    ops = [dict(args)["op"] for args in tl.args[2:-1]]
    assert ops == [nl.add if i % 2 == 0 else nl.multiply for i in range(steps)]
    assert dict(tl.args[2])["dst"] == ("sbuf", F32, (4, 8))


@pytest.mark.parametrize(
    "first, second",
    [
        (1, 1.0),  # equal numbers of different types
        (1, True),
        (0.0, -0.0),  # equal zeros of opposite sign
        (np.float32(0.0), np.float32(-0.0)),
        (OPS["add"], nl.add),  # the isa operator and the nl constant equal to it
        (("sbuf", F32, (4, 8)), ("sbuf", TFLOAT32, (4, 8))),  # dtypes equal but for their metadata
        ((1, 2.0), (1, 2)),  # other tuples
        ((1, 2.0, (3,)), (1, 2, (3,))),  # shaped like a tensor's (buffer, dtype, shape)
    ],
)
def test_equal_but_different_operands_keep_their_own_values(first: object, second: object) -> None:
    assert first == second  # what makes them easy to mix up
    tl = Timeline()
    for value in (first, second, first, second):
        _append(tl, (("value", value),))
    assert len(tl.sites) == 2
    read = [dict(args)["value"] for args in tl.args]
    assert [type(v) for v in read] == [type(first), type(second)] * 2
    assert [repr(v) for v in read] == [repr(first), repr(second)] * 2
    if isinstance(first, tuple) and isinstance(first[1], np.dtype):
        assert [v[1].metadata for v in read] == [first[1].metadata, second[1].metadata] * 2  # type: ignore[index]


def test_an_operand_that_cannot_be_hashed_is_kept_as_it_is() -> None:
    table = np.arange(3)
    tl = Timeline()
    _append(tl, (("table", table),))
    _append(tl, (("table", table),))
    _append(tl, (("table", np.arange(3)),))  # an equal array, another object
    assert [dict(args)["table"] is table for args in tl.args] == [True, True, False]
    assert len(tl.sites) == 2


def test_columns_compare_equal_to_lists_and_survive_pickling() -> None:
    tl = Timeline()
    _append(tl, (), start=0.0, end=2.5, busy=2.5)
    _append(tl, (), track="DMA q0", start=1.0, end=4.0, busy=3.0, producer=0, pred=0, wait=1.0)
    assert tl.start_ns == [0.0, 1.0] and tl.end_ns == [2.5, 4.0] and tl.producer == [-1, 0]
    assert tl.track == ["Vector", "DMA q0"]
    twin = pickle.loads(pickle.dumps(tl))
    assert (twin.track, twin.end_ns, twin.wait_ns, twin.args) == (tl.track, [2.5, 4.0], [0.0, 1.0], [(), ()])


def test_side_by_side_prefixes_tracks_and_shifts_indices() -> None:
    first, second = Timeline(), Timeline()
    _append(first, (("n", 1),), start=0.0, end=1.0)
    _append(first, (("n", 1),), start=1.0, end=2.0, producer=0, pred=0)
    _append(second, (("n", 1),), track="DMA q3", start=0.0, end=5.0)
    _append(second, (("n", 2),), start=5.0, end=6.0, producer=0, pred=0)
    merged = Timeline.side_by_side([first, second], ["core0 ", "core1 "])
    assert merged.track == ["core0 Vector", "core0 Vector", "core1 DMA q3", "core1 Vector"]
    assert merged.producer == [-1, 0, -1, 2] and merged.pred == [-1, 0, -1, 2]
    assert merged.end_ns == [1.0, 2.0, 5.0, 6.0]
    assert merged.args == [(("n", 1),)] * 3 + [(("n", 2),)]
    assert len(merged.sites) == 2  # the cores' equal sites are one


def test_renamed_tracks_with_one_name_become_one_track() -> None:
    tl = Timeline()
    for track in ("Vector 0", "GpSimd 1", "Vector 1", "GpSimd 0"):
        _append(tl, (), track=track)
    tl.rename_tracks(lambda name: "unit " + name.rsplit(" ", 1)[1])
    assert tl.track == ["unit 0", "unit 1", "unit 1", "unit 0"]
    assert tl.tracks == ["unit 0", "unit 1"]


def test_instruction_records_are_made_when_read() -> None:
    tl = Timeline()
    _append(tl, (), start=0.0, end=2.0, busy=2.0)
    _append(tl, (), track="Scalar", start=2.0, end=3.0, busy=1.0, producer=0, pred=0)
    records = Profile(tl, load_target("trn1")).instructions
    first = InstructionRecord(0, "op", "Vector", 0.0, 2.0, "kernel.py:7", -1, 0, 0.0)
    second = InstructionRecord(1, "op", "Scalar", 2.0, 3.0, "kernel.py:7", 0, 0, 0.0)
    assert records == [first, second] and list(records) == [first, second]
    assert (len(records), records[-1], records[1:], records[::-1]) == (2, second, [second], [second, first])
    assert second in records and records.index(second) == 1
    with pytest.raises(IndexError):
        records[2]
    assert Profile(Timeline(), load_target("trn1")).instructions == []


def test_line_totals_add_in_program_order() -> None:
    # 1e16 + 1.0 rounds back to 1e16: in program order the line's busy time is 0.0, in any other order 1.0
    tl = Timeline()
    for i, busy in enumerate((1e16, 1.0, -1e16)):
        _append(tl, (), start=float(i), end=float(i + 1), busy=busy)
    profile = Profile(tl, load_target("trn1"))
    (line,) = profile.line_costs()
    assert line.busy_ns == ((0.0 + 1e16) + 1.0) - 1e16 == 0.0
    assert line.engines == {"Vector": 0.0}
    assert profile.engine_busy_ns["Vector"] == 0.0


@nki.jit
def rescaled(a, steps):
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    for i in range(steps):
        nisa.activation(dst=x, op=nl.copy, data=x, scale=1.0 + i)  # another scalar each time
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)
    return out


def test_without_operands_a_changing_scalar_adds_no_site() -> None:
    inputs = {"a": ((8, 16), "float32"), "steps": 20}
    kept = nkisim.profile(rescaled, inputs).timeline
    dropped = nkisim.profile(rescaled, inputs, operands=False).timeline
    assert [dict(args)["scale"] for args in kept.args[1:-1]] == [1.0 + i for i in range(20)]
    assert len(kept.sites) == 2 + 20
    assert len(dropped.sites) == 3 and dropped.args == [()] * 22  # the two copies and the activation line
    for column in ("opcode", "track", "start_ns", "end_ns", "busy_ns", "wait_ns", "producer", "pred", "bytes"):
        assert getattr(dropped, column) == getattr(kept, column), column
    with pytest.raises(TypeError, match="operands must be True or False"):
        nkisim.profile(rescaled, inputs, operands="no")  # type: ignore[arg-type]


def test_sites_that_differ_in_a_scalar_share_their_other_operands() -> None:
    kept = nkisim.profile(rescaled, {"a": ((8, 16), "float32"), "steps": 3}).timeline
    first, second = (dict(site.args) for site in kept.sites[1:3])
    assert (first["scale"], second["scale"]) == (1.0, 2.0)
    shared = [name for name in first if name != "scale" and first[name] is second[name]]
    assert "data" in shared and "op" in shared
    assert kept.sites[1].source == SourceLoc(kept.sites[2].file, kept.sites[2].line, kept.sites[2].function)


def test_locations_deep_in_a_long_kernel_and_two_calls_on_one_line() -> None:
    """Locations are memoised by call site: each call still reports its own line, however far into its function."""
    pad = 1500
    lines = [
        "def long_kernel(a, steps):",
        "    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)",
        "    nisa.dma_copy(dst=x, src=a)",
        *[f"    pad{i} = {i}" for i in range(pad)],
        "    for i in range(steps):",
        "        nisa.tensor_tensor(dst=x, data1=x, data2=x, op=nl.add); nisa.activation(dst=x, op=nl.exp, data=x)",
        "        nisa.tensor_scalar(dst=x, data=x, op0=nl.multiply, operand0=0.5)",
        "    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)",
        "    nisa.dma_copy(dst=out, src=x)",
        "    return out",
    ]
    namespace = {"nl": nl, "nisa": nisa}
    exec(compile("\n".join(lines), "long_kernel.py", "exec"), namespace)
    loop = 1 + 3 + pad + 1  # the 1-based line of the loop's first statement
    steps = 3
    tl = nkisim.profile(nki.jit(namespace["long_kernel"]), {"a": ((4, 8), "float32"), "steps": steps})._tl
    expected = [3] + [loop, loop, loop + 1] * steps + [loop + 3]
    assert [(loc.file, loc.line) for loc in tl.source] == [("long_kernel.py", line) for line in expected]
    assert tl.opcode == ["dma_copy"] + ["tensor_tensor", "activation", "tensor_scalar"] * steps + ["dma_copy"]
