"""A self-contained HTML page of a sweep: simulated time against each parameter, one series per target.

Each chart has one column per value of its parameter. Every point that ran is a dot;
the line joins, per target, the fastest point at each value (the best the other
parameters allow there). The best point of each target is ringed and labelled.
Failed points are counted under the chart.
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nkisim.sweeps.table import SweepRecord, SweepTable

_PALETTE = ("#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1", "#76b7b2")
_W, _H = 640, 300
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 20, 20, 50


def render_html(table: SweepTable) -> str:
    """The page as a string (no scripts, nothing fetched)."""
    targets = list(dict.fromkeys(r.target for r in table))
    colour = {t: _PALETTE[i % len(_PALETTE)] for i, t in enumerate(targets)}
    names = table.param_names or ["(point)"]
    charts = "\n".join(_chart(table, name, targets, colour) for name in names)
    legend = " ".join(f'<span style="color:{colour[t]}">&#9679; {html.escape(t)}</span>' for t in targets)
    summary = html.escape(table.summary()).replace("\n", "<br>")
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>nkisim sweep</title>"
        "<style>body{font-family:sans-serif;margin:20px}svg{display:block;margin-bottom:24px}"
        "text{font-size:12px}</style></head><body>"
        f"<h1>Sweep: {len(table)} points</h1><p>{legend}</p><p>{summary}</p>{charts}</body></html>\n"
    )


def _value_label(value: Any) -> str:
    return str(value)


def _chart(table: SweepTable, name: str, targets: list[str], colour: dict[str, str]) -> str:
    def value_of(record: SweepRecord) -> str:
        return _value_label(record.params.get(name, "")) if name != "(point)" else str(table._records.index(record))

    values = list(dict.fromkeys(value_of(r) for r in table))
    ok = [r for r in table if r.ok]
    failed = len(table) - len(ok)
    if not ok:
        return f"<h2>{html.escape(name)}</h2><p>every point failed ({failed})</p>"
    times = [r.total_ns / 1e3 for r in ok]  # type: ignore[operator]
    top = _nice_ceiling(max(times))
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x_of(value: str) -> float:
        return _LEFT + plot_w * (values.index(value) + 0.5) / len(values)

    def y_of(us: float) -> float:
        return _TOP + plot_h * (1 - us / top)

    parts = [f'<svg width="{_W}" height="{_H}" xmlns="http://www.w3.org/2000/svg">']
    parts.append(f'<line x1="{_LEFT}" y1="{_TOP + plot_h}" x2="{_W - _RIGHT}" y2="{_TOP + plot_h}" stroke="#333"/>')
    parts.append(f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_TOP + plot_h}" stroke="#333"/>')
    for i in range(5):
        us = top * i / 4
        y = y_of(us)
        parts.append(f'<line x1="{_LEFT - 4}" y1="{y:.1f}" x2="{_LEFT}" y2="{y:.1f}" stroke="#333"/>')
        parts.append(f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{us:g}</text>')
    for value in values:
        parts.append(
            f'<text x="{x_of(value):.1f}" y="{_TOP + plot_h + 16}" text-anchor="middle">{html.escape(value)}</text>'
        )
    parts.append(
        f'<text x="{_LEFT + plot_w / 2}" y="{_H - 8}" text-anchor="middle">{html.escape(name)}</text>'
        f'<text x="14" y="{_TOP + plot_h / 2}" transform="rotate(-90 14 {_TOP + plot_h / 2})" '
        'text-anchor="middle">simulated time (us)</text>'
    )
    for target in targets:
        mine = [r for r in ok if r.target == target]
        if not mine:
            continue
        fastest: dict[str, float] = {}
        for record in mine:
            us = record.total_ns / 1e3  # type: ignore[operator]
            value = value_of(record)
            fastest[value] = min(fastest.get(value, math.inf), us)
            parts.append(
                f'<circle cx="{x_of(value):.1f}" cy="{y_of(us):.1f}" r="3" fill="{colour[target]}" fill-opacity="0.45">'
                f"<title>{html.escape(target)} {html.escape(str(record.params))}: {us:.3f} us</title></circle>"
            )
        line = " ".join(f"{x_of(v):.1f},{y_of(fastest[v]):.1f}" for v in values if v in fastest)
        parts.append(f'<polyline points="{line}" fill="none" stroke="{colour[target]}" stroke-width="2"/>')
        best = min(mine, key=lambda r: r.total_ns)  # type: ignore[arg-type, return-value]
        bx, by = x_of(value_of(best)), y_of(best.total_ns / 1e3)  # type: ignore[operator]
        right = bx > _W - 200  # keep the label inside the chart
        lx, anchor = (bx - 12, "end") if right else (bx + 12, "start")
        ly = by - 10 - 14 * targets.index(target)
        parts.append(
            f'<circle class="best" cx="{bx:.1f}" cy="{by:.1f}" r="8" fill="none" stroke="{colour[target]}" '
            f'stroke-width="2"/><text x="{lx:.1f}" y="{ly:.1f}" text-anchor="{anchor}" fill="{colour[target]}">'
            f"best {html.escape(target)}: {best.total_ns / 1e3:.3f} us</text>"  # type: ignore[operator]
        )
    parts.append("</svg>")
    note = f"<p>{failed} point(s) failed and are not drawn.</p>" if failed else ""
    return f"<h2>{html.escape(name)}</h2>" + "".join(parts) + note


def _nice_ceiling(value: float) -> float:
    """1, 2 or 5 times a power of ten, at or above ``value``."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return step * power
    return 10 * power
