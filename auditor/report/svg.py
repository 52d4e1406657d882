"""Inline SVG charts for the HTML report, drawn in Python.

No JavaScript library and no external file: the HTML report must open from a
mail attachment or a ticket on a machine without network access, and a page
that runs no script cannot be turned against its reader by a hostile
transactional id. Each chart is a string of ``<svg>`` markup; every text from
the dump goes through :func:`esc`. Tooltips are SVG ``<title>`` elements.

Two charts per partition with findings (series from report_data.py):

* :func:`lso_lag_chart` — offsets between the log end and the last stable
  offset over time (a step chart: one step per time bucket), with the
  findings' first timestamps marked;
* :func:`session_chart` — one lane per producer id, one bar per transaction
  from its first batch to its marker (green commit, amber abort, red open to
  the end of the dump; grey a marker whose data is not in the dump), marker
  ticks, and the findings as red triangles.

Each chart has a legend listing every kind of mark it draws (and only those),
drawn with the mark's own classes; tooltips leave an unknown value out rather
than print ``None``.
"""

from __future__ import annotations

import html
import math
from datetime import datetime, timezone

from auditor.report.model import format_duration, format_time

W = 1200  # viewBox width; the SVG scales to its container
# both charts of a partition share the left margin (lane labels) so their time axes line up
LEFT, RIGHT, TOP, BOTTOM = 170, 16, 22, 30


def esc(value: object) -> str:
    """Text or attribute value from the dump, escaped for HTML/SVG: markup characters as
    entities, and control and bidirectional characters (ESC, BEL, U+202E...) shown escaped
    (``\\x1b``) as in every other format (:func:`auditor.report.model.one_line`), so a
    transactional id cannot reorder or hide what the page shows, or carry terminal codes
    into a copy-paste from it."""
    from auditor.report.model import one_line

    return html.escape(one_line(value), quote=True)


def _nice_step(span: float, target: int = 6) -> float:
    raw = max(span / max(target, 1), 1e-9)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


_TIME_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 15_000, 30_000, 60_000, 120_000,
               300_000, 600_000, 900_000, 1_800_000, 3_600_000, 7_200_000, 10_800_000, 21_600_000, 43_200_000,
               86_400_000, 172_800_000, 604_800_000]


def time_ticks(t0: int, t1: int, target: int = 6) -> list[tuple[int, str]]:
    """Round instants between t0 and t1 with labels as precise as the step needs."""
    span = max(1, t1 - t0)
    step = next((s for s in _TIME_STEPS if span / s <= target), _TIME_STEPS[-1])
    first = -(-t0 // step) * step
    out = []
    t = first
    while t <= t1 and len(out) < 50:
        dt = datetime.fromtimestamp(t / 1000, tz=timezone.utc)
        if step < 1000:
            label = dt.strftime("%H:%M:%S.%f")[:-3]
        elif step < 60_000:
            label = dt.strftime("%H:%M:%S")
        elif step < 86_400_000:
            label = dt.strftime("%H:%M")
        else:
            label = dt.strftime("%m-%d")
        out.append((t, label))
        t += step
    return out


class _Scale:
    def __init__(self, d0: float, d1: float, r0: float, r1: float) -> None:
        if d1 <= d0:
            d0, d1 = d0 - 1, d1 + 1
        self.d0, self.d1, self.r0, self.r1 = d0, d1, r0, r1

    def __call__(self, v: float) -> float:
        return round(self.r0 + (v - self.d0) * (self.r1 - self.r0) / (self.d1 - self.d0), 2)


def _time_axis(x: _Scale, t0: int, t1: int, y: float, top: float, left: float = LEFT) -> list[str]:
    parts = [f'<line class="axis" x1="{left}" y1="{y}" x2="{W - RIGHT}" y2="{y}"/>']
    for t, label in time_ticks(t0, t1):
        px = x(t)
        parts.append(f'<line class="grid" x1="{px}" y1="{top}" x2="{px}" y2="{y}"/>')
        parts.append(f'<text class="tick" x="{px}" y="{y + 14}" text-anchor="middle">{esc(label)}</text>')
    day = datetime.fromtimestamp(t0 / 1000, tz=timezone.utc).strftime("%Y-%m-%d")
    parts.append(f'<text class="tick" x="{W - RIGHT}" y="{y + 27}" text-anchor="end">UTC, {esc(day)}</text>')
    return parts


def time_domain(part: dict) -> tuple[int, int, int]:
    """(t0, t1, t_end): the partition's first and last timestamps, and the right edge of
    the charts a little past t1, so what is still open at the end of the dump (an open
    transaction, a pinned LSO) shows as a bar running off the edge rather than a dot."""
    t0, t1 = int(part["t0"]), int(part["t1"])
    return t0, t1, t1 + max(1, round((t1 - t0) * 0.04))


def _triangle(px: float, py: float, title: str, cls: str = "finding") -> str:
    return (f'<path class="{cls}" d="M{px - 5},{py - 9} L{px + 5},{py - 9} L{px},{py - 1} Z">'
            f"<title>{esc(title)}</title></path>")


def _finding_title(f: dict, n: int | None = None) -> str:
    """A finding marker's tooltip; an unknown part is left out (never printed as "None")."""
    head = " ".join(str(x) for x in (f"[{n}]" if n is not None else None, f.get("severity"), f.get("rule")) if x is not None)
    return f"{head}: {f['message']}" if f.get("message") else head


# Legend entries: (mark, label). ``mark`` is the data-mark of the entry and names the mark it stands
# for by its classes: "txn <state>" a transaction bar, "marker <state>" a marker tick, "finding" a
# finding's triangle (and its dashed line), "lag" the LSO-lag step area.
_LEGEND_LABELS = {
    "txn commit": "committed", "txn abort": "aborted", "txn open": "open (no marker yet)",
    "txn marker-only": "marker only (no data in the dump)", "marker commit": "commit marker",
    "marker abort": "abort marker", "lag": "LSO lag", "finding": "finding (its first timestamp)",
}
_LEGEND_ORDER = list(_LEGEND_LABELS)


def _legend(marks: set[str], left: float, y: float) -> list[str]:
    """One legend entry per kind of mark the chart draws (``marks``), on one row above the plot
    area: each swatch is drawn with the mark's own classes, so it looks like what it explains."""
    parts = ['<g class="legend">']
    lx = left
    for mark in sorted(marks, key=lambda m: _LEGEND_ORDER.index(m) if m in _LEGEND_ORDER else len(_LEGEND_ORDER)):
        label = _LEGEND_LABELS.get(mark, mark)
        kind, _, state = mark.partition(" ")
        parts.append(f'<g class="legend-entry" data-mark="{esc(mark)}">')
        if kind == "txn":
            parts.append(f'<rect class="txn {esc(state)}" x="{lx}" y="{y - 8}" width="10" height="9" rx="1"/>')
        elif kind == "marker":
            parts.append(f'<line class="marker {esc(state)}" x1="{lx + 5}" y1="{y - 10}" x2="{lx + 5}" y2="{y + 2}"/>')
        elif kind == "lag":
            parts.append(f'<rect class="lag-area" x="{lx}" y="{y - 8}" width="10" height="9"/>'
                         f'<line class="lag-line" x1="{lx}" y1="{y - 8}" x2="{lx + 10}" y2="{y - 8}"/>')
        else:
            parts.append(_triangle(lx + 5, y + 3, label, "finding legend"))
        parts.append(f'<text class="tick" x="{lx + 14}" y="{y}">{esc(label)}</text></g>')
        lx += 24 + round(len(label) * 5.6)
    parts.append("</g>")
    return parts


def lso_lag_chart(part: dict, findings: list[tuple[int, dict]]) -> str:
    """Step chart of ``part['lso_lag']`` (offsets the LSO trails the log end).

    ``findings`` are (report row number, finding) pairs on this partition.
    """
    pts = part.get("lso_lag") or []
    h = 170
    y_bottom = h - BOTTOM
    t0, t1, t_end = time_domain(part)
    x = _Scale(t0, t_end, LEFT, W - RIGHT)
    top_lag = max([p["lag"] for p in pts] + [1])
    step = max(1, int(_nice_step(top_lag, 4)))
    ymax = step * math.ceil(top_lag / step)
    if ymax == top_lag:
        ymax += step if top_lag < 4 * step else 0
    y = _Scale(0, ymax, y_bottom, TOP)
    parts = [f'<svg class="chart lso" viewBox="0 0 {W} {h}" role="img" aria-label="LSO lag over time" '
             f'xmlns="http://www.w3.org/2000/svg">']
    for v in range(0, int(ymax) + 1, step):
        parts.append(f'<line class="grid" x1="{LEFT}" y1="{y(v)}" x2="{W - RIGHT}" y2="{y(v)}"/>')
        parts.append(f'<text class="tick" x="{LEFT - 6}" y="{y(v) + 4}" text-anchor="end">{v:,}</text>')
    parts += _time_axis(x, t0, t_end, y_bottom, TOP)
    parts.append(f'<text class="label" x="12" y="{TOP + (y_bottom - TOP) / 2 + 4}">LSO lag (offsets)</text>')
    width = int(part.get("bucket_ms") or 1)
    if pts:
        d = [f"M{x(t0)},{y(0)}"]
        for i, p in enumerate(pts):
            start = t0 + i * width
            d.append(f"L{x(start)},{y(p['lag'])} L{x(p['t'])},{y(p['lag'])}")
        d.append(f"L{x(t_end)},{y(pts[-1]['lag'])} L{x(t_end)},{y(0)} Z")
        parts.append(f'<path class="lag-area" d="{" ".join(d)}"/>')
        line = []
        for i, p in enumerate(pts):
            start = t0 + i * width
            line.append(f"{'M' if i == 0 else 'L'}{x(start)},{y(p['lag'])} L{x(p['t'])},{y(p['lag'])}")
        line.append(f"L{x(t_end)},{y(pts[-1]['lag'])}")
        parts.append(f'<path class="lag-line" d="{" ".join(line)}"/>')
        # hover targets: one transparent band per bucket with what it shows
        for i, p in enumerate(pts):
            x0, x1 = x(t0 + i * width), x(p["t"])
            tip = _lag_tip(p)
            parts.append(f'<rect class="hover" x="{x0}" y="{TOP}" width="{max(0.5, round(x1 - x0, 2))}" '
                         f'height="{y_bottom - TOP}"><title>{esc(tip)}</title></rect>')
    drawn = {"lag"} if pts else set()
    for n, f in findings:
        ts = f.get("first_timestamp")
        if ts is None or not (t0 <= ts <= t1):
            continue
        drawn.add("finding")
        parts.append(f'<line class="finding-line" x1="{x(ts)}" y1="{TOP}" x2="{x(ts)}" y2="{y_bottom}"/>')
        parts.append(_triangle(x(ts), TOP + 1, _finding_title(f, n)))
    parts += _legend(drawn, LEFT, TOP - 6)
    parts.append("</svg>")
    return "".join(parts)


def _lag_tip(p: dict) -> str:
    """Tooltip of one LSO-lag bucket; an unknown part is left out (never printed as "None")."""
    facts = [f"{name} {p[k]}" for name, k in (("log end", "log_end"), ("LSO", "lso"), ("lag", "lag")) if p.get(k) is not None]
    if p.get("pinned_by") is not None:
        facts.append(f"pinned by producer {p['pinned_by']}"
                     + (f" for {format_duration(p['lag_ms'])}" if p.get("lag_ms") is not None else ""))
    when = format_time(p.get("t"))
    return f"{when}: {', '.join(facts)}" if when and facts else when or ", ".join(facts)


def _session_tip(s: dict) -> str:
    """Tooltip of one transaction bar: producer and epoch, offsets, start, then its marker or why
    it has none. Unknown parts are left out: a marker-only transaction has no epoch, offsets or
    start of its own in the dump, and its tooltip must not read "epoch None: offsets None-None"."""
    head = f"producer {s.get('producer_id')}" + (f" epoch {s['producer_epoch']}" if s.get("producer_epoch") is not None else "")
    facts = []
    fo, lo = s.get("first_offset"), s.get("last_offset")
    if fo is not None:
        facts.append(f"offsets {fo}–{lo}" if lo is not None and lo != fo else f"offset {fo}")
    if s.get("first_timestamp") is not None:
        facts.append(f"from {format_time(s['first_timestamp'])}")
    if s.get("marker_offset") is not None:
        epochs = ", ".join(f"{name} {s[k]}" for name, k in (("epoch", "marker_epoch"), ("coordinator epoch", "coordinator_epoch"))
                           if s.get(k) is not None)
        marker = " ".join(x for x in (str(s["marker_type"]) if s.get("marker_type") else None, "marker at offset",
                                      str(s["marker_offset"]), f"({epochs})" if epochs else None,
                                      f"at {format_time(s['marker_timestamp'])}" if s.get("marker_timestamp") is not None else None) if x)
        if not s.get("data_batches") and fo is None:
            marker += ", with no data batch of its transaction in the dump"
    else:
        marker = f"no marker: {s.get('verdict') or 'open'}" + (
            f", open for {format_duration(s['age_ms'])}" if s.get("age_ms") is not None else "")
    return f"{head}: {', '.join(facts)}; {marker}" if facts else f"{head}: {marker}"


def _lane_label(pid: int, tid: str | None) -> str:
    label = f"pid {pid}"
    if tid:
        short = tid if len(tid) <= 16 else tid[:15] + "…"
        label += f" · {short}"
    return label


def _session_marks(s: dict, cy: float, x: _Scale, domain: tuple[int, int, int], drawn: set[str]) -> list[str]:
    """One transaction's bar (first batch to marker, or to the right edge while open) and its
    marker tick, on the lane at height ``cy``; the kinds of mark drawn are added to ``drawn``
    (the legend lists exactly those)."""
    t0, t1, t_end = domain
    state = s.get("state") or "open"
    start = s.get("first_timestamp")
    end = s.get("marker_timestamp") if s.get("marker_timestamp") is not None else (
        t_end if state == "open" else s.get("last_timestamp"))
    if start is None:
        start = end
    if start is None:
        return []
    end = start if end is None else end
    x0, x1 = x(max(t0, start)), x(min(t_end, max(start, end)))
    cls = {"commit": "commit", "abort": "abort", "open": "open"}.get(state, "marker-only")
    drawn.add(f"txn {cls}")
    out = [f'<rect class="txn bar {cls}" x="{x0}" y="{cy - 7}" width="{max(2.0, round(x1 - x0, 2))}" height="14" rx="2">'
           f"<title>{esc(_session_tip(s))}</title></rect>"]
    if s.get("marker_timestamp") is not None and cls != "marker-only":  # a marker-only bar is its marker
        drawn.add(f"marker {cls}")
        mx = x(min(t1, s["marker_timestamp"]))
        out.append(f'<line class="marker {cls}" x1="{mx}" y1="{cy - 10}" x2="{mx}" y2="{cy + 10}"/>')
    return out


def session_chart(part: dict, findings: list[tuple[int, dict]]) -> str:
    """Producer-session lanes: one bar per transaction, coloured by outcome."""
    sessions = part.get("sessions") or []
    t0, t1, t_end = time_domain(part)
    lanes: list[int] = []
    tids: dict[int, str | None] = {}
    for s in sessions:
        if s["producer_id"] not in lanes:
            lanes.append(s["producer_id"])
        tids[s["producer_id"]] = tids.get(s["producer_id"]) or s.get("transactional_id")
    for _, f in findings:
        pid = f.get("producer_id")
        if pid is not None and pid not in lanes:
            lanes.append(pid)
    lane_h = 24
    left = LEFT
    h = TOP + max(1, len(lanes)) * lane_h + BOTTOM + 6
    y_bottom = h - BOTTOM
    x = _Scale(t0, t_end, left, W - RIGHT)
    parts = [f'<svg class="chart sessions" viewBox="0 0 {W} {h}" role="img" aria-label="producer sessions" '
             f'xmlns="http://www.w3.org/2000/svg">']
    parts += _time_axis(x, t0, t_end, y_bottom, TOP, left)
    if not lanes:
        parts.append(f'<text class="label" x="{left}" y="{TOP + 16}">no transactional producers on this partition</text>')
    for i, pid in enumerate(lanes):
        cy = TOP + i * lane_h + lane_h / 2
        parts.append(f'<line class="lane" x1="{left}" y1="{cy}" x2="{W - RIGHT}" y2="{cy}"/>')
        parts.append(f'<text class="lane-label" x="{left - 8}" y="{cy + 4}" text-anchor="end">'
                     f'{esc(_lane_label(pid, tids.get(pid)))}<title>{esc(f"producer {pid}" + (f", transactional id {tids[pid]}" if tids.get(pid) else ""))}</title></text>')
    row = {pid: TOP + i * lane_h + lane_h / 2 for i, pid in enumerate(lanes)}
    drawn: set[str] = set()
    for s in sessions:
        parts += _session_marks(s, row[s["producer_id"]], x, (t0, t1, t_end), drawn)
    for n, f in findings:
        pid, ts = f.get("producer_id"), f.get("first_timestamp")
        if pid is None or ts is None or pid not in row or not (t0 <= ts <= t1):
            continue
        drawn.add("finding")
        parts.append(_triangle(x(ts), row[pid] - 7, _finding_title(f, n)))
    parts += _legend(drawn, left, TOP - 6)
    if part.get("transactions_total", 0) > len(sessions):
        parts.append(f'<text class="tick" x="{left}" y="{h - 4}">showing {len(sessions)} of '
                     f'{part["transactions_total"]} transactions (open ones and the newest)</text>')
    parts.append("</svg>")
    return "".join(parts)
