"""The result of a sweep: one record per point, in the order of the points."""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, overload

from nkisim.sweeps.plot import render_html


@dataclass(frozen=True)
class SweepRecord:
    """What one point of a sweep gave.

    Attributes:
        params: the parameter values, by name.
        target: the hardware generation simulated.
        total_ns: the simulated kernel time, or None when the point failed.
        instruction_count: instructions simulated (None on error).
        mfu: model FLOPs utilisation of the run (None on error).
        engine_busy_ns: busy time per engine (empty on error).
        error: None, or the one-line message of the error that stopped this point.
        wall_s: the host time the point took.
    """

    params: dict[str, Any]
    target: str
    total_ns: float | None = None
    instruction_count: int | None = None
    mfu: float | None = None
    engine_busy_ns: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the point ran to the end."""
        return self.error is None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, default=repr)

    @classmethod
    def from_json(cls, line: str) -> SweepRecord:
        return cls(**json.loads(line))


class SweepTable(Sequence[SweepRecord]):
    """The records of a sweep, in the order of its points."""

    def __init__(self, records: Sequence[SweepRecord]) -> None:
        self._records = list(records)

    @overload
    def __getitem__(self, index: int) -> SweepRecord: ...

    @overload
    def __getitem__(self, index: slice) -> SweepTable: ...

    def __getitem__(self, index: int | slice) -> SweepRecord | SweepTable:
        if isinstance(index, slice):
            return SweepTable(self._records[index])
        return self._records[index]

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[SweepRecord]:
        return iter(self._records)

    def __repr__(self) -> str:
        failed = sum(not r.ok for r in self)
        return f"<SweepTable: {len(self)} points, {failed} failed>"

    @property
    def param_names(self) -> list[str]:
        """Every parameter name, in order of first appearance."""
        names: dict[str, None] = {}
        for record in self:
            names.update(dict.fromkeys(record.params))
        return list(names)

    @property
    def failures(self) -> SweepTable:
        """The records that ended in an error."""
        return SweepTable([r for r in self if not r.ok])

    def best(self, target: str | None = None) -> SweepRecord:
        """The fastest record without error (of ``target``, if given).

        Raises:
            ValueError: no point of the sweep (or of that target) ran without error.
        """
        candidates = [r for r in self if r.ok and (target is None or r.target == target)]
        if not candidates:
            where = f" on {target}" if target else ""
            raise ValueError(f"no point of the sweep{where} ran without error ({len(self.failures)} failed)")
        return min(candidates, key=lambda r: r.total_ns)  # type: ignore[arg-type, return-value]

    def rows(self) -> list[dict[str, Any]]:
        """One flat dict per record: the parameters, then target, times, counts, busy time per engine, error."""
        engines: dict[str, None] = {}
        for record in self:
            engines.update(dict.fromkeys(record.engine_busy_ns))
        rows = []
        for record in self:
            row: dict[str, Any] = {name: record.params.get(name) for name in self.param_names}
            row.update(
                target=record.target,
                total_ns=record.total_ns,
                instruction_count=record.instruction_count,
                mfu=record.mfu,
            )
            row.update({f"busy_ns[{engine}]": record.engine_busy_ns.get(engine) for engine in engines})
            row.update(error=record.error, wall_s=record.wall_s)
            rows.append(row)
        return rows

    def to_csv(self, path: str | os.PathLike[str]) -> None:
        """Write every record (failures included) as CSV, one row per point."""
        rows = self.rows()
        columns = list(rows[0]) if rows else [*self.param_names, "target", "total_ns", "error"]
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: "" if v is None else v for k, v in row.items()})

    def to_pandas(self) -> Any:
        """The records as a pandas DataFrame (needs pandas)."""
        try:
            import pandas as pd
        except ModuleNotFoundError as exc:
            raise ImportError("SweepTable.to_pandas needs pandas, which is not installed: pip install pandas") from exc
        return pd.DataFrame(self.rows())

    def plot(self, path: str | os.PathLike[str]) -> None:
        """Write a self-contained HTML page charting simulated time against each parameter, per target."""
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(render_html(self))

    def summary(self) -> str:
        """A short text table: the best point per target and the failures."""
        lines = []
        for target in dict.fromkeys(r.target for r in self):
            done = [r for r in self if r.target == target]
            ok = [r for r in done if r.ok]
            if ok:
                best = min(ok, key=lambda r: r.total_ns)  # type: ignore[arg-type, return-value]
                worst = max(ok, key=lambda r: r.total_ns)  # type: ignore[arg-type, return-value]
                spread = worst.total_ns / best.total_ns if best.total_ns else math.nan  # type: ignore[operator]
                lines.append(
                    f"{target}: best {best.total_ns / 1e3:.3f} us at {best.params} "  # type: ignore[operator]
                    f"({len(ok)} ran, {len(done) - len(ok)} failed; slowest is {spread:.2f}x the best)"
                )
            else:
                lines.append(f"{target}: all {len(done)} points failed")
        return "\n".join(lines)
