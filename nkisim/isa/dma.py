"""DMA instructions: copies, transposes and DMA-compute reductions, run by the DMA engines.

Every DMA waits the fixed trigger latency, then moves its bytes over the DMA
engines (see ``dma_cost``). Copies use the engines serving their partitions, the
payload-efficiency curve and the HBM cap; transposes and DMA compute use all
engines at the documented efficiency of a transpose or of DMA compute.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np

from nkisim.errors import DtypeError, MemoryKindError, OperandError, ShapeError
from nkisim.hw import Engine, HwConfig
from nkisim.isa import enums
from nkisim.isa.carriers import dma_copy_carrier
from nkisim.isa.common import F32, check_in, copy_bits, f32, same_format, write
from nkisim.isa.ops import OPS, Op
from nkisim.isa.spec import Access, Check, Cost, EngineState, In, Operands, Out, instruction, require
from nkisim.memory import Buffer, Tensor, dtype_name
from nkisim.memory.access import apply_dynamic, gather

DMA_MEMORIES = (Buffer.hbm, Buffer.private_hbm, Buffer.shared_hbm, Buffer.sbuf)
#: The most source tensors one ``dma_compute`` takes [nki.isa.dma_compute].
MAX_DMA_COMPUTE_SRCS = 16
#: ``dma_transpose``'s permutation for each source rank [nki.isa.dma_transpose].
TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}
DYNAMIC_DGE_MODES = (enums.dge_mode.swdge, enums.dge_mode.hwdge)


# -- shared rules ---------------------------------------------------------------------


def has_dynamic_offset(t: Tensor) -> bool:
    """True when ``t`` is addressed at run time (``.ap(vector_offset=..., scalar_offset=...)``)."""
    return t.is_dynamic


def check_dge_mode(chk: Check, mode: enums.dge_mode) -> None:
    """Hardware DGE exists where the target has ``hardware_dge`` (NeuronCore-v3 on)."""
    if mode is enums.dge_mode.hwdge:
        require(chk, "hardware_dge", "dge_mode", "hwdge (hardware DGE) needs NeuronCore-v3 or newer")


def check_element_counts(chk: Check, a_name: str, a: Tensor, b_name: str, b: Tensor) -> None:
    if a.size != b.size:
        chk.fail(
            ShapeError,
            b_name,
            f"has {b.size} elements ({list(b.shape)}) but {a_name} has {a.size} ({list(a.shape)})",
        )


def dma_cost(
    hw: HwConfig,
    nbytes: int,
    efficiency: float = 1.0,
    paced_bytes: float | None = None,
    views: tuple[Tensor, ...] = (),
    hbm: bool = False,
) -> Cost:
    """The fixed trigger latency, then ``paced_bytes`` (default ``nbytes``) spread over the DMA engines.

    The transfer uses the engines that serve the partitions of its on-chip side
    (all 16 for HBM-to-HBM), each at the achieved share of its nominal rate,
    capped by HBM bandwidth when HBM is involved (a view in HBM, or ``hbm``: the other
    side is device memory, as for a spill), and times ``efficiency``. Each
    contiguous run of the transfer is a packet; the payload-efficiency curve gives the
    share of the rate that packets of that size achieve (small ones are overhead-bound).
    A packet's size is counted in the bytes that are paced (see ``packet_bytes``).
    """
    dma = hw.dma
    paced = nbytes if paced_bytes is None else paced_bytes
    views = tuple(v for v in views if not v.is_dynamic)  # run-time addresses: no static layout to cost
    first, count = _engines_used(hw, views)
    rate = count * dma.bytes_per_ns_per_engine
    if hbm or any(v.buffer.is_hbm for v in views):
        rate = min(rate, hw.hbm.bandwidth_bytes_per_ns)
    run = packet_bytes(views)
    achieved = dma.efficiency(run) if run else 1.0
    return Cost(
        busy_ns=paced / (rate * achieved * efficiency),
        latency_ns=dma.fixed_latency_ns,
        bytes=nbytes,
        dma_engines=(first, count),
    )


def _engines_used(hw: HwConfig, views: tuple[Tensor, ...]) -> tuple[int, int]:
    """(first, count) of the DMA engines serving the partitions of the transfer's on-chip side."""
    on_chip = [v.region for v in views if v.buffer.is_on_chip]
    if not on_chip:
        return 0, hw.dma.engines
    per = hw.dma.partitions_per_engine
    first = min(r.r0 for r in on_chip) // per
    last = -(-max(r.r1 for r in on_chip) // per)
    return first, max(1, min(hw.dma.engines, last - first))


def packet_bytes(views: tuple[Tensor, ...]) -> int:
    """Bytes of one packet of a transfer between ``views``, counted on its widest dtype (0: no views).

    A packet pairs a contiguous run of the source with one of the destination that holds
    the same elements, so it is as long, in elements, as the shorter run of the two
    sides. A copy is paced on the bytes of its wider side (``max(src, dst)`` bytes), and
    its packets are counted in those bytes too: an fp8 -> bf16 copy in rows of 896 fp8
    bytes writes packets of 1792 bf16 bytes. Counting the packet on the narrow side while
    pacing the wide side's bytes would charge a cast's packet overhead twice. (The DMA
    overview: a cast goes through fp32 inside the engine; memory on either side holds
    only its own dtype's bytes.)
    """
    if not views:
        return 0
    widest = max(v.itemsize for v in views)
    return min(contiguous_run_bytes(v) // v.itemsize for v in views) * widest


def contiguous_run_bytes(t: Tensor) -> int:
    """Bytes of the longest stretch of ``t`` that is contiguous in memory (one DMA packet)."""
    array = t.array
    run = array.itemsize
    for extent, stride in zip(reversed(array.shape), reversed(array.strides)):
        if extent == 1:
            continue
        if stride != run:
            break
        run *= extent
    if t.buffer.is_on_chip:  # a packet never crosses partitions
        run = min(run, max(1, t.free_size) * array.itemsize)
    return run


def dma_compute_cost(hw: HwConfig, src_bytes: list[int], dst_bytes: int) -> Cost:
    """DMA compute: ``max(sum(src bytes) / 2, dst bytes)`` at ``compute_efficiency`` x the DMA rate.

    The published figure (50% of a copy's throughput) is for a two-input
    accumulation ``B += A``; each further pair of sources is read as one more pass.
    """
    paced = max(sum(src_bytes) / 2, dst_bytes)
    return dma_cost(hw, max(sum(src_bytes), dst_bytes), hw.dma.compute_efficiency, paced)


def nbytes(t: Tensor) -> int:
    return t.size * t.itemsize


# -- dma_copy -------------------------------------------------------------------------


class DmaCopyOps(Operands):
    dst: Out
    src: In
    dst_rmw_op: Op | None = None
    oob_mode: enums.oob_mode = enums.oob_mode.error
    dge_mode: enums.dge_mode = enums.dge_mode.unknown
    unique_indices: bool = True


def _dma_copy_validate(ops: DmaCopyOps, chk: Check) -> None:
    check_in(chk, "src", ops.src, *DMA_MEMORIES)
    check_in(chk, "dst", ops.dst, *DMA_MEMORIES)
    check_element_counts(chk, "src", ops.src, "dst", ops.dst)
    if ops.dst_rmw_op is not None and ops.dst_rmw_op != OPS["add"]:
        chk.fail(OperandError, "dst_rmw_op", f"{ops.dst_rmw_op!r} is not supported; only nl.add")
    check_dge_mode(chk, ops.dge_mode)
    dynamic = ops.dge_mode in DYNAMIC_DGE_MODES or has_dynamic_offset(ops.src) or has_dynamic_offset(ops.dst)
    if ops.dst_rmw_op is not None and dynamic and ops.oob_mode is not enums.oob_mode.error:
        chk.fail(
            OperandError,
            "oob_mode",
            f"must be oob_mode.error when dst_rmw_op is used in a dynamic DGE mode ({ops.dge_mode.name})",
        )


def _dma_copy_cost(ops: DmaCopyOps, hw: HwConfig, engine: Engine) -> Cost:
    """``DMA_LAT + max(src, dst bytes) / (DMA_BW x payload_efficiency(packet))`` ns over the engines used (estimate)."""
    if ops.dst_rmw_op is not None:
        return dma_compute_cost(hw, [nbytes(ops.dst), nbytes(ops.src)], nbytes(ops.dst))
    return dma_cost(hw, max(nbytes(ops.src), nbytes(ops.dst)), views=(ops.src, ops.dst))


def _plain_copy(ops: DmaCopyOps) -> tuple[Tensor, Tensor] | None:
    """``(dst, src)`` of a copy of static views in one dtype (tfloat32 told apart): the bits move unchanged."""
    dst, src = ops.dst, ops.src
    if ops.dst_rmw_op is not None or dst.__class__ is not Tensor or src.__class__ is not Tensor:
        return None
    if dst.dtype is src.dtype:  # one dtype object: one format (what same_format would find, without its calls)
        return dst, src
    return (dst, src) if dst.dtype == src.dtype and same_format(dst, src) else None


@instruction(
    "dma_copy",
    DmaCopyOps,
    carries=dma_copy_carrier,
    engines=(Engine.dma,),
    cost=_dma_copy_cost,
    validate=_dma_copy_validate,
    accumulates=lambda ops: ops.dst_rmw_op is not None,
    # a gather may skip rows out of bounds, leaving their dst elements as they were
    overwrites=lambda ops: ops.dst_rmw_op is None and not ops.src.is_dynamic and not ops.dst.is_dynamic,
    copies=_plain_copy,
    reads_values=lambda ops: ops.dst_rmw_op is None,  # bits moved, or cast elementwise through float32
    dtypes="any; cast src -> fp32 -> dst if they differ (dst_rmw_op: fp32 math)",
)
def dma_copy(ops: DmaCopyOps, state: EngineState) -> None:
    """Copy ``src`` to ``dst`` element by element in row-major order (shapes may differ).

    A dtype change goes through float32. ``dst_rmw_op=nl.add`` stores ``dst + src``
    computed in float32. ``oob_mode`` and ``unique_indices`` only matter for dynamic
    addresses and indices (``.ap()`` gather and scatter, resolved by ``apply_dynamic``);
    with static addresses nothing is ever out of bounds.
    """
    dst, src = ops.dst, ops.src
    if (
        ops.dst_rmw_op is None
        and dst.dtype is src.dtype
        and dst.dtype.names is None
        and not (dst.is_dynamic or src.is_dynamic)
    ):  # the usual DMA, static views of one (unpacked) type: copy_bits without the calls to find that out
        values = src.array
        dst.array[...] = values if values.shape == dst.array.shape else values.reshape(dst.array.shape)
        return

    def copy(dst: Tensor, src: Tensor) -> None:
        if ops.dst_rmw_op is not None:
            write(dst, f32(dst).reshape(-1) + f32(src).reshape(-1))
        elif same_format(src, dst):
            copy_bits(dst, src)
        else:
            write(dst, f32(src))

    apply_dynamic(ops.dst, ops.src, ops.oob_mode is enums.oob_mode.skip, copy)


# -- dma_transpose --------------------------------------------------------------------


class DmaTransposeOps(Operands):
    dst: Out
    src: In
    axes: tuple[int, ...] | None = None
    dge_mode: enums.dge_mode = enums.dge_mode.unknown
    oob_mode: enums.oob_mode = enums.oob_mode.error


def transpose_axes(ops: DmaTransposeOps) -> tuple[int, ...]:
    return TRANSPOSE_AXES[ops.src.ndim]


def _dma_transpose_validate(ops: DmaTransposeOps, chk: Check) -> None:
    check_in(chk, "src", ops.src, *DMA_MEMORIES)
    check_in(chk, "dst", ops.dst, Buffer.sbuf)
    if ops.src.ndim not in TRANSPOSE_AXES:
        chk.fail(ShapeError, "src", f"is {ops.src.ndim}-D {list(ops.src.shape)}; dma_transpose takes 2-D to 4-D tiles")
    perm = transpose_axes(ops)
    if ops.axes is not None and tuple(ops.axes) != perm:
        chk.fail(
            OperandError,
            "axes",
            f"{tuple(ops.axes)} is not supported for a {ops.src.ndim}-D src; use {perm} (or None)",
        )
    if not same_format(ops.src, ops.dst):
        chk.fail(
            DtypeError, "dst", f"dtype {dtype_name(ops.dst.dtype)} differs from src dtype {dtype_name(ops.src.dtype)}"
        )
    out_shape = tuple(ops.src.shape[a] for a in perm)
    if ops.dst.shape != out_shape and (
        ops.dst.partitions != out_shape[0] or ops.dst.size != ops.src.size  # NKI 0.2 lets the free dims be reshaped
    ):
        chk.fail(ShapeError, "dst", f"shape {list(ops.dst.shape)} must be the transposed shape {list(out_shape)}")
    if ops.src.is_dynamic:  # NKI 0.3 indirect transpose (a vector_offset gather of rows, then transposed)
        _check_indirect_transpose(ops, chk)
        return
    if ops.dge_mode is enums.dge_mode.swdge:  # NKI 0.3 kernels also pass dge_mode.none: static descriptors
        chk.fail(
            OperandError,
            "dge_mode",
            "swdge is not valid for a direct transpose; use dge_mode.unknown, none or hwdge",
        )
    check_dge_mode(chk, ops.dge_mode)
    if ops.dge_mode is enums.dge_mode.hwdge:
        _check_hwdge_transpose(ops, chk)


def _check_indirect_transpose(ops: DmaTransposeOps, chk: Check) -> None:
    """NKI 0.3's DMA indirect transpose constraints (lowered to a software-DGE gather transpose)."""
    if ops.dge_mode not in (enums.dge_mode.unknown, enums.dge_mode.swdge):
        chk.fail(
            OperandError,
            "dge_mode",
            f"{ops.dge_mode.name} is not valid for an indirect transpose; use dge_mode.unknown or dge_mode.swdge",
        )
    require(chk, "dma_indirect_transpose", "src", "an indirect (vector_offset) transpose needs NeuronCore-v3 or newer")
    if ops.src.buffer.is_on_chip:
        chk.fail(MemoryKindError, "src", "an indirect transpose reads from HBM")
    if ops.dst.is_dynamic:
        chk.fail(OperandError, "dst", "an indirect transpose writes a static SBUF tile")
    if ops.src.itemsize != 2:
        chk.fail(DtypeError, "src", f"dtype {dtype_name(ops.src.dtype)} is not 2 bytes, as an indirect transpose needs")
    if ops.src.shape[-1] > 128:
        chk.fail(ShapeError, "src", f"shape[-1] is {ops.src.shape[-1]}; an indirect transpose takes at most 128")


def _check_hwdge_transpose(ops: DmaTransposeOps, chk: Check) -> None:
    src = ops.src
    if src.shape[0] != 16:
        chk.fail(ShapeError, "src", f"shape[0] is {src.shape[0]}; a hwdge transpose needs 16")
    if src.shape[-1] % 128:
        chk.fail(ShapeError, "src", f"shape[-1] is {src.shape[-1]}; a hwdge transpose needs a multiple of 128")
    if src.itemsize != 2:
        chk.fail(DtypeError, "src", f"dtype {dtype_name(src.dtype)} is not a 2-byte type, as a hwdge transpose needs")


def _dma_transpose_cost(ops: DmaTransposeOps, hw: HwConfig, engine: Engine) -> Cost:
    """``DMA_LAT + src bytes / (DMA_BW * e)`` ns, ``e`` 0.9 from HBM and 0.5 from SBUF (estimate)."""
    eff = hw.dma.transpose_sbuf_efficiency if ops.src.buffer.is_on_chip else hw.dma.transpose_hbm_efficiency
    return dma_cost(hw, nbytes(ops.src), eff)


@instruction(
    "dma_transpose",
    DmaTransposeOps,
    engines=(Engine.dma,),
    cost=_dma_transpose_cost,
    validate=_dma_transpose_validate,
    dtypes="any; dst = src dtype (hwdge: 2-byte types)",
)
def dma_transpose(ops: DmaTransposeOps, state: EngineState) -> None:
    """``dst = src.transpose(axes)``: ``(1, 0)``, ``(2, 1, 0)`` or ``(3, 1, 2, 0)`` by rank, bit-exact."""
    axes = transpose_axes(ops)
    if not ops.src.is_dynamic:
        ops.dst.array[...] = np.transpose(ops.src.array, axes).reshape(ops.dst.shape)
        return
    values, ok = gather(ops.src, ops.oob_mode is enums.oob_mode.skip)  # skipped rows leave dst as it was
    transposed = np.transpose(values, axes).reshape(ops.dst.shape)
    if ok.all():
        ops.dst.array[...] = transposed
        return
    keep = np.transpose(ok, axes).reshape(ops.dst.shape)
    ops.dst.array[keep] = transposed[keep]


# -- dma_compute ----------------------------------------------------------------------


class DmaComputeOps(Operands):
    dst: Out
    srcs: Annotated[list[Tensor], Access.read]
    scales: list[float] | None = None  # required in NKI 0.2; NKI 0.3 defaults it to all 1.0
    reduce_op: Op
    unique_indices: bool = True
    oob_mode: enums.oob_mode = enums.oob_mode.error

    def accessed(self) -> tuple[list[tuple[str, Tensor]], list[tuple[str, Tensor]]]:
        reads, writes = super().accessed()
        reads.extend((f"srcs[{i}]", t) for i, t in enumerate(self.srcs))
        return reads, writes

    @property
    def scale_values(self) -> list[float]:
        return [1.0] * len(self.srcs) if self.scales is None else list(self.scales)


def _dma_compute_validate(ops: DmaComputeOps, chk: Check) -> None:
    if not 1 <= len(ops.srcs) <= MAX_DMA_COMPUTE_SRCS:
        chk.fail(OperandError, "srcs", f"has {len(ops.srcs)} tensors; give 1 to {MAX_DMA_COMPUTE_SRCS}")
    if ops.scales is not None and len(ops.scales) != len(ops.srcs):
        chk.fail(OperandError, "scales", f"has {len(ops.scales)} values for {len(ops.srcs)} srcs")
    if any(s != 1.0 for s in ops.scale_values):
        chk.fail(OperandError, "scales", f"{list(ops.scale_values)} must all be 1.0")
    if ops.reduce_op != OPS["add"]:
        chk.fail(OperandError, "reduce_op", f"{ops.reduce_op!r} is not supported; only nl.add")
    check_in(chk, "dst", ops.dst, *DMA_MEMORIES)
    for i, src in enumerate(ops.srcs):
        name = f"srcs[{i}]"
        if src.buffer not in DMA_MEMORIES:
            chk.fail(MemoryKindError, name, f"must be in HBM or SBUF, not {src.buffer.value.upper()} ({src.name})")
        check_element_counts(chk, "dst", ops.dst, name, src)
    dynamic = [i for i, src in enumerate(ops.srcs) if src.is_dynamic]
    if not dynamic and not ops.dst.is_dynamic:
        return
    # NKI 0.3 read-modify-write: dst(HBM)[indices] += src(SBUF), or dst(SBUF) += src(HBM)[indices]
    if len(ops.srcs) != 2 or len(dynamic) != 1:
        chk.fail(OperandError, "srcs", "with an indirect (vector_offset) access, give 2 sources, exactly one indirect")
    if not ops.unique_indices:
        chk.fail(OperandError, "unique_indices", "must be True with indirect indexing (non-unique is not supported)")


def _dma_compute_rmw_operand(ops: DmaComputeOps) -> Tensor:
    """In a scatter (``dst`` indirect), the source that is not ``dst``'s own indirect view."""
    return next(src for src in ops.srcs if not src.is_dynamic)


def _dma_compute_cost(ops: DmaComputeOps, hw: HwConfig, engine: Engine) -> Cost:
    """``DMA_LAT + max(sum(src bytes) / 2, dst bytes) / (DMA_BW * 0.5)`` ns (estimate).

    Accumulation runs at half the DMA rate (published for two inputs); see ``dma_compute_cost``.
    """
    return dma_compute_cost(hw, [nbytes(s) for s in ops.srcs], nbytes(ops.dst))


@instruction(
    "dma_compute",
    DmaComputeOps,
    engines=(Engine.dma,),
    cost=_dma_compute_cost,
    validate=_dma_compute_validate,
    dtypes="any; srcs summed in fp32, cast to dst",
)
def dma_compute(ops: DmaComputeOps, state: EngineState) -> None:
    """``dst = srcs[0] * scales[0] + srcs[1] * scales[1] + ...`` in float32, left to right, cast on write.

    Elements pair up in row-major order, so shapes may differ when element counts match.
    With an indirect (``vector_offset``) view it is NKI 0.3's read-modify-write: a
    scatter ``dst[indices] += src`` (``dst`` and one source are the indirect view) or
    a gather ``dst += src[indices]``. ``oob_mode.skip`` leaves out-of-bounds rows alone.
    """
    skip = ops.oob_mode is enums.oob_mode.skip

    def add(dst: Tensor, src: Tensor) -> None:
        write(dst, f32(dst).reshape(-1) + f32(src).reshape(-1))

    if ops.dst.is_dynamic:
        apply_dynamic(ops.dst, _dma_compute_rmw_operand(ops), skip, add)
        return
    keep = np.ones(ops.dst.size, dtype=bool)
    terms = []
    for src, scale in zip(ops.srcs, ops.scale_values):
        if src.is_dynamic:
            values, ok = gather(src, skip)
            keep &= ok.reshape(-1)
        else:
            values = src.array
        terms.append(values.astype(F32, copy=False).reshape(-1) * F32(scale))
    acc = terms[0]
    for term in terms[1:]:
        acc = acc + term
    if keep.all():
        write(ops.dst, acc)
    else:
        write(ops.dst, np.where(keep, acc, f32(ops.dst).reshape(-1)))
