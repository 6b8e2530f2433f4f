"""Plans (nkisim.sim.plans): what an operand geometry decided, reused without changing any result.

A run with plans must give the very outputs, timeline and findings of a run that works
everything out at every call; calls whose scalars or geometries differ get plans of their
own, and a call that breaks a rule still fails after others with its shapes passed.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
from sanitizer.test_corpus import CASES

import nkisim
import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim import CheckWarning
from nkisim.errors import KernelError, SourceLoc
from nkisim.examples.matmul import matmul_tiled
from nkisim.examples.softmax import softmax_rows
from nkisim.hw import load_target
from nkisim.isa import OPS
from nkisim.memory import Buffer, Tensor
from nkisim.memory import tensor as tensor_module
from nkisim.memory.dtypes import TFLOAT32
from nkisim.sim import Instruction, Machine
from nkisim.sim import checks as checks_module
from nkisim.sim import machine as machine_module
from nkisim.sim.plans import bind, call_key, cost_of

LOC = SourceLoc("kernel.py", 3, "k")


def _records(profile: nkisim.Profile) -> list[tuple[object, ...]]:
    tl = profile.timeline
    return list(zip(tl.opcode, tl.track, tl.start_ns, tl.end_ns, tl.busy_ns, tl.producer, tl.args, strict=True))


@pytest.mark.parametrize(
    ("kernel", "inputs"),
    [
        (
            matmul_tiled,
            lambda rng: [
                rng.standard_normal((256, 256), dtype=np.float32),
                rng.standard_normal((256, 512), dtype=np.float32),
            ],
        ),
        (softmax_rows, lambda rng: [rng.standard_normal((256, 512), dtype=np.float32)]),
    ],
)
def test_a_run_with_plans_equals_one_without(kernel, inputs, monkeypatch: pytest.MonkeyPatch) -> None:
    arrays = inputs(np.random.default_rng(0))
    planned = nkisim.run(kernel, arrays)
    monkeypatch.setattr(machine_module, "MAX_PLANS", 0)  # no plan is kept: every call takes the full path
    unplanned = nkisim.run(kernel, arrays)
    assert not np.isnan(planned.outputs).any()
    assert planned.outputs.tobytes() == unplanned.outputs.tobytes()
    assert _records(planned.profile) == _records(unplanned.profile)
    assert planned.profile.diagnostics == unplanned.profile.diagnostics


def _tile(machine: Machine, shape: tuple[int, ...] = (128, 64), dtype: type = np.float32) -> Tensor:
    return machine.memory.new_tensor(shape, np.dtype(dtype), Buffer.sbuf)


def _scalar_summaries(machine: Machine) -> list[tuple[type, str]]:
    dst, src = _tile(machine), _tile(machine)
    for value in (1, 1.0, True, 0.0, -0.0, np.float32(-0.0), 1):
        args = {"dst": dst, "data": src, "op0": OPS["multiply"], "operand0": value}
        machine.issue(Instruction("tensor_scalar", args, LOC))
    return [(type(v), repr(v)) for v in (dict(args)["operand0"] for args in machine.timeline.args)]


def test_scalars_that_python_calls_equal_get_their_own_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    planned = Machine(load_target("trn2"), compute=False)
    summaries = _scalar_summaries(planned)
    assert len(planned._plans) == 6  # the last call reused the first one's
    monkeypatch.setattr(machine_module, "MAX_PLANS", 0)
    assert summaries == _scalar_summaries(Machine(load_target("trn2"), compute=False))
    assert summaries[3] != summaries[4]  # 0.0 and -0.0


def test_a_broken_rule_fails_after_valid_calls() -> None:
    machine = Machine(load_target("trn2"), compute=False)
    a, b, out = _tile(machine), _tile(machine), _tile(machine)
    args = {"dst": out, "data1": a, "data2": b, "op": OPS["add"]}
    machine.issue(Instruction("tensor_tensor", args, LOC))
    machine.issue(Instruction("tensor_tensor", args, LOC))  # the plan of the first
    wide = _tile(machine, (128, 32))
    with pytest.raises(KernelError, match="elements per partition"):
        machine.issue(Instruction("tensor_tensor", {**args, "data2": wide}, LOC))


def test_views_that_cannot_be_keyed_take_the_full_path() -> None:
    machine = Machine(load_target("trn2"), compute=False)
    tile = _tile(machine)
    offset = machine.memory.new_tensor((1, 1), np.dtype(np.int32), Buffer.sbuf)
    dynamic = tile.ap([[64, 128], [1, 32]], scalar_offset=offset, indirect_dim=1)
    assert call_key("tensor_copy", {"dst": tile, "src": dynamic}) is None
    assert call_key("tensor_copy", {"dst": tile, "src": tile, "engine": np.array([1])}) is None
    assert call_key("tensor_copy", {"dst": tile, "src": tile}) == call_key("tensor_copy", {"dst": tile, "src": tile})


def test_a_reused_plan_loads_each_stationary_tile() -> None:
    @nki.jit
    def two_stationaries(a, b):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        x = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        nisa.dma_copy(dst=y, src=b)
        acc = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        for stationary in (x, y, y, x):
            nisa.nc_matmul(dst=acc, stationary=stationary, moving=x)
        res = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out, src=res)
        return out

    spec = ((128, 128), "bfloat16")
    planned = nkisim.profile(two_stationaries, [spec, spec])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(machine_module, "MAX_PLANS", 0)
        unplanned = nkisim.profile(two_stationaries, [spec, spec])
    assert _records(planned) == _records(unplanned)


def _geometry_by_definition(view: Tensor) -> tuple[object, ...]:
    """What a view's geometry stands for (Tensor.geometry's docstring), from its numpy array and region."""
    region = view.region
    common = (view.dtype, id(view.dtype), view.buffer, view.array.shape, view.array.strides)
    if not view.buffer.is_on_chip:  # an HBM view: how many rows, not which
        return (*common, region.r1 - region.r0)
    return (*common, region.r0, region.r1, view.byte_offset // view.storage.row_bytes)


@pytest.mark.parametrize("memo_size", [2, 1 << 14])
def test_views_share_a_geometry_number_exactly_when_their_geometries_are_equal(
    memo_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tensor_module, "_MAX_GEOMETRIES", memo_size)  # 2: the memo starts again many times
    monkeypatch.setattr(tensor_module, "_geometry_numbers", {})  # whatever earlier tests numbered
    machine = Machine(load_target("trn2"), compute=False)
    tiles = [
        _tile(machine),
        _tile(machine),
        _tile(machine, (128, 64), np.int32),
        machine.memory.new_tensor((128, 64), TFLOAT32, Buffer.sbuf),
        _tile(machine, (128, 128)),
        machine.memory.new_tensor((128, 64), np.dtype(np.float32), Buffer.psum),
    ]
    views = []
    for tile in tiles:
        views += [tile, tile[:, 0:32], tile[:, 32:64], tile[0:64, :], tile[64:128, :], tile[:, 0:64:2]]
    for hbm in (machine.memory.new_tensor((512, 256), np.dtype(np.float32), Buffer.shared_hbm) for _ in range(2)):
        # blocks at different rows (one geometry), of other row counts and columns, a strided one
        views += [hbm[0:128], hbm[128:256], hbm[0:64], hbm[128:256, 0:128], hbm[256:384, 128:256], hbm[0:128, 0:256:2]]
    half = np.dtype(np.float32)
    for address in (None, (64, 4096), None, (64, 8192)):  # whole tiles of one layout at partitions 0 and 64
        tile = machine.memory.new_tensor((64, 64), half, Buffer.sbuf, address=address)
        views += [tile, tile[:, 0:32]]
    definitions = [_geometry_by_definition(v) for v in views]
    numbers = [v.geometry for v in views]
    for i in range(len(views)):
        for j in range(len(views)):
            # with a memo of 2 a geometry may get a new number after a restart, never another geometry's
            if definitions[i] != definitions[j]:
                assert numbers[i] != numbers[j], (i, j)
            elif memo_size > 2:
                assert numbers[i] == numbers[j], (i, j)
    assert numbers[0] != numbers[3 * 6]  # tfloat32 is an equal dtype to float32, not the same one
    if memo_size > 2:
        assert numbers[0] == numbers[6]  # two tiles of one shape and dtype: one plan serves both


def test_an_operator_is_keyed_by_the_very_object_and_kept_alive_by_its_plan() -> None:
    machine = Machine(load_target("trn2"), compute=False)
    a, b, out = _tile(machine), _tile(machine), _tile(machine)
    twin = copy.copy(OPS["add"])
    assert twin == OPS["add"] == nl.add and len({id(twin), id(OPS["add"]), id(nl.add)}) == 3
    for op in (OPS["add"], twin, nl.add, OPS["add"], nl.add):
        machine.issue(Instruction("tensor_tensor", {"dst": out, "data1": a, "data2": b, "op": op}, LOC))
    assert len(machine._plans) == 3
    kept = {id(op) for plan in machine._plans.values() for op in plan.pinned}
    assert kept == {id(OPS["add"]), id(twin), id(nl.add)}


def _findings(profile: nkisim.Profile) -> list[tuple[object, ...]]:
    return [(d.check, d.severity, d.loc, d.message) for d in profile.diagnostics]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_shapes_only_run_with_plans_finds_what_one_without_finds(case, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shapes-only run makes a planned call's operand model only when the sanitizer asks for it (Plan.lazy)."""
    shapes = [(shape, "float32") for shape in case.inputs]
    kernel = getattr(case.module, case.kernel)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckWarning)
        planned = nkisim.profile(kernel, shapes, target=case.target, check="warn")
        monkeypatch.setattr(machine_module, "MAX_PLANS", 0)
        unplanned = nkisim.profile(kernel, shapes, target=case.target, check="warn")
    assert _findings(planned) == _findings(unplanned)
    assert _records(planned) == _records(unplanned)


@nki.jit
def _carried_in_a_loop(a):
    """Each iteration copies a never-written tile (the copy carries its state) and then reads the copy."""
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    never = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
    for _ in range(3):
        moved = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=moved, src=never)
        used = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=used, data=moved, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out, src=used)
    return out


def _counting_binds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    made: list[str] = []
    real_bind = machine_module.bind

    def counting_bind(plan, spec, arguments):
        made.append(spec.name)
        return real_bind(plan, spec, arguments)

    monkeypatch.setattr(machine_module, "bind", counting_bind)
    monkeypatch.setattr(checks_module, "bind", counting_bind)
    return made


def test_a_shapes_only_run_makes_no_operand_model_for_a_planned_call(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _counting_binds(monkeypatch)
    profile = nkisim.profile(matmul_tiled, [((512, 256), "float32"), ((512, 1024), "float32")], check="warn")
    assert profile.diagnostics == () and profile.instruction_count > 20
    assert made == []
    nkisim.run(matmul_tiled, [np.ones((512, 256), np.float32), np.ones((512, 1024), np.float32)])
    assert len(made) > 10  # a run with values makes one for each planned call


def test_a_lazy_plan_makes_its_operands_when_a_carrier_needs_them(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _counting_binds(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckWarning)
        planned = nkisim.profile(_carried_in_a_loop, [((128, 64), "float32")], check="warn")
    assert "dma_copy" in made  # iterations 2 and 3: the carrier of never-written bytes needs the operand model
    monkeypatch.setattr(machine_module, "MAX_PLANS", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckWarning)
        unplanned = nkisim.profile(_carried_in_a_loop, [((128, 64), "float32")], check="warn")
    assert [d.check for d in planned.diagnostics].count("uninitialized-read") >= 1
    assert _findings(planned) == _findings(unplanned)


@nki.jit
def _edges_across_batches(x):
    """More than a scheduler batch (1,024) of calls, with depends_on edges and fresh tiles every step."""
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=acc, src=x)
    previous = None
    for step in range(400):
        fresh = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
        fill = nisa.memset(dst=fresh, value=1.0, engine=nisa.gpsimd_engine)
        add = nisa.tensor_tensor(dst=acc, data1=acc, data2=fresh, op=nl.add)
        if previous is not None and step % 3:
            add.depends_on(previous)
        load = nisa.dma_copy(dst=fresh, src=x)
        if step % 7 == 0:
            load.depends_on(add, fill)
        previous = fill
    nisa.dma_copy(dst=out, src=acc)
    return out


@nki.jit
def _gathered_rows(table, index):
    """Rows gathered by an index tile (a DMA through a run-time offset: no plan) between planned calls."""
    out = nl.ndarray((128, 64), dtype=table.dtype, buffer=nl.shared_hbm)
    total = nl.ndarray((128, 64), dtype=table.dtype, buffer=nl.sbuf)
    nisa.memset(dst=total, value=0.0)
    for start in range(0, index.shape[0], 128):
        where = nl.ndarray((128, 1), dtype=index.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=where, src=index[start : start + 128])
        rows = nl.ndarray((128, 64), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=rows, src=table.ap([[64, 128], [1, 64]], vector_offset=where, indirect_dim=0))
        nisa.tensor_tensor(dst=total, data1=total, data2=rows, op=nl.add)
    nisa.dma_copy(dst=out, src=total)
    return out


@nki.jit
def _halves(a):
    """An LNC=2 launch: each core adds one to its half of the rows."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    half = a.shape[0] // 2
    rows = slice(nl.program_id(0) * half, (nl.program_id(0) + 1) * half)
    for _ in range(3):
        tile = nl.ndarray((half, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=a[rows])
        nisa.tensor_scalar(dst=tile, data=tile, op0=nl.add, operand0=1.0)
        nisa.dma_copy(dst=out[rows], src=tile)
    return out


@nki.jit
def _shuffled_twice(x):
    """A call with a list argument (``shuffle_mask``): planned, but its operand model made at every call."""
    out = nl.ndarray((32, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.ndarray((32, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    for _ in range(3):
        nisa.nc_stream_shuffle(dst=tile, src=tile, shuffle_mask=[(i + 1) % 32 for i in range(32)])
    nisa.dma_copy(dst=out, src=tile)
    return out


def _more_cases() -> list[tuple[object, object, str]]:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((128, 64), dtype=np.float32)
    table = rng.standard_normal((1024, 64), dtype=np.float32)
    index = rng.permutation(1024).astype(np.int32).reshape(1024, 1)
    halves = rng.standard_normal((256, 64), dtype=np.float32)
    return [
        (_edges_across_batches, [x], "trn2"),
        (_gathered_rows, [table, index], "trn2"),
        (_halves[2], [halves], "trn2"),
        (_shuffled_twice, [rng.standard_normal((32, 64), dtype=np.float32)], "trn2"),
        (
            matmul_tiled,
            [rng.standard_normal((256, 256), dtype=np.float32), rng.standard_normal((256, 1024), dtype=np.float32)],
            "trn1",
        ),
    ]


@pytest.mark.parametrize("case", range(5))
@pytest.mark.parametrize("switch", ["MAX_PLANS", "MAX_ROWS_PER_PLAN"])
def test_more_kernels_run_alike_with_and_without_plans_and_rows(case, switch, monkeypatch: pytest.MonkeyPatch):
    """With plans and scheduler rows, without plans, and with plans but no kept rows: the same run."""
    kernel, inputs, target = _more_cases()[case]
    results = []
    for limit in (None, 0):
        if limit is not None:
            monkeypatch.setattr(machine_module, switch, limit)
        run = nkisim.run(kernel, inputs, target=target, check="warn")
        shapes = nkisim.profile(kernel, [(a.shape, a.dtype) for a in inputs], target=target, check="warn")
        results.append((run.outputs, _records(run.profile), _records(shapes), _findings(run.profile)))
    (out_a, *rest_a), (out_b, *rest_b) = results
    for a, b in zip(
        out_a if isinstance(out_a, tuple) else [out_a], out_b if isinstance(out_b, tuple) else [out_b], strict=True
    ):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    assert rest_a == rest_b
    assert len(rest_a[0]) >= 5


def test_a_plans_cost_takes_the_stationary_tile_of_each_call() -> None:
    machine = Machine(load_target("trn2"), compute=False)
    psum = machine.memory.new_tensor((128, 128), np.dtype(np.float32), Buffer.psum)
    first, second, moving = _tile(machine, (128, 128)), _tile(machine, (128, 128)), _tile(machine, (128, 128))
    machine.issue(Instruction("nc_matmul", {"dst": psum, "stationary": first, "moving": moving}, LOC))
    (plan,) = machine._plans.values()
    assert plan.setup_operand == "stationary" and plan.direct
    ops = bind(plan, machine.registry["nc_matmul"], {"dst": psum, "stationary": second, "moving": moving})
    cost = cost_of(plan, ops)
    assert cost.setup_key == second.region and cost.setup_key != first.region
    assert cost.busy_ns == plan.cost.busy_ns and cost.setup_ns == plan.cost.setup_ns
