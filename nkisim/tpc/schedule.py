"""The cycle model of one index-space member: its micro-ops packed into 4-slot VLIW bundles.

A greedy list scheduler, as the TPC compiler emits straight-line code from a fully unrolled trace:
micro-ops are taken in program order and each goes into the earliest bundle in which

* its operands are ready: producer issue cycle + the dependent-issue distance of the pair
  (:class:`nkisim.hw.tpc.TpcLatencies`, by producer class and consumer operand kind);
* its slot (load, SPU, VPU, store) is free; a LOOKUP holds the load slot for two cycles; on
  Gaudi2 and later a tensor load may take the store slot when the load slot is busy;
* no structural conflict arises: LD_L_V/LOOKUP with ST_L_V (one local-memory port), and a VPU
  operation with three or more vector operands (SrcC) with a store (whose value is read on SrcC).

Global memory is a separate stall model: each tensor load or store moves one vector over this TPC's
share of HBM bandwidth, booked on a per-cycle calendar of that share from its issue cycle on (the
first free capacity, so an early load is not queued behind a later store); a load's data is ready
at the end of the cycle its transfer completes, or its pipeline latency if later, so consumers stall
when demand exceeds bandwidth. A load from a tensor this
member stored before waits the default latency after that store.

The function is plain Python over numpy arrays (the readable reference) and is compiled with numba.
"""

from __future__ import annotations

import itertools

import numba
import numpy as np

from nkisim.hw.tpc import TpcLatencies
from nkisim.tpc.trace import (
    C_CMP,
    C_FMA,
    C_LD,
    C_LOOKUP,
    C_MDG,
    C_NONE,
    C_SHUF,
    C_VPU,
    K_ACC,
    K_PRED,
    K_SRC,
    K_STV,
    M_GLD,
    M_GST,
    M_LLD,
    M_LOOKUP,
    M_LST,
    STORE,
    VPU,
)

_B_LOCAL_LD, _B_LOCAL_ST, _B_VPU_SRCC, _B_ST_SRCC = 16, 32, 64, 128


def latency_matrix(lat: TpcLatencies) -> np.ndarray:
    """``[producer class, consumer kind] -> cycles`` from the generation's latency table."""
    src = {
        C_LD: lat.ld_tnsr,
        C_VPU: lat.vpu,
        C_FMA: lat.fma,
        C_CMP: lat.default,
        C_SHUF: lat.shuffle,
        C_MDG: lat.mov_dual_group,
        C_LOOKUP: lat.lookup,
        C_NONE: lat.default,
    }
    table = np.zeros((8, 4), dtype=np.int64)
    for cls, cycles in src.items():
        table[cls, K_SRC] = cycles
        table[cls, K_ACC] = lat.fma_to_accumulator if cls == C_FMA else cycles
        table[cls, K_PRED] = lat.cmp_to_predicate if cls == C_CMP else cycles
        table[cls, K_STV] = lat.to_store_value
    return table


@numba.njit(cache=True)
def _fits(occ: np.ndarray, c: int, slot: int, mem: int, srcc: bool, is_store: bool) -> bool:
    bits = occ[c]
    if bits & (1 << slot):
        return False
    if (mem in (M_LLD, M_LOOKUP)) and bits & _B_LOCAL_ST:
        return False
    if mem == M_LST and bits & _B_LOCAL_LD:
        return False
    if srcc and bits & _B_ST_SRCC:
        return False
    return not (is_store and bits & _B_VPU_SRCC)


def schedule_reference(
    slot: np.ndarray,
    cls: np.ndarray,
    srcs: np.ndarray,
    kinds: np.ndarray,
    mem: np.ndarray,
    tensor: np.ndarray,
    nsrc: np.ndarray,
    lat: np.ndarray,
    lookup_cycles: int,
    ld_in_store: bool,
    transfer_cycles: float,
    horizon: int,
) -> tuple[np.ndarray, np.ndarray, int, float]:
    """Issue cycle and slot of each micro-op, the member's cycles, and when its memory traffic ends.

    ``srcs``/``kinds`` are ``(n, 4)`` (source micro-op within the member, or -1; consumer operand
    kind); ``nsrc`` counts the vector operands; ``transfer_cycles`` is one vector's HBM time (0: no
    bandwidth stalls).
    """
    n = slot.shape[0]
    occ = np.zeros(horizon, dtype=np.int64)
    issue = np.zeros(n, dtype=np.int64)
    used = np.zeros(n, dtype=np.int64)
    data_ready = np.zeros(n, dtype=np.int64)
    first_free = np.zeros(4, dtype=np.int64)
    last_store = np.full(64, -1, dtype=np.int64)
    chan = np.zeros(2 * horizon, dtype=np.float64)  # the share of each cycle's bandwidth in use
    chan_free = 0  # every cycle before this one is fully booked
    mem_free = 0.0
    end = 0
    dep_latency = lat[C_NONE, K_SRC]
    for u in range(n):
        t = 0
        for j in range(4):
            s = srcs[u, j]
            if s >= 0:
                r = issue[s] + lat[cls[s], kinds[u, j]]
                if data_ready[s] > r:
                    r = data_ready[s]
                if r > t:
                    t = r
        m = mem[u]
        if m == M_GLD and last_store[tensor[u]] >= 0:
            r = last_store[tensor[u]] + dep_latency
            if r > t:
                t = r
        sl = slot[u]
        srcc = sl == VPU and nsrc[u] >= 3
        is_store = m in (M_GST, M_LST)
        c = max(t, first_free[sl])
        while not _fits(occ, c, sl, m, srcc, is_store) or (m == M_LOOKUP and not _fits(occ, c + 1, sl, m, srcc, False)):
            c += 1
        chosen = sl
        if ld_in_store and m == M_GLD:
            c2 = max(t, first_free[STORE])
            while not _fits(occ, c2, STORE, m, False, False):
                c2 += 1
            if c2 < c:
                c, chosen = c2, STORE
        issue[u] = c
        used[u] = chosen
        bits = 1 << chosen
        if m in (M_LLD, M_LOOKUP):
            bits |= _B_LOCAL_LD
        if m == M_LST:
            bits |= _B_LOCAL_ST
        if srcc:
            bits |= _B_VPU_SRCC
        if is_store:
            bits |= _B_ST_SRCC
        occ[c] |= bits
        busy = 1
        if m == M_LOOKUP:
            occ[c + 1] |= bits
            busy = lookup_cycles
        while occ[first_free[chosen]] & (1 << chosen):
            first_free[chosen] += 1
        if m in (M_GLD, M_GST):
            k = max(c, chan_free)
            remaining = transfer_cycles
            finish = c
            while remaining > 1e-9:
                room = 1.0 - chan[k]
                if room > 1e-9:
                    take = min(room, remaining)
                    chan[k] += take
                    remaining -= take
                    finish = k + 1
                k += 1
            while chan[chan_free] >= 1.0 - 1e-9:
                chan_free += 1
            if finish > mem_free:
                mem_free = float(finish)
            if m == M_GLD:
                data_ready[u] = finish
            else:
                last_store[tensor[u]] = c
        if c + busy > end:
            end = c + busy
    return issue, used, end, mem_free


#: The compiled scheduler (same code as :func:`schedule_reference`).
schedule_member = numba.njit(cache=True)(schedule_reference)


def member_arrays(uops: list[tuple[int, ...]], first: int) -> tuple[np.ndarray, ...]:
    """The scheduler's input arrays for micro-ops ``uops`` (one member's, numbered from ``first``)."""
    table = np.fromiter(itertools.chain.from_iterable(uops), dtype=np.int64, count=12 * len(uops)).reshape(-1, 12)
    srcs = table[:, 2:6] - first
    nsrc = np.count_nonzero(table[:, 2:6] >= 0, axis=1)
    srcs[srcs < 0] = -1  # none, or a value from outside this member (ready at the start)
    kinds = np.where(srcs >= 0, table[:, 6:10], 0)
    return table[:, 0].copy(), table[:, 1].copy(), srcs, kinds, table[:, 10].copy(), table[:, 11].copy(), nsrc
