"""Formatting for staff pages: byte sizes, milli-CPUs, report age."""
from __future__ import annotations

import json

from django import template
from django.utils import timezone

register = template.Library()


@register.filter
def bytes_h(value) -> str:
    if value is None:
        return "—"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024 or unit == "PiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(value)


@register.filter
def cores(milli) -> str:
    return "—" if milli is None else f"{milli / 1000:g}"


@register.filter
def age(moment) -> str:
    if moment is None:
        return "never"
    seconds = int((timezone.now() - moment).total_seconds())
    if seconds < 120:
        return f"{seconds}s ago"
    if seconds < 7200:
        return f"{seconds // 60}m ago"
    return f"{seconds // 3600}h ago"


@register.filter
def pretty_json(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True)
