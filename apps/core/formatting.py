"""The one formatter for sizes, CPU, ages and accelerator summaries on every human-facing surface (staff pages,
Django admin; CSV and the API stay raw). Pure: takes plain values or model-like objects with the named attributes."""
from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def bytes_h(value) -> str:
    """549755813888 → '512 GiB' (binary units, as Kubernetes and agents report memory)."""
    if value is None:
        return "—"
    size = float(value)
    for unit in UNITS:
        if abs(size) < 1024 or unit == UNITS[-1]:
            if unit == "B":
                return f"{size:.0f} B"
            return f"{size:.0f} {unit}" if size == int(size) else f"{size:.1f} {unit}"
        size /= 1024
    return str(value)


def cores(milli) -> str:
    """16000 milli-CPU → '16'."""
    return "—" if milli is None else f"{milli / 1000:g}"


def age(moment: datetime | None, *, now: datetime | None = None) -> str:
    if moment is None:
        return "never"
    seconds = int(((now or datetime.now(UTC)) - moment).total_seconds())
    if seconds < 0:
        return "just now"
    if seconds < 120:
        return f"{seconds}s ago"
    if seconds < 7200:
        return f"{seconds // 60}m ago"
    if seconds < 172800:
        return f"{seconds // 3600}h ago"
    return f"{seconds // 86400}d ago"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds / 3600:.1f}h"


def accelerator_summary(items, units) -> list[str]:
    """One line per distinct accelerator: '4x NVIDIA A100 (cuda) · 40 GiB dedicated · 7/8 slots free'.

    An inventory item may stand for several allocatable slots (a chip shared between devices); the
    slot figures come from the placement units that reference the item.
    """
    slots: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for unit in units:
        for slot in getattr(unit, "accelerators", None) or []:
            entry = slots[slot.get("inventory_id", "")]
            entry[0] += int(slot.get("allocatable") or 0)
            entry[1] += int(slot.get("free") or 0)
    groups: dict[tuple, list] = {}
    for item in items:
        key = (item.vendor, item.model, tuple(item.apis or []), item.memory_bytes, item.memory_kind,
               item.memory_enforced, item.share_mode)
        group = groups.setdefault(key, [0, 0, 0])
        group[0] += 1
        allocatable, free = slots.get(item.inventory_id, (0, 0))
        group[1] += allocatable
        group[2] += free
    lines = []
    for (vendor, model, apis, memory, kind, enforced, share), (count, allocatable, free) in groups.items():
        name = device_name(vendor, model)
        memory_text = f"{bytes_h(memory)} {kind}" if memory else f"memory unknown, {kind}"
        if not enforced:
            memory_text += " (not enforced)"
        lines.append(f"{count}x {name} ({', '.join(apis) or 'no api'}) · {memory_text} · {share} · "
                     f"{free}/{allocatable} slots free")
    return lines


def device_name(vendor: str, model: str) -> str:
    """'NVIDIA A100-SXM4-80GB' (models usually carry the vendor already; add it only when missing)."""
    label = vendor_label(vendor)
    if not model:
        return label
    return model if model.lower().startswith(label.lower()) else f"{label} {model}"


def vendor_label(vendor: str) -> str:
    return {"nvidia": "NVIDIA", "apple": "Apple", "amd": "AMD", "intel": "Intel"}.get(vendor, vendor)
