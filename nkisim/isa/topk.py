"""The GpSimd Engine's ``topk``: the K largest bf16 values of each partition's snake, and their indices."""

from __future__ import annotations

import math

import numpy as np

from nkisim.errors import DtypeError, OperandError, ShapeError
from nkisim.hw import Engine, HwConfig
from nkisim.isa.common import as_rows, check_in, check_same_partitions
from nkisim.isa.spec import Check, Cost, EngineState, In, Operands, Out, engine_cost, instruction
from nkisim.memory import Buffer, dtype_name

#: Partitions of the input "snake": element ``e`` is in partition ``e % 16``, column ``e // 16``.
SNAKE = 16
N_RANGE = (8, 65536)
K_LIMIT = 32768


class TopkOps(Operands):
    val_dst: Out
    idx_dst: Out
    src: In
    n: int


def _validate(ops: TopkOps, chk: Check) -> None:
    for name in ("val_dst", "idx_dst", "src"):
        check_in(chk, name, getattr(ops, name), Buffer.sbuf)
    for name, want in (("src", "bfloat16"), ("val_dst", "bfloat16"), ("idx_dst", "uint32")):
        got = dtype_name(getattr(ops, name).dtype)
        if got != want:
            chk.fail(DtypeError, name, f"dtype {got} must be {want}")
    check_same_partitions(chk, "src", ops.src, "val_dst", ops.val_dst)
    check_same_partitions(chk, "src", ops.src, "idx_dst", ops.idx_dst)
    if ops.src.partitions % SNAKE:
        chk.fail(ShapeError, "src", f"partition dim {ops.src.partitions} must be a multiple of {SNAKE}")
    if not N_RANGE[0] <= ops.n < N_RANGE[1]:
        chk.fail(OperandError, "n", f"{ops.n} must satisfy {N_RANGE[0]} <= n < {N_RANGE[1]}")
    k = ops.val_dst.free_size
    if ops.idx_dst.free_size != k:
        chk.fail(ShapeError, "idx_dst", f"has {ops.idx_dst.free_size} elements per partition but val_dst has {k}")
    if not 1 <= k < K_LIMIT or k > ops.n:
        chk.fail(ShapeError, "val_dst", f"K = {k} (its free size) must satisfy 1 <= K < {K_LIMIT} and K <= n = {ops.n}")
    if ops.src.free_size < math.ceil(ops.n / SNAKE):
        chk.fail(ShapeError, "src", f"free size {ops.src.free_size} must be at least ceil(n / {SNAKE}) for n = {ops.n}")


def _cost(ops: TopkOps, hw: HwConfig, engine: Engine) -> Cost:
    """``4 * n + K`` GpSimd cycles per partition, ``K`` the val_dst free size [api topk]."""
    return engine_cost(hw, engine, 4 * ops.n + ops.val_dst.free_size)


@instruction(
    "topk",
    TopkOps,
    engines=(Engine.gpsimd,),
    cost=_cost,
    validate=_validate,
    dtypes="src and val_dst bfloat16; idx_dst uint32",
)
def topk(ops: TopkOps, state: EngineState) -> None:
    """The K largest of each 16-partition snake's ``n`` elements, ascending, with their 0-based snake indices.

    Snake element ``e`` of a group of 16 partitions is partition ``e % 16``, column
    ``e // 16``. Every partition of the group receives the group's K values and
    indices (nkisim's reading: the docs give each partition a ``[par_dim, k]`` row).
    Equal values keep the lower index first.
    """
    p, k, n = ops.src.partitions, ops.val_dst.free_size, ops.n
    rows = as_rows(ops.src.array, p).astype(np.float32)
    groups = rows.reshape(p // SNAKE, SNAKE, -1).transpose(0, 2, 1).reshape(p // SNAKE, -1)[:, :n]
    order = np.argsort(-groups, axis=1, kind="stable")[:, :k]
    chosen = np.take_along_axis(groups, order, axis=1)
    ascending = np.argsort(chosen, axis=1, kind="stable")
    values = np.repeat(np.take_along_axis(chosen, ascending, axis=1), SNAKE, axis=0)
    indices = np.repeat(np.take_along_axis(order, ascending, axis=1), SNAKE, axis=0)
    ops.val_dst.array[...] = values.astype(ops.val_dst.dtype).reshape(ops.val_dst.shape)
    ops.idx_dst.array[...] = indices.astype(np.uint32).reshape(ops.idx_dst.shape)
