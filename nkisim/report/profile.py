"""Profiles: where a kernel's simulated time goes, as numbers, text and traces."""

from __future__ import annotations

import gzip
import json
import operator
import os
from array import array
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import overload

import numpy as np

from nkisim.errors import Diagnostic
from nkisim.hw import HwConfig
from nkisim.memory.dtypes import dtype_name
from nkisim.report import analysis
from nkisim.report.html import write_html
from nkisim.report.tracks import ENGINE_ORDER, split_core, track_key
from nkisim.sim import Timeline


@dataclass(frozen=True, slots=True)
class InstructionRecord:
    """One executed instruction on the timeline.

    Attributes:
        index: position in program order.
        opcode: the instruction name (``tensor_tensor``, ``dma_copy``, ...).
        engine: the engine or DMA queue it ran on (``Vector``, ``DMA q3``, ...).
        start_ns, end_ns: when it started and finished (a compute engine's results are readable an
            SBUF/PSUM access latency later; a DMA's end is when its last engine is done).
        source: ``file:line`` of the kernel call that issued it.
        producer: index of the instruction it waited for last, or -1.
        bytes: bytes moved (DMA).
        flops: floating-point operations (Tensor Engine).
    """

    index: int
    opcode: str
    engine: str
    start_ns: float
    end_ns: float
    source: str
    producer: int
    bytes: int
    flops: float

    @property
    def duration_ns(self) -> float:
        return self.end_ns - self.start_ns


class InstructionList(Sequence[InstructionRecord]):
    """A timeline's instructions as :class:`InstructionRecord` values, made when read.

    Indexing, slicing, iteration, ``len`` and comparison with a list work as on a list;
    no record is kept, so a long timeline costs nothing until its records are read.
    """

    def __init__(self, timeline: Timeline) -> None:
        self._tl = timeline
        self._sites: list[tuple[str, str, int, float]] | None = None

    def _site_values(self) -> list[tuple[str, str, int, float]]:
        if self._sites is None or len(self._sites) != len(self._tl.sites):
            self._sites = [(s.opcode, str(s.source), s.bytes, s.flops) for s in self._tl.sites]
        return self._sites

    def __len__(self) -> int:
        return len(self._tl)

    @overload
    def __getitem__(self, index: int) -> InstructionRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[InstructionRecord]: ...

    def __getitem__(self, index: int | slice) -> InstructionRecord | list[InstructionRecord]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        count = len(self._tl)
        i = operator.index(index)
        if i < 0:
            i += count
        if not 0 <= i < count:
            raise IndexError("instruction index out of range")
        tl = self._tl
        opcode, source, nbytes, flops = self._site_values()[tl.site_id[i]]
        track = tl.tracks[tl.track_id[i]]
        return InstructionRecord(i, opcode, track, tl.start_ns[i], tl.end_ns[i], source, tl.producer[i], nbytes, flops)

    def __iter__(self) -> Iterator[InstructionRecord]:
        tl = self._tl
        sites, tracks = self._site_values(), tl.tracks
        columns = zip(tl.site_id, tl.track_id, tl.start_ns, tl.end_ns, tl.producer)
        for i, (site, track, start, end, producer) in enumerate(columns):
            opcode, source, nbytes, flops = sites[site]
            yield InstructionRecord(i, opcode, tracks[track], start, end, source, producer, nbytes, flops)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, InstructionList)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(list(self))


class Profile:
    """The simulated timeline of one kernel run.

    Attributes:
        hw: the hardware generation simulated (a packaged one or a custom ``HwConfig``).
        target: its name.
        reference_clock_ghz: the clock at which ``total_cycles`` is counted.
        kernel: the name of the kernel function.
        diagnostics: the sanitizer's findings (:class:`~nkisim.errors.Diagnostic`), empty under ``check="off"``.
    """

    def __init__(
        self, timeline: Timeline, hw: HwConfig, kernel: str = "", diagnostics: Sequence[Diagnostic] = ()
    ) -> None:
        self._tl = timeline
        #: The sanitizer's findings (``check="strict"`` or ``"warn"``), one per check and kernel line.
        self.diagnostics: tuple[Diagnostic, ...] = tuple(diagnostics)
        self.hw = hw
        self.target = hw.name
        self.reference_clock_ghz = hw.reference_clock_ghz
        self.kernel = kernel

    @property
    def timeline(self) -> Timeline:
        """The scheduled program as compact columns (:class:`~nkisim.sim.Timeline`)."""
        return self._tl

    @cached_property
    def instructions(self) -> InstructionList:
        """Every instruction, in program order (a sequence of :class:`InstructionRecord`, made when read)."""
        return InstructionList(self._tl)

    @property
    def instruction_count(self) -> int:
        return len(self._tl)

    @cached_property
    def total_ns(self) -> float:
        """From the start to the end of the last instruction (the kernel's latency)."""
        return float(self._tl.column("end_ns").max()) if len(self._tl) else 0.0

    @property
    def launch_overhead_ns(self) -> float:
        """The NEFF execution's start-up and tear-down around the kernel (``hw.launch``), not in ``total_ns``."""
        return self.hw.launch.overhead_ns

    @property
    def device_ns(self) -> float:
        """``total_ns`` plus the launch overhead: the execution time a device profile of one run reports."""
        return self.total_ns + self.launch_overhead_ns

    @property
    def total_cycles(self) -> int:
        """``total_ns`` in cycles of the target's reference clock."""
        return round(self.total_ns * self.reference_clock_ghz)

    @cached_property
    def cores(self) -> tuple[str, ...]:
        """Track-name prefixes of the NeuronCores (``("",)``; with ``kernel[2]``, ``("core0 ", "core1 ")``)."""
        return tuple(sorted({split_core(track)[0] for track in self._used_tracks()})) or ("",)

    def _used_tracks(self) -> list[str]:
        """The tracks instructions ran on, in order of first use."""
        counts = self._track_counts()
        return [track for track, count in zip(self._tl.tracks, counts) if count]

    def _track_counts(self) -> list[int]:
        return np.bincount(self._tl.column("track_id"), minlength=len(self._tl.tracks)).tolist()

    @cached_property
    def engine_busy_ns(self) -> dict[str, float]:
        """Time each engine spent executing; ``DMA`` is the time any DMA transfer was under way.

        With several cores, keys are prefixed by the core: ``core0 Vector``, ``core1 DMA``.
        """
        busy = {core + name: 0.0 for core in self.cores for name in ENGINE_ORDER}
        tl = self._tl
        track_id, busy_ns = tl.column("track_id"), tl.column("busy_ns")
        per_track = np.bincount(track_id, weights=busy_ns, minlength=len(tl.tracks)).tolist()
        dma_tracks: dict[str, list[int]] = {core: [] for core in self.cores}
        for number, (track, count) in enumerate(zip(tl.tracks, self._track_counts())):
            core, engine = split_core(track)
            if not count:
                continue
            if engine.startswith("DMA"):
                dma_tracks[core].append(number)
            else:
                busy[track] = busy.get(track, 0.0) + per_track[number]  # a unit track (GpSimd 3) adds its own key
        end = tl.column("end_ns")
        for core in self.cores:
            mine = np.isin(track_id, dma_tracks[core])
            busy[core + "DMA"] = _union_length(end[mine] - busy_ns[mine], end[mine])
        return busy

    @cached_property
    def queue_busy_ns(self) -> dict[str, float]:
        """Time each DMA queue had a transfer outstanding."""
        tl = self._tl
        duration = tl.column("end_ns") - tl.column("start_ns")
        per_track = np.bincount(tl.column("track_id"), weights=duration, minlength=len(tl.tracks)).tolist()
        return {
            track: per_track[number]
            for number, (track, count) in enumerate(zip(tl.tracks, self._track_counts()))
            if count and track.startswith("DMA")
        }

    def engine_utilisation(self) -> dict[str, float]:
        """Busy time of each engine as a fraction of the kernel's total time."""
        total = self.total_ns or 1.0
        return {name: ns / total for name, ns in self.engine_busy_ns.items()}

    @cached_property
    def mfu(self) -> float:
        """Model FLOPs utilisation: Tensor Engine flops over its bf16 peak for the kernel's time."""
        if not self.total_ns:
            return 0.0
        return self._site_sum("flops") / (analysis.peak_flops_per_ns(self.hw) * len(self.cores) * self.total_ns)

    @cached_property
    def dma_bandwidth_utilisation(self) -> float:
        """Bytes moved by DMA over what the core's DMA bandwidth could move in the kernel's time."""
        if not self.total_ns:
            return 0.0
        return self._site_sum("bytes") / (self.hw.dma.bytes_per_ns * len(self.cores) * self.total_ns)

    @cached_property
    def spill_save_bytes(self) -> int:
        """Bytes the compiler's spill saves moved from SBUF to device memory (the profiler's ``spill_save_bytes``)."""
        return self._opcode_bytes("spill_save")

    @cached_property
    def spill_reload_bytes(self) -> int:
        """Bytes the compiler's spill refills moved from device memory to SBUF (``spill_reload_bytes``)."""
        return self._opcode_bytes("spill_reload")

    def _opcode_bytes(self, opcode: str) -> int:
        """The bytes of the instructions named ``opcode``, summed."""
        per_site = [site.bytes if site.opcode == opcode else 0 for site in self._tl.sites]
        if not any(per_site):
            return 0
        return int(sum(map(per_site.__getitem__, self._tl.site_id)))

    def _site_sum(self, name: str) -> float:
        """A site value summed over the instructions in program order (the float a loop gives)."""
        values = [getattr(site, name) for site in self._tl.sites]
        return sum(map(values.__getitem__, self._tl.site_id))

    @cached_property
    def _critical(self) -> array[int]:
        return array("i", analysis.critical_path(self._tl))

    @property
    def critical_path(self) -> list[InstructionRecord]:
        """The chain of instructions that sets the total time, first to last."""
        return [self.instructions[i] for i in self._critical]

    @cached_property
    def critical_ns_by_engine(self) -> dict[str, float]:
        """Time on the critical path spent in each engine (``DMA`` for all queues)."""
        return analysis.critical_time_by_engine(self._tl, list(self._critical))

    @property
    def bottleneck(self) -> str:
        """The engine (or ``DMA``) that makes up most of the critical path."""
        spent = self.critical_ns_by_engine
        return max(spent, key=spent.__getitem__) if spent else ""

    @cached_property
    def semaphore_wait_ns(self) -> dict[str, float]:
        """Time each engine sat idle waiting for its producers (``DMA``: summed over queues)."""
        return analysis.wait_by_engine(self._tl)

    def line_costs(self) -> list[analysis.LineCost]:
        """Per kernel line: instructions, busy time, waits and critical-path share, costliest first."""
        return analysis.line_costs(self._tl, list(self._critical))

    def table(self, lines: int = 10) -> str:
        """A readable report: the summary, utilisation, the bottleneck and the costliest kernel lines."""
        out = [self.summary(), ""]
        out.append(
            f"  MFU {100 * self.mfu:.1f}%   DMA bandwidth {100 * self.dma_bandwidth_utilisation:.1f}%   "
            f"bound by {self.bottleneck or '-'}"
        )
        critical = self.critical_ns_by_engine
        total = self.total_ns or 1.0
        shares = ", ".join(
            f"{name} {100 * ns / total:.0f}%" for name, ns in sorted(critical.items(), key=lambda kv: -kv[1])
        )
        out.append(f"  critical path: {len(self._critical)} instructions ({shares})")
        waits = {k: v for k, v in self.semaphore_wait_ns.items() if v > 0}
        if waits:
            out.append("  waiting on semaphores: " + ", ".join(f"{k} {v / 1000:.3f} us" for k, v in waits.items()))
        out.append("")
        out.append(f"  {'kernel line':<28}{'instrs':>8}{'busy us':>11}{'wait us':>10}{'critical %':>12}  engines")
        for cost in self.line_costs()[:lines]:
            engines = ", ".join(f"{e} {ns / 1000:.2f}" for e, ns in sorted(cost.engines.items(), key=lambda kv: -kv[1]))
            out.append(
                f"  {cost.source:<28}{cost.instructions:>8}{cost.busy_ns / 1000:>11.3f}{cost.wait_ns / 1000:>10.3f}"
                f"{100 * cost.critical_ns / total:>11.1f}%  {engines}"
            )
        return "\n".join(out)  # the summary at the top lists the sanitizer's findings

    def diagnostics_text(self) -> str:
        """The sanitizer's findings, one line each (empty when there are none)."""
        if not self.diagnostics:
            return ""
        errors = sum(d.severity == "error" for d in self.diagnostics)
        head = f"  sanitizer: {errors} errors, {len(self.diagnostics) - errors} warnings"
        return "\n".join([head, *(f"    {d}" for d in self.diagnostics)])

    def summary(self) -> str:
        """A short text report: total time, per-engine busy %, instruction counts."""
        counts: dict[str, int] = defaultdict(int)
        for track, count in zip(self._tl.tracks, self._track_counts()):
            core, engine = split_core(track)
            counts[core + "DMA" if engine.startswith("DMA") else track] += count
        width = 8 + len(self.cores[0])
        lines = [
            f"{self.kernel + ' on ' if self.kernel else ''}target {self.target}: {self.total_ns / 1000:.3f} us "
            f"({self.total_cycles} cycles at {self.reference_clock_ghz} GHz), "
            f"{self.instruction_count} instructions",
            f"  {'engine':<{width}}{'busy us':>12}{'busy %':>9}{'instrs':>9}",
        ]
        for name, frac in self.engine_utilisation().items():
            ns = self.engine_busy_ns[name]
            lines.append(f"  {name:<{width}}{ns / 1000:>12.3f}{100 * frac:>8.1f}%{counts.get(name, 0):>9}")
        if self.spill_save_bytes or self.spill_reload_bytes:
            lines.append(
                f"  spills: spill_save_bytes {self.spill_save_bytes}, spill_reload_bytes {self.spill_reload_bytes}"
            )
        if self.diagnostics:
            lines.append(self.diagnostics_text())
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def to_html(self, path: str | os.PathLike[str]) -> None:
        """Write a self-contained HTML page with an SVG engine timeline and the report table."""
        write_html(self, path)

    def to_perfetto(self, path: str | os.PathLike[str]) -> None:
        """Write a Chrome/Perfetto trace JSON: one track per engine and per DMA queue.

        Open it at ui.perfetto.dev or chrome://tracing. Times are in microseconds. A path
        ending in ``.gz`` is written gzip-compressed (both viewers open it).
        """
        tl = self._tl
        tracks = sorted(self._used_tracks(), key=track_key)
        tid = {name: i + 1 for i, name in enumerate(tracks)}
        events: list[dict[str, object]] = [
            {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": f"NeuronCore ({self.target})"}}
        ]
        for name in tracks:
            events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid[name], "args": {"name": name}})
            events.append(
                {"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": tid[name], "args": {"sort_index": tid[name]}}
            )
        described = [[(key, _describe(value)) for key, value in site.args] for site in tl.sites]
        records = self.instructions
        for rec, site in zip(records, tl.site_id):
            args: dict[str, object] = {"index": rec.index, "source": rec.source}
            args.update(described[site])
            if rec.bytes:
                args["bytes"] = rec.bytes
            if rec.flops:
                args["flops"] = rec.flops
            if rec.producer >= 0:
                args["waits_for"] = rec.producer
                producer = records[rec.producer]
                flow = {"name": "dependency", "cat": "dependency", "pid": 1, "id": rec.index}
                events.append({**flow, "ph": "s", "tid": tid[producer.engine], "ts": producer.end_ns / 1000.0})
                events.append({**flow, "ph": "f", "bp": "e", "tid": tid[rec.engine], "ts": rec.start_ns / 1000.0})
            events.append(
                {
                    "name": rec.opcode,
                    "cat": rec.engine,
                    "ph": "X",
                    "pid": 1,
                    "tid": tid[rec.engine],
                    "ts": rec.start_ns / 1000.0,
                    "dur": max(rec.duration_ns, 0.0) / 1000.0,
                    "args": args,
                }
            )
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "wt") as fh:
            json.dump({"traceEvents": events, "displayTimeUnit": "ns"}, fh)


def _describe(value: object) -> str:
    """An operand as the trace shows it: ``sbuf float32[128, 512]``, ``nl.add``, ``2.0``."""
    if isinstance(value, tuple) and len(value) == 3 and isinstance(value[2], tuple):
        buffer, dtype, shape = value
        return f"{buffer} {dtype_name(dtype)}[{', '.join(map(str, shape))}]"  # type: ignore[arg-type]
    name = getattr(value, "name", None)
    return f"{type(value).__name__}.{name}" if isinstance(name, str) and hasattr(value, "value") else repr(value)


def _union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """The length of the union of the intervals ``[starts[i], ends[i]]``."""
    total = 0.0
    current_start = current_end = None
    order = np.lexsort((ends, starts))  # by start, then end
    for start, end in zip(starts[order].tolist(), ends[order].tolist()):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start  # type: ignore[operator]
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start  # type: ignore[operator]
    return total
