"""The execution core driven directly with instruction records, without tracing a kernel.

These pin what the front end relies on: an :class:`Instruction` record walks validate ->
execute -> account -> cost -> schedule; hooks declared on a spec take part; another
instruction set runs on the same core from its own registry; and a replicated engine
gets one in-order track per unit.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nkisim.errors import OperandError, SourceLoc
from nkisim.hw import Engine, HwConfig, load_target
from nkisim.isa import OPS, REGISTRY
from nkisim.isa.spec import Cost, EngineState, InstructionSpec, Operands, Out, instruction
from nkisim.memory import Buffer, Region, Tensor
from nkisim.report import Profile
from nkisim.sim import Instruction, Machine

LOC = SourceLoc("kernel.py", 7, "k")


def _tile(machine: Machine, values: np.ndarray) -> Tensor:
    tile = machine.memory.new_tensor(values.shape, values.dtype, Buffer.sbuf)
    tile.array[...] = values
    return tile


def test_a_record_is_executed_and_scheduled() -> None:
    machine = Machine(load_target("trn2"))
    rng = np.random.default_rng(1)
    a, b = rng.random((128, 64), dtype=np.float32), rng.random((128, 64), dtype=np.float32)
    ta, tb = _tile(machine, a), _tile(machine, b)
    out = machine.memory.new_tensor((128, 64), np.dtype(np.float32), Buffer.sbuf)
    machine.issue(Instruction("tensor_tensor", {"dst": out, "data1": ta, "data2": tb, "op": OPS["add"]}, LOC))
    assert np.array_equal(out.array, a + b)
    tl = machine.timeline
    assert (tl.opcode, tl.track, [str(s) for s in tl.source]) == (["tensor_tensor"], ["Vector"], ["kernel.py:7"])
    assert tl.end_ns[0] > tl.start_ns[0] == 0.0


def test_shapes_only_machine_schedules_without_computing() -> None:
    machine = Machine(load_target("trn2"), compute=False)
    ta = machine.memory.new_tensor((128, 64), np.dtype(np.float32), Buffer.sbuf)
    out = machine.memory.new_tensor((128, 64), np.dtype(np.float32), Buffer.sbuf)
    before = out.array.copy()
    machine.issue(Instruction("tensor_tensor", {"dst": out, "data1": ta, "data2": ta, "op": OPS["add"]}, LOC))
    assert np.array_equal(out.array, before, equal_nan=True)
    assert len(machine.timeline) == 1


def test_bad_argument_names_the_kernel_line_instruction_and_operand() -> None:
    machine = Machine(load_target("trn1"))
    t = machine.memory.new_tensor((128, 4), np.dtype(np.float32), Buffer.sbuf)
    with pytest.raises(OperandError) as info:
        machine.issue(Instruction("tensor_tensor", {"dst": t, "data1": t, "data2": t, "op": OPS["add"], "x": 1}, LOC))
    assert str(info.value).startswith("kernel.py:7: nisa.tensor_tensor")
    assert "x" in str(info.value) and "not an argument" in str(info.value)


# -- another instruction set on the same core ---------------------------------------------


class _FillOps(Operands):
    dst: Out
    value: float


TOY: dict[str, InstructionSpec] = {}


@instruction(
    "fill",
    _FillOps,
    engines=(Engine.gpsimd,),
    cost=lambda ops, hw, engine: Cost(busy_ns=100.0),
    registry=TOY,
)
def _fill(ops: _FillOps, state: EngineState) -> None:
    """``dst[...] = value``."""
    ops.dst.array[...] = ops.value


def test_another_registry_runs_on_the_same_core() -> None:
    machine = Machine(load_target("trn2"), registry=TOY)
    t = machine.memory.new_tensor((16, 8), np.dtype(np.float32), Buffer.sbuf)
    machine.issue(Instruction("fill", {"dst": t, "value": 3.5}, LOC))
    assert np.array_equal(t.array, np.full((16, 8), 3.5, np.float32))
    assert machine.timeline.busy_ns == [100.0]
    assert "fill" not in REGISTRY


def test_units_of_a_replicated_engine_run_side_by_side() -> None:
    """Hand-computed: each fill is 100 ns with no dependencies; on one unit they queue, on two they overlap."""
    hw: HwConfig = load_target("trn2")
    machine = Machine(hw, registry=TOY)
    tiles = [machine.memory.new_tensor((16, 8), np.dtype(np.float32), Buffer.sbuf) for _ in range(3)]
    machine.issue(Instruction("fill", {"dst": tiles[0], "value": 1.0}, LOC, unit=0))
    machine.issue(Instruction("fill", {"dst": tiles[1], "value": 2.0}, LOC, unit=1))
    machine.issue(Instruction("fill", {"dst": tiles[2], "value": 3.0}, LOC, unit=0))
    tl = machine.timeline
    assert tl.track == ["GpSimd 0", "GpSimd 1", "GpSimd 0"]
    assert tl.start_ns == [0.0, 0.0, 100.0]
    assert tl.end_ns == [100.0, 100.0, 200.0]
    profile = Profile(tl, hw)
    assert profile.engine_busy_ns["GpSimd 0"] == 200.0 and profile.engine_busy_ns["GpSimd 1"] == 100.0
    assert profile.total_ns == 200.0
    assert "GpSimd 1" in profile.summary()


def test_declared_extra_accesses_order_dependent_instructions() -> None:
    """A spec's extra_accesses are tracked like operands: a reader of that region waits for the writer."""
    table: dict[str, InstructionSpec] = {}

    class _TouchOps(Operands):
        marker: Tensor

    def touches(ops: _TouchOps) -> tuple[list[Region], list[Region]]:
        return [], [ops.marker.region]

    instruction(
        "touch",
        _TouchOps,
        engines=(Engine.gpsimd,),
        cost=lambda ops, hw, engine: Cost(busy_ns=500.0),
        extra_accesses=touches,
        registry=table,
    )(lambda ops, state: None)
    table["fill"] = TOY["fill"]
    machine = Machine(load_target("trn2"), registry=table)
    marker = machine.memory.new_tensor((1, 8), np.dtype(np.float32), Buffer.sbuf)
    machine.issue(Instruction("touch", {"marker": marker}, LOC, unit=0))
    machine.issue(Instruction("fill", {"dst": marker, "value": 0.0}, LOC, unit=1))
    tl = machine.timeline
    assert tl.producer[1] == 0
    assert tl.start_ns[1] >= tl.end_ns[0]


@settings(max_examples=60, deadline=None)
@given(
    shapes=st.lists(
        st.tuples(st.integers(1, 128), st.lists(st.integers(1, 9), min_size=0, max_size=3)), min_size=1, max_size=6
    ),
    dtype=st.sampled_from([np.float32, np.uint8, np.int16]),
    buffer=st.sampled_from([Buffer.sbuf, Buffer.psum]),
)
def test_a_new_tile_knows_its_bytes_as_the_view_rules_work_them_out(shapes, dtype, buffer):
    """The allocator gives a new tile its region and row box; the generic rules over its array must agree."""
    from nkisim.memory.pattern import row_box_of
    from nkisim.memory.views import region_of

    machine = Machine(load_target("trn2"), compute=False)
    for partitions, free in shapes:
        tile = machine.memory.new_tensor((partitions, *free), np.dtype(dtype), buffer)
        start = tile.array.ctypes.data - tile.storage.address
        assert tile.region == region_of(tile.array, tile.storage, start)
        assert tile.row_box == (row_box_of(tile.array, tile.storage.row_bytes, start) or None)


@settings(max_examples=80, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 128), st.integers(1, 40)),
    dtype=st.sampled_from([np.float32, np.uint8, np.int16]),
    buffer=st.sampled_from([Buffer.sbuf, Buffer.psum, Buffer.shared_hbm]),
    data=st.data(),
)
def test_a_block_of_a_view_knows_its_bytes_as_the_view_rules_work_them_out(shape, dtype, buffer, data):
    """A block (two unit-step slices, or an int row on chip) of a view, and a block of that block, gets
    its region and row box from its parent's; the generic rules over its array must agree. Stepped
    slices and int columns take the generic rules."""
    from nkisim.memory.pattern import row_box_of
    from nkisim.memory.views import region_of

    machine = Machine(load_target("trn2"), compute=False)
    view = machine.memory.new_tensor(shape, np.dtype(dtype), buffer)
    for _ in range(2):
        if view.ndim < 2:
            break
        rows, cols = view.shape
        r0 = data.draw(st.integers(0, rows - 1))
        c0 = data.draw(st.integers(0, cols - 1))
        row = data.draw(st.one_of(st.just(r0), st.builds(slice, st.just(r0), st.integers(r0 + 1, rows))))
        col = data.draw(
            st.one_of(
                st.builds(slice, st.just(c0), st.integers(c0 + 1, cols)),
                st.builds(slice, st.just(c0), st.integers(c0 + 1, cols), st.integers(1, 3)),
                st.just(c0),
            )
        )
        view = view[row, col]
        start = view.array.ctypes.data - view.storage.address
        assert view.region == region_of(view.array, view.storage, start)
        assert view.row_box == (row_box_of(view.array, view.storage.row_bytes, start) or None)
