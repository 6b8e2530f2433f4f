"""The scheduled program as compact columns: about 50 bytes per instruction.

A kernel issues the same few instructions from the same few lines many times over, so
what an instruction shares with others issued from its line with the same operands (its
opcode, source location, bytes, flops and operand summary) is kept once, as a
:class:`Site`, and each instruction holds the site's number. Times and the indices of
other instructions are typed columns (``array.array``: 8 bytes a time, 4 an index), and
track names are numbered in the order they first appear.

Sites are told apart strictly: ``1`` and ``1.0``, ``0.0`` and ``-0.0``, ``nl.add`` and
the isa operator it equals, float32 and tfloat32 (equal numpy dtypes) are different
operands, so every instruction reads back exactly the values it was given.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable
from typing import NamedTuple

import numpy as np

from nkisim.errors import SourceLoc

#: An instruction's operands as ``(argument, value)`` pairs, tensors as ``(buffer, dtype, shape)``.
Operands = tuple[tuple[str, object], ...]


class Site(NamedTuple):
    """What the instructions issued from one kernel line with the same operands share.

    Attributes:
        opcode: the instruction name.
        file, line, function: the kernel call that issued them (:attr:`source`).
        bytes: bytes moved (DMA).
        flops: floating-point operations (Tensor Engine).
        args: the operands, as ``(argument, value)`` pairs with tensors described by
            ``(buffer, dtype, shape)`` (no tensor objects, which would hold memory).
    """

    opcode: str
    file: str
    line: int
    function: str
    bytes: int
    flops: float
    args: Operands

    @property
    def source(self) -> SourceLoc:
        """The kernel call that issued the instructions."""
        return SourceLoc(self.file, self.line, self.function)


class Column(array):  # type: ignore[type-arg]
    """A typed column (``array.array``) that also compares equal to a list of the same values."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return self.tolist() == other
        return super().__eq__(other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]


class Timeline:
    """The scheduled program, one entry per instruction in program order.

    Per instruction: ``start_ns``, ``end_ns``, ``busy_ns`` (time it occupied its engine or
    DMA engines), ``wait_ns`` (time its engine or queue sat idle waiting for its
    producers), ``producer`` (the instruction it waited for last, -1: none), ``pred``
    (what set its start: the producer when data was late, else the previous instruction
    on its track; -1: none), ``track_id`` (into :attr:`tracks`) and ``site_id`` (into
    :attr:`sites`), each a :class:`Column`. The properties ``opcode``, ``track``,
    ``source``, ``bytes``, ``flops`` and ``args`` give those values as lists, one entry
    per instruction.
    """

    def __init__(self) -> None:
        self.start_ns = Column("d")
        self.end_ns = Column("d")
        self.busy_ns = Column("d")
        self.wait_ns = Column("d")
        self.producer = Column("i")
        self.pred = Column("i")
        self.track_id = Column("i")
        self.site_id = Column("i")
        #: Track names (``Vector``, ``DMA q3``, ``GpSimd 2``), numbered in order of first use.
        self.tracks: list[str] = []
        self._track_ids: dict[str, int] = {}
        #: What instructions share, numbered in order of first use.
        self.sites: list[Site] = []
        self._site_ids: dict[tuple[object, ...], int | list[int]] = {}
        self._pairs: dict[tuple[object, ...], tuple[str, object]] = {}

    def __len__(self) -> int:
        return len(self.start_ns)

    def track_number(self, name: str) -> int:
        """The number of track ``name``, given it if it is new."""
        number = self._track_ids.get(name)
        if number is None:
            number = self._track_ids[name] = len(self.tracks)
            self.tracks.append(name)
        return number

    def known_track(self, name: str) -> int | None:
        """The number of track ``name`` if an instruction ran on it, else None."""
        return self._track_ids.get(name)

    def append(
        self,
        opcode: str,
        track: int,
        start: float,
        end: float,
        busy: float,
        wait: float,
        source: SourceLoc,
        producer: int,
        pred: int,
        nbytes: int,
        flops: float,
        args: Operands = (),
        site: int | None = None,
    ) -> None:
        """Add one instruction (``track`` is a :meth:`track_number`; ``site``, if given, the :meth:`site_number`
        of its opcode, source, bytes, flops and operands)."""
        self.start_ns.append(start)
        self.end_ns.append(end)
        self.busy_ns.append(busy)
        self.wait_ns.append(wait)
        self.producer.append(producer)
        self.pred.append(pred)
        self.track_id.append(track)
        self.site_id.append(self._site(opcode, source, nbytes, flops, args) if site is None else site)

    def extend(self, times: np.ndarray, indices: np.ndarray, sites: np.ndarray | list[int]) -> None:
        """Add instructions placed together: ``times`` rows of (start, end, busy, wait, ...), ``indices`` rows of
        (producer, pred, track), and their :meth:`site_number` each."""
        for column, values in zip((self.start_ns, self.end_ns, self.busy_ns, self.wait_ns), times.T[:4], strict=True):
            column.frombytes(np.ascontiguousarray(values).tobytes())
        for column, values in zip((self.producer, self.pred, self.track_id), indices.T, strict=True):
            column.frombytes(values.astype(np.int32).tobytes())
        self.site_id.frombytes(np.asarray(sites, dtype=np.int32).tobytes())

    def site_number(self, opcode: str, source: SourceLoc, nbytes: int, flops: float, args: Operands) -> int:
        """The number of the site of these values, made if it is new (see :class:`Site`)."""
        return self._site(opcode, source, nbytes, flops, args)

    def _site(self, opcode: str, source: SourceLoc, nbytes: int, flops: float, args: Operands) -> int:
        """The number of the site these values belong to, made if it is new.

        Sites are found by equality (one hash of the values) and then told apart strictly
        (:func:`_same`); the few sites equal to one another are listed under one key. A new
        site shares each ``(argument, value)`` pair but numbers with the sites before it,
        so a site that differs from another in one scalar costs little more than that scalar.
        """
        # the location by its fields: a SourceLoc is made at every call, and comparing two is slower
        key = (opcode, source.file, source.line, source.function, nbytes, flops, args)
        try:
            found = self._site_ids.get(key)
        except TypeError:  # an operand that cannot be hashed (an array): told apart by identity
            key = (*key[:-1], _by_identity(args))
            found = self._site_ids.get(key)
        sites = self.sites
        if found is not None:
            for number in (found,) if found.__class__ is int else found:  # type: ignore[union-attr]
                site = sites[number]
                if (
                    site.bytes.__class__ is nbytes.__class__
                    and site.flops.__class__ is flops.__class__
                    and _same(args, site.args)
                ):
                    return number
        number = len(sites)
        site = Site(opcode, source.file, source.line, source.function, nbytes, flops, self._shared(args))
        sites.append(site)
        if key[-1] is args:
            key = site  # equal to the key, and kept anyway
        if found is None:
            self._site_ids[key] = number
        elif found.__class__ is int:
            self._site_ids[key] = [found, number]  # type: ignore[list-item]
        else:
            found.append(number)  # type: ignore[union-attr]
        return number

    def _shared(self, args: Operands) -> Operands:
        """``args`` made of the ``(argument, value)`` pairs already kept that are the same values.

        Numbers are left out: one that changes from call to call would only add its key.
        """
        pairs = self._pairs
        out = []
        for pair in args:
            name, value = pair
            cls = value.__class__
            if cls is int or cls is float or isinstance(value, np.number):
                out.append(pair)
                continue
            try:
                out.append(pairs.setdefault(_pair_key(name, value), pair))
            except TypeError:  # a value that cannot be hashed is kept as it is
                out.append(pair)
        return tuple(out)

    # -- per-instruction values as lists -------------------------------------------------

    def _per_instruction(self, values: list[object]) -> list[object]:
        return [values[i] for i in self.site_id]

    @property
    def opcode(self) -> list[str]:
        """Each instruction's opcode."""
        return self._per_instruction([s.opcode for s in self.sites])  # type: ignore[return-value]

    @property
    def track(self) -> list[str]:
        """The track each instruction ran on."""
        tracks = self.tracks
        return [tracks[i] for i in self.track_id]

    @property
    def source(self) -> list[SourceLoc]:
        """The kernel call that issued each instruction."""
        return self._per_instruction([s.source for s in self.sites])  # type: ignore[return-value]

    @property
    def bytes(self) -> list[int]:
        """Bytes each instruction moved."""
        return self._per_instruction([s.bytes for s in self.sites])  # type: ignore[return-value]

    @property
    def flops(self) -> list[float]:
        """Floating-point operations of each instruction."""
        return self._per_instruction([s.flops for s in self.sites])  # type: ignore[return-value]

    @property
    def args(self) -> list[Operands]:
        """Each instruction's operand summary (see :attr:`Site.args`)."""
        return self._per_instruction([s.args for s in self.sites])  # type: ignore[return-value]

    def column(self, name: str) -> np.ndarray:
        """A numeric column as a numpy array that shares its memory (the timeline cannot grow while it is held)."""
        values = getattr(self, name)
        return np.frombuffer(values, dtype=np.float64 if values.typecode == "d" else np.int32)

    # -- whole-timeline edits ------------------------------------------------------------

    def rename_tracks(self, rename: Callable[[str], str]) -> None:
        """Give every track a new name; tracks that get the same name become one."""
        old = self.tracks
        self.tracks, self._track_ids = [], {}
        numbers = [self.track_number(rename(name)) for name in old]
        if numbers != list(range(len(old))):
            self.track_id = Column("i", (numbers[i] for i in self.track_id))

    @classmethod
    def side_by_side(cls, timelines: Iterable[Timeline], prefixes: Iterable[str]) -> Timeline:
        """Timelines one after the other, each one's track names prefixed; indices shifted to match."""
        merged = cls()
        for tl, prefix in zip(timelines, prefixes, strict=True):
            shift = len(merged)
            tracks = [merged.track_number(prefix + name) for name in tl.tracks]
            sites = [merged._site(s.opcode, s.source, s.bytes, s.flops, s.args) for s in tl.sites]
            for column in ("start_ns", "end_ns", "busy_ns", "wait_ns"):
                getattr(merged, column).extend(getattr(tl, column))
            for column in ("producer", "pred"):
                getattr(merged, column).extend(i + shift if i >= 0 else i for i in getattr(tl, column))
            merged.track_id.extend(tracks[i] for i in tl.track_id)
            merged.site_id.extend(sites[i] for i in tl.site_id)
        return merged


def _same(new: Operands, old: Operands) -> bool:
    """Whether operands already known to be equal are also the same values (``1`` is not ``1.0``).

    Equal operand summaries have the same names and equal values; they differ only where
    Python calls different values equal: another type (``1`` and ``1.0`` and ``True``, an
    isa operator and the ``nl`` constant equal to it), the sign of a zero, or dtypes that
    differ only in their metadata (float32 and tfloat32).
    """
    for (_, x), (_, y) in zip(new, old):
        if x is y:
            continue
        cls = x.__class__
        if cls is not y.__class__:
            return False
        if cls is tuple:
            if len(x) == 3 and x[1] is y[1] and x[2].__class__ is tuple:  # type: ignore[arg-type, index]
                continue  # a tensor's (buffer, dtype, shape) with the very same dtype
            if repr(x) != repr(y) or _metadata(x) != _metadata(y):
                return False
        elif (cls is float or isinstance(x, np.floating)) and math.copysign(1.0, x) != math.copysign(1.0, y):  # type: ignore[arg-type]
            return False
    return True


def _metadata(value: tuple[object, ...]) -> object:
    """The metadata of the dtype in a tensor's ``(buffer, dtype, shape)`` (tfloat32's tells it from float32)."""
    dtype = value[1] if len(value) == 3 else None
    return dtype.metadata if isinstance(dtype, np.dtype) else None


def _pair_key(name: str, value: object) -> tuple[object, ...]:
    """A key that tells apart ``(argument, value)`` pairs that Python calls equal (see :func:`_same`)."""
    cls = value.__class__
    if cls is tuple and len(value) == 3 and value[2].__class__ is tuple:  # type: ignore[arg-type]
        buffer, dtype, shape = value  # type: ignore[misc]
        return (name, buffer, id(dtype), shape)  # the kept pair keeps the dtype, so the identity stays its own
    if cls is tuple:
        return (name, cls, repr(value))
    return (name, cls, value)


def _by_identity(args: Operands) -> Operands:
    """``args`` with each value that cannot be hashed replaced by its identity (its site keeps it alive)."""
    return tuple((name, id(value) if value.__class__.__hash__ is None else value) for name, value in args)
