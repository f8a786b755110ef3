"""Server-rendered SVG charts (no JavaScript, no charting library to ship). Pure: no Django."""
from __future__ import annotations

from datetime import date
from html import escape


def trend_svg(points: list[tuple[date, int]], *, width: int = 720, height: int = 180, title: str = "") -> str:
    """A bar chart of daily counts with a labelled y maximum and first/last day on the x axis.

    Accessible: ``role="img"`` with a title, and each bar carries a ``<title>`` tooltip.
    """
    left, bottom, top, right = 40, 24, 12, 8
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max((count for _, count in points), default=0)
    scale = plot_h / peak if peak else 0
    step = plot_w / max(1, len(points))
    bar_w = max(1.0, step * 0.8)
    label = escape(title or "Daily counts")
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="trend" role="img" aria-label="{label}" '
        f'viewBox="0 0 {width} {height}" width="100%" preserveAspectRatio="xMidYMid meet">',
        f"<title>{label}</title>",
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#667062"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#667062"/>',
        f'<text x="{left - 4}" y="{top + 4}" text-anchor="end" font-size="11">{peak}</text>',
        f'<text x="{left - 4}" y="{top + plot_h}" text-anchor="end" font-size="11">0</text>',
    ]
    for index, (day, count) in enumerate(points):
        bar_h = count * scale
        x = left + index * step + (step - bar_w) / 2
        y = top + plot_h - bar_h
        parts.append(f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{bar_h:.1f}" '
                     f'fill="#c98a1a"><title>{day.isoformat()}: {count}</title></rect>')
    if points:
        parts.append(f'<text x="{left}" y="{height - 6}" font-size="11">{points[0][0].isoformat()}</text>')
        parts.append(f'<text x="{left + plot_w}" y="{height - 6}" text-anchor="end" font-size="11">'
                     f"{points[-1][0].isoformat()}</text>")
    parts.append("</svg>")
    return "".join(parts)


def bar_fraction_svg(fraction: float | None, *, width: int = 120, height: int = 12) -> str:
    """A small horizontal bar (budget used vs allowed); red past 90 %."""
    if fraction is None:
        return ""
    filled = max(0.0, min(1.0, fraction)) * width
    colour = "#b3261e" if fraction >= 0.9 else "#3d7a3a"
    return (f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{fraction * 100:.0f}% used" '
            f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
            f'<rect width="{width}" height="{height}" fill="#e4ebe1"/>'
            f'<rect width="{filled:.1f}" height="{height}" fill="{colour}"/></svg>')


def lineage_svg(lineage: dict, *, column_w: int = 190, row_h: int = 34) -> str:
    """An artifact's lineage as columns, left to right in the direction data flows: artifacts (rounded,
    digest) and steps (square, ``node`` and run prefix) alternate; an edge per lineage row. ``lineage`` is
    ``artifacts.selectors.artifact_lineage``'s answer. Each box has a ``<title>`` with its full name."""
    focus = lineage["artifact"]["id"]
    names = {artifact["id"]: artifact for artifact in lineage["artifacts"]}
    # Columns: the focus artifact at 0; a producer one to the left of what it made, a consumer one to
    # the right of what it read (a walk over the rows, each placed once).
    column: dict[tuple[str, object], int] = {("artifact", focus): 0}
    pending = [("artifact", focus)]
    while pending:
        kind, key = pending.pop()
        here = column[(kind, key)]
        for edge in lineage["edges"]:
            step, artifact = ("step", edge["step"]), ("artifact", edge["artifact_id"])
            if kind == "artifact" and edge["artifact_id"] == key:
                other, place = step, here - 1 if edge["role"] == "output" else here + 1
            elif kind == "step" and edge["step"] == key:
                other, place = artifact, here - 1 if edge["role"] == "input" else here + 1
            else:
                continue
            if other not in column:
                column[other] = place
                pending.append(other)
    low = min(column.values())
    rows: dict[int, int] = {}
    position = {}
    for item in sorted(column, key=lambda i: (column[i], str(i[1]))):
        col = column[item] - low
        rows[col] = rows.get(col, -1) + 1
        position[item] = (12 + col * column_w, 12 + rows[col] * row_h)
    width = 24 + (max(column.values()) - low + 1) * column_w
    height = 24 + (max(rows.values(), default=0) + 1) * row_h
    box_w, box_h = column_w - 40, row_h - 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="lineage" role="img" aria-label="Lineage" '
             f'viewBox="0 0 {width} {height}" width="100%" preserveAspectRatio="xMinYMin meet">',
             "<title>Lineage: producers to the left, consumers to the right</title>"]
    for edge in lineage["edges"]:
        a, s = position.get(("artifact", edge["artifact_id"])), position.get(("step", edge["step"]))
        if a is None or s is None:
            continue
        start, end = (s, a) if edge["role"] == "output" else (a, s)
        parts.append(f'<line x1="{start[0] + box_w}" y1="{start[1] + box_h / 2}" x2="{end[0]}" '
                     f'y2="{end[1] + box_h / 2}" stroke="#667062" marker-end="url(#arrow)"/>')
    parts.insert(2, '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
                    'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#667062"/></marker></defs>')
    for (kind, key), (x, y) in position.items():
        if kind == "artifact":
            artifact = names.get(key, {"digest": "?", "reference": "?"})
            label, full = f"#{key} {artifact['digest'][7:19]}", f"{artifact['reference']} ({artifact['digest']})"
            fill, radius = ("#d8ecd0" if key == focus else "#eef3ea"), 10
        else:
            run, _, node = str(key).partition(":")
            label, full, fill, radius = f"{node} @{run[:8]}", f"step {node} of run {run}", "#f4efe2", 2
        parts.append(f'<g class="lineage-{kind}"><title>{escape(full)}</title>'
                     f'<rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="{radius}" fill="{fill}" '
                     f'stroke="#667062"/><text x="{x + 6}" y="{y + box_h / 2 + 4}" font-size="11">'
                     f"{escape(label)}</text></g>")
    parts.append("</svg>")
    return "".join(parts)
