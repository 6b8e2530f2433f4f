"""Tensors as a GPSIMD kernel and a shape function see them, and their accessors.

* :class:`ShapeTensor`: what a shape function gets and returns: sizes and a dtype, no data.
* :class:`DeviceTensor`: a tensor in HBM inside a kernel. Its data is reached through accessors,
  named as in the C++ API: ``accessor()`` (the standard element accessor), ``read_stream()`` /
  ``write_stream()`` (stream accessors) and ``tcm_accessor()`` (bulk copies to and from TCM).
"""

from __future__ import annotations

import enum
import math
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from nkisim.errors import SourceLoc, user_location
from nkisim.gpsimd.core import ChargedArray, caller_location
from nkisim.gpsimd.errors import (
    GpsimdArgumentError,
    GpsimdBoundsError,
    GpsimdCoherenceError,
    GpsimdShapeFunctionError,
    GpsimdStreamError,
    GpsimdUndefinedBehavior,
)

if TYPE_CHECKING:
    from nkisim.gpsimd.core import Core

#: The factory-function dtypes of the device library, by their C++ names.
kFloat = np.dtype(np.float32)  # noqa: N816 (the C++ name)
kBFloat16 = np.dtype(ml_dtypes.bfloat16)  # noqa: N816 (the C++ name)
kHalf = np.dtype(np.float16)  # noqa: N816 (the C++ name)
kInt = np.dtype(np.int32)  # noqa: N816 (the C++ name)
kShort = np.dtype(np.int16)  # noqa: N816 (the C++ name)
kChar = np.dtype(np.int8)  # noqa: N816 (the C++ name)
kByte = np.dtype(np.uint8)  # noqa: N816 (the C++ name)
DTYPES: dict[np.dtype, str] = {
    kFloat: "kFloat",
    kBFloat16: "kBFloat16",
    kHalf: "kHalf",
    kInt: "kInt",
    kShort: "kShort",
    kChar: "kChar",
    kByte: "kByte",
}
#: Tensor size limits: up to 8 dims of at most 65535, or up to 4 dims of at most 2**32 - 1.
SIZE_LIMITS = ((8, 65535), (4, 2**32 - 1))


class CoherencePolicy(enum.Enum):
    """``torch::CoherencyEnforcer::Policy``: what happens when accessors are mixed incoherently."""

    COHERENT = "COHERENT"  #: raise an error (the default)
    INCOHERENT_VERBOSE = "INCOHERENT_VERBOSE"  #: warn and go on
    INCOHERENT_QUIET = "INCOHERENT_QUIET"  #: go on silently


class CoherencyEnforcer:
    """Namespace as in C++: ``CoherencyEnforcer.Policy.COHERENT``."""

    Policy = CoherencePolicy


def check_dtype(dtype: Any, what: str, loc: SourceLoc | None = None, op: str = "") -> np.dtype:
    """``dtype`` as a numpy dtype, if the device library supports it."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in DTYPES:
        names = ", ".join(f"{v} ({k.name})" for k, v in DTYPES.items())
        raise GpsimdArgumentError(
            f"{what} has dtype {dtype}, which custom operators do not support (supported: {names}; "
            "64-bit types are not supported)",
            loc=loc,
            op=op,
        )
    return dt


def check_sizes(sizes: Sequence[int], what: str, loc: SourceLoc | None = None, op: str = "") -> tuple[int, ...]:
    """``sizes`` as a tuple, if within the tensor limits (8 dims of <= 65535 or 4 dims of <= 2**32 - 1)."""
    shape = tuple(int(s) for s in sizes)
    if any(s < 0 for s in shape):
        raise GpsimdArgumentError(f"{what} has a negative size in {list(shape)}", loc=loc, op=op)
    if not any(len(shape) <= dims and all(s <= most for s in shape) for dims, most in SIZE_LIMITS):
        raise GpsimdArgumentError(
            f"{what} has sizes {list(shape)}: tensors may have up to 8 dimensions of at most 65535, "
            "or up to 4 dimensions of at most 4294967295",
            loc=loc,
            op=op,
        )
    return shape


def _sizes_arg(sizes: Any) -> tuple[int, ...]:
    if isinstance(sizes, (int, np.integer)):
        return (int(sizes),)
    return tuple(int(s) for s in sizes)


class ShapeTensor:
    """A tensor with sizes and a dtype but no data: what a shape function works with."""

    def __init__(self, sizes: Sequence[int], dtype: Any) -> None:
        self._sizes = tuple(int(s) for s in sizes)
        self.dtype = np.dtype(dtype)

    def sizes(self) -> tuple[int, ...]:
        """The sizes of each dimension."""
        return self._sizes

    def size(self, dim: int) -> int:
        return self._sizes[dim]

    def dim(self) -> int:
        return len(self._sizes)

    def numel(self) -> int:
        """The number of elements."""
        return math.prod(self._sizes)

    def scalar_type(self) -> np.dtype:
        return self.dtype

    def _no_data(self, *args: Any, **kwargs: Any) -> Any:
        raise GpsimdShapeFunctionError(
            "the shape function may not read tensor data (inputs have no storage at compile time); "
            "use numel(), sizes() and dtype only"
        )

    accessor = read_stream = write_stream = tcm_accessor = fill_ = _no_data
    read_stream_accessor = write_stream_accessor = item = data_ptr = _no_data

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        self._no_data()

    def __getitem__(self, key: Any) -> Any:
        self._no_data()

    def __repr__(self) -> str:
        return f"ShapeTensor({list(self._sizes)}, {self.dtype.name})"


def zeros(sizes: Any, dtype: Any) -> ShapeTensor:
    """The output description a shape function returns (``torch::zeros(sizes, dtype)``)."""
    return ShapeTensor(_sizes_arg(sizes), check_dtype(dtype, "the shape function's tensor"))


def empty(sizes: Any, dtype: Any) -> ShapeTensor:
    """Same as :func:`zeros` (a shape function's tensors have no data)."""
    return ShapeTensor(_sizes_arg(sizes), check_dtype(dtype, "the shape function's tensor"))


class DeviceTensor:
    """A tensor in HBM inside a kernel. Reach its data through the accessors."""

    def __init__(self, data: np.ndarray, core: Core, *, is_dst: bool = False) -> None:
        self._data = data
        self._flat = data.reshape(-1)
        self._core = core
        self._is_dst = is_dst
        self._policy = CoherencePolicy.COHERENT
        self._open_streams: list[_Stream] = []
        self._standard = False
        self.dtype = data.dtype

    # -- shape --------------------------------------------------------------------------

    def sizes(self) -> tuple[int, ...]:
        """The sizes of each dimension."""
        return self._data.shape

    def size(self, dim: int) -> int:
        return self._data.shape[dim]

    def dim(self) -> int:
        return self._data.ndim

    def numel(self) -> int:
        """The number of elements."""
        return self._data.size

    def scalar_type(self) -> np.dtype:
        return self.dtype

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise GpsimdUndefinedBehavior(
            "a kernel reaches tensor data through accessor(), read_stream()/write_stream() or tcm_accessor()",
            loc=user_location(),
            op=self._core.op,
            core=self._core.id,
        )

    def __repr__(self) -> str:
        return f"DeviceTensor({list(self.sizes())}, {self.dtype.name})"

    # -- coherence ----------------------------------------------------------------------

    def set_accessor_coherence_policy(self, policy: CoherencePolicy) -> None:
        """Choose what mixing accessors incoherently does: error, warning, or nothing."""
        self._policy = CoherencePolicy(policy)

    def get_accessor_coherence_policy(self) -> CoherencePolicy:
        return self._policy

    def _incoherent(self, rule: str, loc: SourceLoc) -> None:
        if self._policy is CoherencePolicy.COHERENT:
            raise GpsimdCoherenceError(
                f"{rule}: not coherent (stream accessors cache in TCM; use many readers or one writer per "
                "tensor and do not mix them with the standard accessor), or set_accessor_coherence_policy",
                loc=loc,
                op=self._core.op,
                core=self._core.id,
            )
        if self._policy is CoherencePolicy.INCOHERENT_VERBOSE:
            warnings.warn(f"{loc}: gpsimd {self._core.op}: {rule}: incoherent access", stacklevel=3)

    def _single_core_only(self, what: str, loc: SourceLoc) -> None:
        core = self._core
        if core.count > 1:
            raise GpsimdUndefinedBehavior(
                f"{what} in multicore mode is undefined behaviour (cores race on it); "
                "only the TCM accessor may be used with multicore=True",
                loc=loc,
                op=core.op,
                core=core.id,
            )

    # -- accessors ----------------------------------------------------------------------

    def accessor(self) -> ElementAccessor:
        """The standard element accessor: ``acc[i]`` reads, ``acc[i] = v`` writes (slow path)."""
        loc = user_location()
        self._single_core_only("the standard accessor", loc)
        if self._open_streams:
            self._incoherent("a standard accessor on a tensor with an open stream accessor", loc)
        self._standard = True
        return ElementAccessor(self)

    def read_stream(self) -> ReadStream:
        """A sequential reader (``TensorReadStreamAccessor``): ``read()``, ``close()``."""
        loc = user_location()
        self._single_core_only("a stream accessor", loc)
        if self._standard or any(isinstance(s, WriteStream) for s in self._open_streams):
            self._incoherent("a read stream on a tensor with a standard accessor or an open write stream", loc)
        return ReadStream(self, loc)

    def write_stream(self) -> WriteStream:
        """A sequential writer (``TensorWriteStreamAccessor``): ``write(v)``, ``close()`` flushes."""
        loc = user_location()
        self._single_core_only("a stream accessor", loc)
        if self._standard or self._open_streams:
            self._incoherent("a write stream on a tensor with another open accessor", loc)
        return WriteStream(self, loc)

    read_stream_accessor = read_stream
    write_stream_accessor = write_stream

    def tcm_accessor(self) -> TcmAccessor:
        """Bulk copies between this tensor (flattened) and TCM buffers (the fast path; multicore-safe)."""
        return TcmAccessor(self)

    def fill_(self, value: Any) -> DeviceTensor:
        """Set every element to ``value``."""
        self._core.aten_elements += self._data.size
        self._flat[...] = _scalar_value(value)
        if self._is_dst:
            self._core.dst_writes.append((0, self._data.size, user_location()))
        return self


def _scalar_value(value: Any) -> Any:
    return value.value if hasattr(value, "value") and not isinstance(value, np.ndarray) else value


class ElementAccessor:
    """``TensorAccessor<T, N>``: element reads and writes straight to HBM (the low-bandwidth path)."""

    __slots__ = ("_array", "_core", "_one_d", "_shape", "_tensor")

    def __init__(self, tensor: DeviceTensor) -> None:
        self._tensor = tensor
        self._array = tensor._data
        self._core = tensor._core
        self._shape = tensor._data.shape
        self._one_d = len(self._shape) == 1

    def _check(self, key: Any) -> None:
        keys = key if isinstance(key, tuple) else (key,)
        if len(keys) != len(self._shape) or any(
            not isinstance(k, (int, np.integer)) or not 0 <= k < n for k, n in zip(keys, self._shape)
        ):
            raise GpsimdBoundsError(
                f"accessor index {key!r} is outside the tensor's sizes {list(self._shape)} "
                f"(give {len(self._shape)} integer indices, each in [0, size))",
                loc=user_location(),
                op=self._core.op,
                core=self._core.id,
            )

    def __getitem__(self, key: Any) -> Any:
        if not (self._one_d and type(key) is int and 0 <= key < self._shape[0]):
            self._check(key)
        self._core.element_accesses += 1
        return self._array[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        if not (self._one_d and type(key) is int and 0 <= key < self._shape[0]):
            self._check(key)
        self._array[key] = value
        self._core.element_accesses += 1

    def __len__(self) -> int:
        return self._shape[0] if self._shape else 0


class _Stream:
    """What read and write streams share: position, the TCM buffer, close()."""

    def __init__(self, tensor: DeviceTensor, loc: SourceLoc) -> None:
        self._tensor = tensor
        self._core = tensor._core
        self._flat = tensor._flat
        self._n = tensor._flat.size
        self._pos = 0
        self._closed = False
        self._loc = loc
        core = self._core
        fast = sum(1 for s in core.open_streams if s._buffer is not None) < core.cfg.fast_streams
        self._buffer = core.tcm_reserve(core.cfg.stream_buffer_bytes) if fast else None
        tensor._open_streams.append(self)
        core.open_streams.append(self)

    @property
    def fast(self) -> bool:
        """Whether this stream got a TCM buffer (else it runs at standard-accessor speed)."""
        return self._buffer is not None

    def _charge(self) -> None:
        if self._buffer is not None:
            self._core.stream_accesses += 1
        else:
            self._core.element_accesses += 1

    def _fail(self, rule: str) -> None:
        raise GpsimdStreamError(rule, loc=user_location(), op=self._core.op, core=self._core.id)

    def close(self) -> int:
        """Flush (write streams) and give the TCM buffer back; returns 0."""
        if self._closed:
            self._fail("close() of a stream accessor that is already closed")
        self._finish(user_location())
        return 0

    def _finish(self, loc: SourceLoc) -> None:
        self._closed = True
        core = self._core
        if self._buffer is not None:
            core.tcm_release(self._buffer)
        self._tensor._open_streams.remove(self)
        core.open_streams.remove(self)
        core.flush(loc)


class ReadStream(_Stream):
    """``TensorReadStreamAccessor<T>``: ``read()`` returns the next element of the flattened tensor."""

    def read(self) -> Any:
        if self._closed:
            self._fail("read() on a closed stream accessor")
        pos = self._pos
        if pos >= self._n:
            self._fail(f"read() past the end of the stream ({self._n} elements)")
        self._pos = pos + 1
        self._charge()
        return self._flat[pos]


class WriteStream(_Stream):
    """``TensorWriteStreamAccessor<T>``: ``write(v)`` appends; data reaches the tensor on ``close()``."""

    def __init__(self, tensor: DeviceTensor, loc: SourceLoc) -> None:
        super().__init__(tensor, loc)
        self._staged = np.empty(self._n, dtype=tensor.dtype)

    def write(self, value: Any) -> None:
        if self._closed:
            self._fail("write() on a closed stream accessor")
        pos = self._pos
        if pos >= self._n:
            self._fail(f"write() past the end of the stream ({self._n} elements)")
        self._staged[pos] = value
        self._pos = pos + 1
        self._charge()

    def _finish(self, loc: SourceLoc) -> None:
        self._flat[: self._pos] = self._staged[: self._pos]
        if self._tensor._is_dst and self._pos:
            self._core.dst_writes.append((0, self._pos, loc))
        super()._finish(loc)


class TcmAccessor:
    """``TensorTcmAccessor``: ``tensor_to_tcm`` / ``tcm_to_tensor`` on flattened element offsets."""

    def __init__(self, tensor: DeviceTensor) -> None:
        self._tensor = tensor
        self._core = tensor._core
        self._numel = tensor._flat.size
        self._checked_buf: Any = None
        self._checked_size = 0
        self._checked_dtype: Any = None

    def _check(self, what: str, buf: Any, offset: int, count: int, loc: SourceLoc) -> None:
        core, tensor = self._core, self._tensor
        if not core.is_tcm(buf):
            raise GpsimdUndefinedBehavior(
                f"{what}: the buffer is not TCM memory from this core's tcm_malloc", loc=loc, op=core.op, core=core.id
            )
        if buf.dtype != tensor.dtype:
            raise GpsimdArgumentError(
                f"{what}: TCM buffer of {buf.dtype.name} for a {tensor.dtype.name} tensor",
                loc=loc,
                op=core.op,
                core=core.id,
            )
        if count < 0 or offset < 0:
            raise GpsimdBoundsError(
                f"{what}: negative offset {offset} or count {count}", loc=loc, op=core.op, core=core.id
            )
        if count > buf.size:
            raise GpsimdBoundsError(
                f"{what}: {count} elements do not fit the {buf.size}-element TCM buffer",
                loc=loc,
                op=core.op,
                core=core.id,
            )
        if offset + count > tensor.numel():
            raise GpsimdBoundsError(
                f"{what}: elements {offset}..{offset + count - 1} reach past the end of the tensor "
                f"({tensor.numel()} elements)",
                loc=loc,
                op=core.op,
                core=core.id,
            )

    def _fast(self, buf: Any, offset: int, count: int) -> bool:
        """The common, legal case, checked cheaply (anything else goes through :meth:`_check`).

        A buffer that passed the type checks once is remembered (the last one), so a loop of
        transfers through the same buffer only checks its offsets and counts.
        """
        if buf is not self._checked_buf or buf.dtype is not self._checked_dtype:
            if not (
                type(buf) is ChargedArray
                and buf._core is self._core
                and buf._kind == "tcm"
                and buf.dtype == self._tensor.dtype
            ):
                return False
            self._checked_buf, self._checked_size, self._checked_dtype = buf, buf.size, buf.dtype
        return (
            type(offset) is int
            and type(count) is int
            and offset >= 0
            and 0 <= count <= self._checked_size
            and offset + count <= self._numel
        )

    def tensor_to_tcm(self, buf: Any, offset: int, count: int) -> None:
        """Copy ``count`` elements from flattened offset ``offset`` of the tensor into ``buf``."""
        loc = caller_location()
        if not self._fast(buf, offset, count):
            offset, count = int(offset), int(count)
            self._check("tensor_to_tcm", buf, offset, count, loc)
        buf.view(np.ndarray)[:count] = self._tensor._flat[offset : offset + count]
        self._core.transfer("tensor_to_tcm", count * buf.itemsize, count, loc)

    def tcm_to_tensor(self, buf: Any, offset: int, count: int) -> None:
        """Copy the first ``count`` elements of ``buf`` to flattened offset ``offset`` of the tensor."""
        loc = caller_location()
        if not self._fast(buf, offset, count):
            offset, count = int(offset), int(count)
            self._check("tcm_to_tensor", buf, offset, count, loc)
        self._tensor._flat[offset : offset + count] = buf.view(np.ndarray)[:count]
        if self._tensor._is_dst and count:
            self._core.dst_writes.append((offset, offset + count, loc))
        self._core.transfer("tcm_to_tensor", count * buf.itemsize, count, loc)
