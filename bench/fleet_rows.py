"""Model rows of a benchmark fleet, as a heartbeat leaves them (shared by bench/placement.py and bench/c1m.py).

Imported after ``django.setup()``; sets nothing of its own."""
from __future__ import annotations


def grove_rows(index: int, *, native: bool, roles: list[str], platforms: list[str], isolation: list[str],
               kinds: list[str], report_units: list[dict], accelerators: list[dict], now, into: tuple) -> None:
    """Append the Grove, its indexed capabilities, its PlacementUnit rows and its AcceleratorInventoryItem
    rows (unsaved) to the four lists of ``into``."""
    from apps.groves.models import AcceleratorInventoryItem, Grove, PlacementUnit
    from apps.groves.services import _capabilities

    capacity = {"placement_units": report_units, "accelerators": accelerators}
    grove = Grove(slug=f"g{index:05d}", name=f"g{index}", roles=roles, substrate="native" if native else "kubernetes",
                  platforms=platforms, isolation_modes=isolation, change_kinds=kinds, last_heartbeat_at=now,
                  last_polled_at=now,  # ready: an agent polls for its work (docs/decisions.md "Grove readiness")
                  capacity=capacity, capacity_reported_at=now)
    units = [PlacementUnit(grove=grove, unit_id=u["id"], cpu_milli_allocatable=u["cpu_milli"]["allocatable"],
                           cpu_milli_free=u["cpu_milli"]["free"],
                           memory_bytes_allocatable=u["memory_bytes"]["allocatable"],
                           memory_bytes_free=u["memory_bytes"]["free"], accelerators=u["accelerators"])
             for u in report_units]
    items = [AcceleratorInventoryItem(grove=grove, inventory_id=a["id"], kind="gpu", vendor=a["vendor"],
                                      model=a["model"], apis=a["apis"], memory_bytes=a["memory_bytes"],
                                      memory_kind=a["memory_kind"], memory_enforced=a["memory_enforced"],
                                      share_mode=a["share_mode"]) for a in accelerators]
    groves, caps, all_units, all_items = into
    groves.append(grove)
    caps.extend(_capabilities(grove))
    all_units.extend(units)
    all_items.extend(items)
