"""The ``ctx`` a TPC kernel receives: the index-space member it runs, local memories, and every intrinsic.

One context per member. Its intrinsic methods come from the table in :mod:`nkisim.tpc.intrinsics`
(``ctx.v_f32_ld_tnsr_b(coords, tensor)``, ``ctx.v_f32_add_b(a, b)``, ...); the rest mirrors TPC-C's
built-ins: ``get_index_space_offset()``/``get_index_space_size()`` (I0/I1 as int5), local arrays in
SLM/VLM (``__local__``), ``aso()`` and the tensor descriptors' sizes.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from nkisim.errors import SourceLoc, user_location
from nkisim.hw.tpc import TpcConfig
from nkisim.tpc.errors import TpcLocalMemoryError, TpcTypeError
from nkisim.tpc.families import emit, method
from nkisim.tpc.intrinsics import INTRINSICS, IntrinsicSpec
from nkisim.tpc.tape import Op, opcode
from nkisim.tpc.trace import C_LD, C_NONE, K_SRC, K_STV, M_LST, M_NONE, STORE, Trace
from nkisim.tpc.types import VECTOR_BYTES, VTYPES, Vec, int5

#: The opcodes of ``aso()`` and of a VLM store (``ST_L_V``, its value the operand).
_ASO = opcode(Op(None, ((STORE, C_NONE, M_NONE, -1, (), ()),)))
_ST_L_V = opcode(Op(None, ((STORE, C_NONE, M_LST, -1, (0,), (K_STV,)),), refs=(0,)))


class TpcCoherenceWarning(UserWarning):
    """A load reads a tensor this member stored to without ``aso()`` in between (not coherent on hardware)."""


class LocalArray:
    """A ``__local__`` vector array in VLM: ``arr[i]`` loads (``LD_L_V``), ``arr[i] = v`` stores (``ST_L_V``).

    Attributes:
        vtype: the element vector type.
        count: vectors in the array.
        address: its byte address in VLM.
    """

    def __init__(self, ctx: TpcContext, vtype: Any, count: int, address: int) -> None:
        self._ctx = ctx
        self.vtype = vtype
        self.count = count
        self.address = address
        self._ld = INTRINSICS[f"v_{vtype.prefix}_ld_l_v_b"]
        self._st = INTRINSICS[f"v_{vtype.prefix}_st_l_v"]

    def _addr(self, i: int) -> int:
        if not 0 <= i < self.count:
            raise IndexError(f"local array index {i} out of range 0..{self.count - 1}")
        return self.address + i * VECTOR_BYTES

    def __getitem__(self, i: int) -> Vec:
        return self._ctx._vlm_load(self._ld, self._addr(int(i)), True, False, None)

    def __setitem__(self, i: int, value: Vec) -> None:
        if not isinstance(value, Vec) or value.vtype is not self.vtype:
            raise TypeError(f"a {self.vtype.name} local array stores {self.vtype.name} values")
        self._ctx._vlm_store(self._st, self._addr(int(i)), value, True, False)

    def __len__(self) -> int:
        return self.count


class TpcContext:
    """What a kernel sees while it runs one member of the index space on one TPC.

    Attributes:
        cfg: the Gaudi generation's TPC constants.
    """

    def __init__(
        self,
        trace: Trace,
        cfg: TpcConfig,
        kernel: str,
        tpc: int,
        member: int,
        offset: np.ndarray,
        size: np.ndarray,
        tensor_count: int,
    ) -> None:
        self._t = trace
        self.cfg = cfg
        self._kernel = kernel
        self._device = cfg.name
        self._tpc = tpc
        self._member = member
        self._offset = offset.astype(np.int32)
        self._size = size.astype(np.int32)
        self._tensor_ok = frozenset(range(tensor_count))
        self._tensor_code = {i: trace.tensors[i].vtype.code for i in range(tensor_count)}
        self._coords_ok: list[Any] = [None, None]  # the last int5 seen to be a numpy int32[5], its bytes view
        self._stored: set[int] = set()  # tensors stored since the last aso()
        self._warned: set[tuple[str, int]] = set()
        self._vlm: dict[int, tuple[Vec, int]] = {}
        self.vlm_bytes = 0
        self.slm_bytes = 0
        self.vlm_allocs: list[tuple[int, SourceLoc]] = []
        self.lookup_at: tuple[str, SourceLoc] | None = None
        trace.forget_stores()

    # -- the index space --------------------------------------------------------------------

    def get_index_space_offset(self) -> np.ndarray:
        """``int5``: where this member's box of the index space starts (I0)."""
        return self._offset.copy()

    def get_index_space_size(self) -> np.ndarray:
        """``int5``: the extent of this member's box (I1)."""
        return self._size.copy()

    @staticmethod
    def int5(values: object = (0, 0, 0, 0, 0)) -> np.ndarray:
        """A fresh ``int5`` coordinate (numpy int32[5], dim0 first)."""
        return int5(values)

    def get_dim_size(self, tensor: int, dim: int) -> int:
        """The size of TPC dimension ``dim`` (0 = fastest) of ``tensor``, from its descriptor."""
        return int(self._t.tensors[tensor].sizes[dim])

    # -- local memories ---------------------------------------------------------------------

    def local_array(self, shape: int | tuple[int, ...], dtype: Any) -> Any:
        """A ``__local__`` array: vector types (``"float64"``, ...) in VLM, scalar dtypes in SLM.

        Raises:
            TpcLocalMemoryError: the generation's SLM or VLM has no room for it.
        """
        count = math.prod((shape,) if isinstance(shape, int) else shape)
        loc = user_location()
        vtype = VTYPES.get(dtype) if isinstance(dtype, str) else None
        if vtype is not None:
            address = self.vlm_bytes
            self.vlm_bytes += count * VECTOR_BYTES
            self.vlm_allocs.append((count * VECTOR_BYTES, loc))
            if self.vlm_bytes > self.cfg.vlm_bytes:
                raise self._local_error(
                    f"local {vtype.name}[{count}] needs {count * VECTOR_BYTES} bytes: {self.vlm_bytes} bytes of "
                    f"vector local memory in use exceed the {self.cfg.vlm_bytes}-byte VLM of {self.cfg.name}",
                    loc,
                )
            return LocalArray(self, vtype, count, address)
        array = np.zeros(shape, dtype=dtype)
        self.slm_bytes += array.nbytes
        if self.slm_bytes > self.cfg.slm_bytes:
            raise self._local_error(
                f"local {array.dtype.name}{list(array.shape)} needs {array.nbytes} bytes: {self.slm_bytes} bytes of "
                f"scalar local memory in use exceed the {self.cfg.slm_bytes}-byte SLM of {self.cfg.name}",
                loc,
            )
        return array

    def _local_error(self, rule: str, loc: SourceLoc) -> TpcLocalMemoryError:
        return TpcLocalMemoryError(
            rule, loc=loc, kernel=self._kernel, tpc=self._tpc, member=self._member, device=self._device
        )

    def check_local_budget(self) -> None:
        """At the end of the member: with LOOKUP or special functions in use, VLM shrinks (16 KiB)."""
        if self.lookup_at is None or self.vlm_bytes <= self.cfg.vlm_lookup_bytes:
            return
        name, where = self.lookup_at
        total = 0
        for nbytes, loc in self.vlm_allocs:
            total += nbytes
            if total > self.cfg.vlm_lookup_bytes:
                raise self._local_error(
                    f"{self.vlm_bytes} bytes of local vector arrays exceed the {self.cfg.vlm_lookup_bytes}-byte VLM "
                    f"left when a kernel uses LOOKUP or special functions ({name} at {where}); "
                    f"the full {self.cfg.vlm_bytes} bytes are available only without them",
                    loc,
                )

    def _uses_lookup(self, name: str) -> None:
        if self.lookup_at is None:
            self.lookup_at = (name, self._loc(3))

    def _vlm_load(self, spec: IntrinsicSpec, addr: int, predicate: Any, polarity: Any, income: Any) -> Vec:
        stored = self._vlm.get(addr)
        if stored is None or stored[0].vtype is not spec.vtype:
            value: Any = 0 if stored is None else stored[0]  # never written here: zeros
            deps: tuple[int, ...] = () if stored is None else (stored[1],)
            if stored is not None:
                value = self.as_type(stored[0], spec.vtype)
        else:
            value, deps = stored[0], (stored[1],)
        mov = INTRINSICS[f"v_{spec.vtype.prefix}_mov_b"]
        return emit(self, mov, (value,), (K_SRC,), (), predicate, polarity, income, None, C_LD, (), deps)

    def _vlm_store(self, spec: IntrinsicSpec, addr: int, value: Vec, predicate: Any, polarity: Any) -> None:
        if addr % VECTOR_BYTES or not 0 <= addr < self.vlm_bytes:
            raise TpcTypeError(
                f"{spec.name}: VLM address {addr} is not a vector of an allocated local array (0..{self.vlm_bytes})",
                loc=self._loc(3),
                kernel=self._kernel,
                tpc=self._tpc,
                member=self._member,
                device=self._device,
            )
        n = self._t.entry(_ST_L_V, (value,))
        if bool(predicate) ^ bool(polarity):
            self._vlm[addr] = (value, n)

    def as_type(self, value: Vec, vtype: Any) -> Vec:
        """Reinterpret the bits of ``value`` as ``vtype`` (C's vector cast; no instruction)."""
        return getattr(self, f"as_{vtype.name}")(value)

    # -- memory ordering --------------------------------------------------------------------

    def aso(self) -> None:
        """``aso()``: commit older stores, so later loads of the same addresses see them."""
        self._t.entry(_ASO, ())
        self._stored.clear()
        self._t.forget_stores()

    def _before_reload(self, tensor: int) -> None:
        """A load from a tensor with stores pending: evaluate them first; warn if this member stored it without aso."""
        if tensor in self._stored and not self._t.locating:  # a member run again warns no second time
            loc = self._loc(3)
            key = (loc.file, loc.line)
            if key not in self._warned:
                self._warned.add(key)
                warnings.warn(
                    TpcCoherenceWarning(
                        f"{loc}: tpc {self._kernel} [TPC {self._tpc}, member {self._member}]: loads tensor {tensor} "
                        "after storing to it without aso(): load-after-store is not coherent on the TPC"
                    ),
                    stacklevel=3,
                )
        self._t.flush()

    # -- errors -----------------------------------------------------------------------------

    def _loc(self, depth: int = 2) -> SourceLoc:
        """The innermost kernel line on the stack (``depth`` skips frames known to be nkisim's)."""
        return user_location(depth)

    def _bad_tensor(self, spec: IntrinsicSpec, tensor: Any) -> None:
        if tensor not in self._tensor_ok:
            rule = f"{spec.name}: tensor {tensor!r} is not one of the kernel's tensors 0..{len(self._tensor_ok) - 1}"
        else:
            have = self._t.tensors[tensor].vtype
            rule = (
                f"{spec.name} on tensor {tensor}, whose elements are {have.dtype.name} ({have.name}); "
                f"use v_{have.prefix}_{spec.name.split('_', 2)[2]}"
            )
        raise TpcTypeError(
            rule, loc=self._loc(3), kernel=self._kernel, tpc=self._tpc, member=self._member, device=self._device
        )


for _spec in INTRINSICS.values():
    setattr(TpcContext, _spec.name, method(_spec))
