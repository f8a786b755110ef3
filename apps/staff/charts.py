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
