"""A self-contained HTML page: an SVG engine timeline above the profile's summary table."""

from __future__ import annotations

import html
import os
from typing import TYPE_CHECKING

import numpy as np

from nkisim.report.tracks import track_key

if TYPE_CHECKING:
    from nkisim.report.profile import Profile
    from nkisim.sim import Timeline

_PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f")
_WIDTH = 1200
_LABEL = 110
_ROW = 22
#: Above this many instructions a track is drawn as merged busy spans, not one bar per instruction.
_DETAIL_LIMIT = 5000


def _occupancy(starts: np.ndarray, ends: np.ndarray, scale: float, pixels: int) -> np.ndarray:
    """The busy fraction of each pixel column, for timelines too dense to draw bar by bar.

    The busy time before ``t`` is piecewise linear over the sorted intervals (a track's
    intervals do not overlap), so each column's share is a difference of two lookups.
    """
    order = np.lexsort((ends, starts))
    spans = np.stack([starts[order], ends[order]], axis=1).astype(float).reshape(-1, 2)
    durations = spans[:, 1] - spans[:, 0]
    before = np.concatenate([[0.0], np.cumsum(durations)[:-1]])
    times = spans.reshape(-1)
    busy = np.stack([before, before + durations], axis=1).reshape(-1)
    edges = np.arange(pixels + 1) / scale
    covered = np.interp(edges, times, busy, left=0.0, right=float(busy[-1]) if len(busy) else 0.0)
    return np.clip(np.diff(covered) * scale, 0.0, 1.0)


def render_html(profile: Profile) -> str:
    """The page as a string."""
    tl = profile.timeline
    tracks = sorted({tl.tracks[i] for i in set(tl.track_id)}, key=track_key)
    total = profile.total_ns or 1.0
    scale = (_WIDTH - _LABEL - 10) / total
    opcodes = sorted({site.opcode for site in tl.sites})
    color = {op: _PALETTE[i % len(_PALETTE)] for i, op in enumerate(opcodes)} | {"mixed": "#888888"}
    dense = len(tl) > _DETAIL_LIMIT
    by_track: dict[str, list[tuple[float, float, str, str]]] = {t: [] for t in tracks}
    if not dense:
        for r in profile.instructions:
            title = f"{r.opcode} #{r.index} {r.source} {r.start_ns:.0f}-{r.end_ns:.0f} ns"
            by_track[r.engine].append((r.start_ns, r.end_ns, r.opcode, title))
    height = 30 + _ROW * len(tracks)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" font-family="sans-serif" '
        'font-size="12">'
    ]
    for row, track in enumerate(tracks):
        y = 20 + row * _ROW
        parts.append(f'<text x="4" y="{y + 14}">{html.escape(track)}</text>')
        parts.append(f'<rect x="{_LABEL}" y="{y}" width="{_WIDTH - _LABEL - 10}" height="{_ROW - 4}" fill="#f3f3f3"/>')
        if dense:
            parts.extend(_occupancy_bars(tl, tl.tracks.index(track), scale, y, color))
            continue
        for start, end, opcode, title in by_track[track]:
            x = _LABEL + start * scale
            w = max((end - start) * scale, 0.5)
            tip = f"<title>{html.escape(title)}</title>" if title else ""
            parts.append(
                f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{_ROW - 4}" fill="{color[opcode]}">{tip}</rect>'
            )
    parts.append(f'<text x="{_LABEL}" y="{height - 2}">0</text>')
    parts.append(f'<text x="{_WIDTH - 10}" y="{height - 2}" text-anchor="end">{total / 1000:.3f} us</text>')
    parts.append("</svg>")
    legend = " ".join(
        f'<span style="background:{color[op]};color:white;padding:1px 6px;margin-right:4px">{html.escape(op)}</span>'
        for op in opcodes
    )
    title = html.escape(f"{profile.kernel or 'kernel'} on {profile.target}")
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>nkisim profile: {title}</title>"
        "<style>body{font-family:sans-serif;margin:16px} pre{background:#fafafa;padding:8px}</style></head><body>"
        f"<h2>nkisim profile: {title}</h2><div>{legend}</div>{''.join(parts)}"
        f"{_diagnostics(profile)}<pre>{html.escape(profile.table())}</pre></body></html>\n"
    )


def _diagnostics(profile: Profile) -> str:
    """The sanitizer's findings as a table, errors in red, warnings in amber (nothing when there are none)."""
    if not profile.diagnostics:
        return ""
    rows = []
    for d in profile.diagnostics:
        color = "#c0392b" if d.severity == "error" else "#b9770e"
        rows.append(
            f'<tr><td style="color:{color};font-weight:bold">{d.severity}</td><td>{html.escape(d.check)}</td>'
            f"<td>{html.escape(f'{d.loc.file.rsplit(os.sep, 1)[-1]}:{d.loc.line}')}</td><td>{d.count}</td>"
            f"<td>{html.escape(d.message)}</td></tr>"
        )
    head = "<tr><th>severity</th><th>check</th><th>line</th><th>times</th><th>finding</th></tr>"
    return (
        f"<h3>sanitizer findings ({len(rows)})</h3>"
        f'<table class="findings" border="1" cellspacing="0" cellpadding="3">{head}{"".join(rows)}</table>'
    )


def _occupancy_bars(tl: Timeline, track: int, scale: float, y: int, colors: dict[str, str]) -> list[str]:
    """One bar a pixel column, as tall as the track was busy there, in its commonest opcode's colour."""
    pixels = _WIDTH - _LABEL - 10
    mine = tl.column("track_id") == track
    opcode_numbers: dict[str, int] = {}
    opcode_of_site = np.array([opcode_numbers.setdefault(s.opcode, len(opcode_numbers)) for s in tl.sites])
    counts = np.bincount(opcode_of_site[tl.column("site_id")[mine]], minlength=len(opcode_numbers))
    fill = colors[min(op for op, i in opcode_numbers.items() if counts[i] == counts.max())]
    out = []
    for x, fraction in enumerate(_occupancy(tl.column("start_ns")[mine], tl.column("end_ns")[mine], scale, pixels)):
        if fraction > 0:
            h = (_ROW - 4) * fraction
            out.append(f'<rect x="{_LABEL + x}" y="{y + _ROW - 4 - h:.1f}" width="1" height="{h:.1f}" fill="{fill}"/>')
    return out


def write_html(profile: Profile, path: str | os.PathLike[str]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(render_html(profile))
