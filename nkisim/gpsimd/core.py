"""One GPSIMD processor while it runs a kernel: cycle counters, TCM pool, stack and printf.

Costs are counted, not scheduled, element by element: accessors bump integer counters and
vector work adds cycles. At each coarse event (a ``tensor_to_tcm``/``tcm_to_tensor`` transfer, a
stream ``close``, the end of the kernel) the counters become records ``(opcode, cycles, bytes,
elements, loc)``, which :func:`nkisim.gpsimd.run` hands to the execution core, one track per
processor.
"""

from __future__ import annotations

import functools
import math
import weakref
from typing import Any, NamedTuple

import numpy as np

from nkisim.errors import SourceLoc, user_location
from nkisim.gpsimd.errors import GpsimdStackOverflow, GpsimdUndefinedBehavior
from nkisim.hw.gpsimd import GpsimdConfig

#: TCM allocations are aligned to one SIMD word.
TCM_ALIGN = 64


class Record(NamedTuple):
    """A coarse piece of one core's work, with its accumulated cost."""

    opcode: str
    cycles: float
    bytes: int
    elements: int
    loc: SourceLoc


#: Builds a :class:`Record` from a tuple without the keyword-argument constructor (hot path).
_record = functools.partial(tuple.__new__, Record)


def caller_location() -> SourceLoc:
    """:func:`nkisim.errors.user_location` of the kernel code that called the API function calling this."""
    return user_location(3)


class ChargedArray(np.ndarray):
    """A numpy view of core-local memory (TCM or the stack) whose use is charged to its core.

    Scalar reads and writes cost one access each; ufuncs and numpy functions cost one vector
    instruction per SIMD word of the elements they touch.
    """

    #: The core charged for this memory's use, and ``"tcm"`` or ``"stack"``: set on each view made
    #: by indexing or :meth:`reshape` (cheaper than ``__array_finalize__`` on every view).
    _core: Core | None = None
    _kind: str = "tcm"

    def __getitem__(self, key: Any) -> Any:
        value = super().__getitem__(key)
        core = self._core
        if type(value) is ChargedArray:
            value._core = core
            value._kind = self._kind
            if type(key) is slice or key is Ellipsis or core is None or not value.size:
                return value
            core.charge_vector(self._kind, value.size, self.itemsize)
        elif core is not None and not isinstance(value, np.ndarray):
            core.charge_scalar(self._kind)
        return value

    def reshape(self, *args: Any, **kwargs: Any) -> Any:
        value = super().reshape(*args, **kwargs)
        value._core, value._kind = self._core, self._kind
        return value

    @property
    def T(self) -> Any:  # noqa: N802 (numpy's name)
        value = super().T
        value._core, value._kind = self._core, self._kind
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        np.ndarray.__setitem__(self.view(np.ndarray), key, value)
        core = self._core
        if core is not None:
            if isinstance(key, (int, np.integer)) or (
                isinstance(key, tuple) and all(isinstance(k, (int, np.integer)) for k in key)
            ):
                core.charge_scalar(self._kind)
            else:
                touched = np.size(np.ndarray.__getitem__(self.view(np.ndarray), key))
                core.charge_vector(self._kind, touched, self.itemsize)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        plain = [x.view(np.ndarray) if type(x) is ChargedArray else x for x in inputs]
        out = kwargs.get("out")
        if out is not None:
            out = kwargs["out"] = tuple([x.view(np.ndarray) if type(x) is ChargedArray else x for x in out])
        result = ufunc(*plain, **kwargs) if method == "__call__" else getattr(ufunc, method)(*plain, **kwargs)
        core = self._core
        if core is not None:
            first = out[0] if out else (result[0] if type(result) is tuple else result)
            core.charge_vector(self._kind, first.size if isinstance(first, np.ndarray) else 1, self.itemsize)
        return result

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        charged = [a for a in args if isinstance(a, ChargedArray)]
        plain = tuple(a.view(np.ndarray) if isinstance(a, ChargedArray) else a for a in args)
        result = func(*plain, **kwargs)
        for a in charged:
            if a._core is not None:
                a._core.charge_vector(a._kind, a.size, a.itemsize)
        return result


def _charged(array: np.ndarray, core: Core, kind: str) -> ChargedArray:
    view = array.view(ChargedArray)
    view._core = core
    view._kind = kind
    return view


class Core:
    """The state and cost counters of one GPSIMD processor during one kernel run.

    Args:
        core_id: this processor's id.
        count: how many processors run the kernel (1 in single-core mode).
        cfg: the generation's GPSIMD constants.
        stack_limit: the bytes the stack may grow to before it overflows.
        remote_stack: the stack lives in NeuronCore memory (declared ``-DSTACK_SIZE`` > 8 KB).
        op: ``library.op``, for error messages.
    """

    def __init__(
        self, core_id: int, count: int, cfg: GpsimdConfig, stack_limit: int, remote_stack: bool, op: str
    ) -> None:
        self.id = core_id
        self.count = count
        self.cfg = cfg
        self.op = op
        self.stack_limit = stack_limit
        self.remote_stack = remote_stack
        self.records: list[Record] = []
        self._lanes: dict[int, int] = {}
        self._simd_op = cfg.simd_op_cycles
        self._tcm_latency = cfg.tcm_latency_cycles
        self._dma_setup = cfg.tcm_dma_setup_cycles
        self._dma_rate = cfg.tcm_dma_bytes_per_cycle
        # counters since the last record
        self.element_accesses = 0
        self.stream_accesses = 0
        self.tcm_cycles = 0.0
        self.stack_cycles = 0.0
        self.aten_elements = 0
        self.printf_calls = 0
        self.stack_bytes = 0
        self.stack_peak = 0
        self._pool = np.zeros(cfg.tcm_pool_bytes, dtype=np.uint8)
        self._tcm: dict[int, tuple[int, int, np.ndarray]] = {}  # id(view) -> (offset, nbytes, view)
        self.open_streams: list[Any] = []
        #: ``(start, end, loc)`` of each write to the operator's output tensor (flattened elements).
        self.dst_writes: list[tuple[int, int, SourceLoc]] = []

    # -- charging -----------------------------------------------------------------------

    def charge_scalar(self, kind: str) -> None:
        if kind == "tcm":
            self.tcm_cycles += self.cfg.tcm_latency_cycles
        else:
            self.stack_cycles += self._stack_access

    def charge_vector(self, kind: str, elements: int, itemsize: int) -> None:
        lanes = self._lanes.get(itemsize)
        if lanes is None:
            lanes = self._lanes[itemsize] = self.cfg.lanes(itemsize)
        words = -(-elements // lanes)
        if kind == "tcm":
            self.tcm_cycles += words * self._simd_op + self._tcm_latency
        else:
            self.stack_cycles += words * self._stack_access

    @property
    def _stack_access(self) -> float:
        cfg = self.cfg
        return cfg.remote_stack_access_cycles if self.remote_stack else cfg.local_stack_access_cycles

    def flush(self, loc: SourceLoc) -> None:
        """Turn the counters into records (one per kind of work done since the last record)."""
        cfg = self.cfg
        records = self.records
        if self.element_accesses:
            n, self.element_accesses = self.element_accesses, 0
            records.append(_record(("element_access", n * cfg.element_access_cycles, 0, n, loc)))
        if self.stream_accesses:
            n, self.stream_accesses = self.stream_accesses, 0
            records.append(_record(("stream_access", n * cfg.stream_access_cycles, 0, n, loc)))
        if self.tcm_cycles:
            records.append(_record(("tcm_compute", self.tcm_cycles, 0, 0, loc)))
            self.tcm_cycles = 0.0
        if self.stack_cycles:
            records.append(_record(("stack_access", self.stack_cycles, 0, 0, loc)))
            self.stack_cycles = 0.0
        if self.aten_elements:
            n, self.aten_elements = self.aten_elements, 0
            records.append(_record(("aten", n * cfg.aten_cycles_per_element, 0, n, loc)))
        if self.printf_calls:
            n, self.printf_calls = self.printf_calls, 0
            records.append(_record(("printf", n * cfg.printf_cycles, 0, n, loc)))

    def transfer(self, opcode: str, nbytes: int, elements: int, loc: SourceLoc) -> None:
        """Record a bulk HBM<->TCM copy after the work that came before it."""
        if (
            self.tcm_cycles
            or self.element_accesses
            or self.stream_accesses
            or self.stack_cycles
            or self.aten_elements
            or self.printf_calls
        ):
            self.flush(loc)
        self.records.append(_record((opcode, self._dma_setup + nbytes / self._dma_rate, nbytes, elements, loc)))

    # -- TCM ----------------------------------------------------------------------------

    def tcm_alloc(self, nbytes: int) -> int | None:
        """Offset of a free, aligned block of ``nbytes`` in the pool (first fit), or None."""
        size = max(TCM_ALIGN, -(-nbytes // TCM_ALIGN) * TCM_ALIGN)
        taken = sorted((off, n) for off, n, _ in self._tcm.values())
        start = 0
        for off, n in taken:
            if off - start >= size:
                break
            start = max(start, off + n)
        if start + size > self.cfg.tcm_pool_bytes:
            return None
        return start

    def tcm_malloc(self, nbytes: int, dtype: Any) -> ChargedArray | None:
        dt = np.dtype(dtype)
        count = int(nbytes) // dt.itemsize
        if count <= 0:
            return None
        offset = self.tcm_alloc(count * dt.itemsize)
        if offset is None:
            return None
        size = max(TCM_ALIGN, -(-count * dt.itemsize // TCM_ALIGN) * TCM_ALIGN)
        view = _charged(self._pool[offset : offset + count * dt.itemsize].view(dt), self, "tcm")
        self._tcm[id(view)] = (offset, size, view)
        return view

    def tcm_reserve(self, nbytes: int) -> object | None:
        """A raw block of the pool (a stream's buffer); release with :meth:`tcm_release`."""
        offset = self.tcm_alloc(nbytes)
        if offset is None:
            return None
        token = np.empty(0)
        self._tcm[id(token)] = (offset, max(TCM_ALIGN, nbytes), token)
        return token

    def tcm_release(self, token: object) -> None:
        self._tcm.pop(id(token), None)

    def tcm_free(self, buf: Any, loc: SourceLoc) -> None:
        if buf is None:
            return
        if id(buf) not in self._tcm or self._tcm[id(buf)][2] is not buf:
            raise GpsimdUndefinedBehavior(
                "tcm_free of a pointer tcm_malloc did not return (or already freed) is undefined behaviour",
                loc=loc,
                op=self.op,
                core=self.id,
            )
        del self._tcm[id(buf)]

    def is_tcm(self, buf: Any) -> bool:
        return isinstance(buf, ChargedArray) and buf._core is self and buf._kind == "tcm"

    @property
    def tcm_in_use(self) -> int:
        return sum(n for _, n, _ in self._tcm.values())

    # -- stack --------------------------------------------------------------------------

    def stack_array(self, shape: Any, dtype: Any) -> ChargedArray:
        dt = np.dtype(dtype)
        shape_t = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        nbytes = math.prod(shape_t) * dt.itemsize
        if self.stack_bytes + nbytes > self.stack_limit:
            where = "NeuronCore memory (declared -DSTACK_SIZE)" if self.remote_stack else "fast local memory"
            raise GpsimdStackOverflow(
                f"GPSIMD stack overflow: {self.stack_bytes + nbytes} bytes in use "
                f"({self.stack_bytes} + {nbytes} for a {dt.name}{list(shape_t)} array) exceed the "
                f"{self.stack_limit}-byte stack in {where}; declare a larger stack with "
                f"extra_cflags=['-DSTACK_SIZE=<bytes>'] (at most {self.cfg.max_stack_bytes})",
                loc=user_location(),
                op=self.op,
                core=self.id,
            )
        array = _charged(np.zeros(shape_t, dtype=dt), self, "stack")
        self.stack_bytes += nbytes
        self.stack_peak = max(self.stack_peak, self.stack_bytes)
        weakref.finalize(array, self._pop_stack, nbytes)
        return array

    def _pop_stack(self, nbytes: int) -> None:
        self.stack_bytes -= nbytes
