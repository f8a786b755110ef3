"""Validation of what a Grove says about itself (enrollment and heartbeat bodies). Pure: no Django.

Returns normalised plain data or raises ``ValidationFailed`` with the exact field path, before anything
is written, so a bad report leaves the stored state untouched.
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Sequence
from typing import Any

from apps.core import validation as v
from apps.groves.vocabulary import (
    MAX_ACCELERATOR_COUNT,
    MAX_ACCELERATOR_MEMORY,
    MAX_CPU_MILLI,
    MAX_INVENTORY_ITEMS,
    MAX_LOG_LINE,
    MAX_LOG_LINES,
    MAX_MEMORY_BYTES,
    MAX_PLATFORMS,
    MAX_UNITS,
    SUBSTRATE_CHANGE_KINDS,
    AcceleratorKind,
    ChangeKind,
    IsolationMode,
    MemoryKind,
    ShareMode,
    Substrate,
)


def platforms(value: Any, field: str = "platforms") -> list[str]:
    return v.platforms(value, field, max_items=MAX_PLATFORMS, blank="A Grove must report at least one platform.")


def enrollment(body: Any) -> dict[str, Any]:
    body = v.obj(body, "", allowed={"token", "name", "substrate", "platforms", "version"},
                 required={"token", "name", "substrate", "platforms"})
    return {
        "token": v.string(body["token"], "token", max_length=200),
        "name": v.string(body["name"], "name", max_length=200),
        "substrate": v.choice(body["substrate"], "substrate", choices=list(Substrate)),
        "platforms": platforms(body["platforms"]),
        "version": v.string(body.get("version", ""), "version", max_length=100, allow_empty=True),
    }


def _accelerator(item: Any, field: str) -> dict[str, Any]:
    item = v.obj(item, field,
                 allowed={"id", "kind", "vendor", "model", "apis", "memory_bytes", "memory_kind",
                          "memory_enforced", "share_mode"},
                 required={"id", "kind", "vendor", "apis", "memory_kind", "memory_enforced", "share_mode"})
    memory = item.get("memory_bytes")
    apis = v.array(item["apis"], f"{field}.apis", max_items=16)
    return {
        "id": v.string(item["id"], f"{field}.id"),
        "kind": v.choice(item["kind"], f"{field}.kind", choices=list(AcceleratorKind)),
        "vendor": v.string(item["vendor"], f"{field}.vendor", max_length=50).strip().lower(),
        "model": v.string(item.get("model", ""), f"{field}.model", allow_empty=True),
        "apis": sorted({v.string(api, f"{field}.apis[{i}]", max_length=30).strip().lower()
                        for i, api in enumerate(apis)}),
        "memory_bytes": None if memory is None
        else v.integer(memory, f"{field}.memory_bytes", maximum=MAX_ACCELERATOR_MEMORY),
        "memory_kind": v.choice(item["memory_kind"], f"{field}.memory_kind", choices=list(MemoryKind)),
        "memory_enforced": v.boolean(item["memory_enforced"], f"{field}.memory_enforced"),
        "share_mode": v.choice(item["share_mode"], f"{field}.share_mode", choices=list(ShareMode)),
    }


def _amount(value: Any, field: str, maximum: int) -> dict[str, Any]:
    value = v.obj(value, field, allowed={"allocatable", "free"}, required={"allocatable", "free"})
    allocatable = v.integer(value["allocatable"], f"{field}.allocatable", maximum=maximum)
    free = v.integer(value["free"], f"{field}.free", maximum=maximum)
    if free > allocatable:
        raise v.fail("free_exceeds_allocatable", f"{field}.free ({free}) exceeds allocatable ({allocatable}).",
                     f"{field}.free")
    return {"allocatable": allocatable, "free": free}


def _unit(unit: Any, field: str, inventory_ids: set[str]) -> dict[str, Any]:
    unit = v.obj(unit, field, allowed={"id", "cpu_milli", "memory_bytes", "accelerators"},
                 required={"id", "cpu_milli", "memory_bytes"})
    slots = []
    seen: set[str] = set()
    for index, slot in enumerate(v.array(unit.get("accelerators", []), f"{field}.accelerators",
                                         max_items=MAX_INVENTORY_ITEMS)):
        path = f"{field}.accelerators[{index}]"
        slot = v.obj(slot, path, allowed={"inventory_id", "allocatable", "free"},
                     required={"inventory_id", "allocatable", "free"})
        inventory_id = v.string(slot["inventory_id"], f"{path}.inventory_id")
        if inventory_id not in inventory_ids:
            raise v.fail("unknown_inventory_id",
                         f"Placement unit refers to accelerator '{inventory_id}', which is not in the inventory.",
                         f"{path}.inventory_id")
        if inventory_id in seen:
            raise v.fail("duplicate_inventory_id", f"Accelerator '{inventory_id}' is listed twice in one unit.",
                         f"{path}.inventory_id")
        seen.add(inventory_id)
        amount = _amount({"allocatable": slot["allocatable"], "free": slot["free"]}, path, MAX_ACCELERATOR_COUNT)
        slots.append({"inventory_id": inventory_id, **amount})
    return {
        "id": v.string(unit["id"], f"{field}.id"),
        "cpu_milli": _amount(unit["cpu_milli"], f"{field}.cpu_milli", MAX_CPU_MILLI),
        "memory_bytes": _amount(unit["memory_bytes"], f"{field}.memory_bytes", MAX_MEMORY_BYTES),
        "accelerators": slots,
    }


def capacity(value: Any, field: str = "capacity") -> dict[str, Any]:
    value = v.obj(value, field, allowed={"placement_units", "accelerators"}, required={"placement_units"})
    accelerators = []
    inventory_ids: set[str] = set()
    for index, item in enumerate(v.array(value.get("accelerators", []), f"{field}.accelerators",
                                         max_items=MAX_INVENTORY_ITEMS)):
        parsed = _accelerator(item, f"{field}.accelerators[{index}]")
        if parsed["id"] in inventory_ids:
            raise v.fail("duplicate_inventory_id", f"Accelerator id '{parsed['id']}' is reported twice.",
                         f"{field}.accelerators[{index}].id")
        inventory_ids.add(parsed["id"])
        accelerators.append(parsed)
    units = []
    unit_ids: set[str] = set()
    for index, unit in enumerate(v.array(value["placement_units"], f"{field}.placement_units",
                                         max_items=MAX_UNITS)):
        parsed = _unit(unit, f"{field}.placement_units[{index}]", inventory_ids)
        if parsed["id"] in unit_ids:
            raise v.fail("duplicate_unit_id", f"Placement unit id '{parsed['id']}' is reported twice.",
                         f"{field}.placement_units[{index}].id")
        unit_ids.add(parsed["id"])
        units.append(parsed)
    return {"placement_units": units, "accelerators": accelerators}


def mesh(value: Any, *, networks: Sequence[str], field: str = "mesh") -> dict[str, Any] | None:
    """A native Grove's mesh address and ingress proxy port: an IP literal (never a name, which the edge
    would have to resolve) inside one of the configured mesh networks (``FOREST_MESH_NETWORKS``)."""
    if value is None:
        return None
    value = v.obj(value, field, allowed={"address", "proxy_port"}, required={"address", "proxy_port"})
    literal = v.string(value["address"], f"{field}.address", max_length=45)
    try:
        address = ipaddress.ip_address(literal)
    except ValueError:
        raise v.fail("mesh_address_invalid", f"'{literal}' is not an IP address; the mesh address is an IP "
                     "literal, never a host name.", f"{field}.address") from None
    if not any(address in ipaddress.ip_network(network, strict=False) for network in networks):
        raise v.fail("mesh_address_outside_range", f"{address} is outside the mesh networks this Host accepts "
                     f"({', '.join(networks) or 'none configured: FOREST_MESH_NETWORKS'}).", f"{field}.address")
    port = v.integer(value["proxy_port"], f"{field}.proxy_port", minimum=1, maximum=65535)
    return {"address": str(address), "proxy_port": port}


def heartbeat(body: Any, *, substrate: str | None, mesh_networks: Sequence[str] = ()) -> dict[str, Any]:
    """Validate a heartbeat. ``substrate=None`` skips the substrate checks: only for the unchanged-report
    fast path, where a matching digest proves the same lists already passed them for this Grove."""
    body = v.obj(body, "", allowed={"version", "change_kinds", "isolation", "capacity", "log_tail", "mesh"},
                 required={"version", "change_kinds", "capacity"})
    change_kinds = v.choices_list(body["change_kinds"], "change_kinds", choices=list(ChangeKind))
    isolation = v.choices_list(body.get("isolation", []), "isolation", choices=list(IsolationMode))
    if substrate is not None:
        allowed_kinds = SUBSTRATE_CHANGE_KINDS[Substrate(substrate)]
        for index, kind in enumerate(change_kinds):
            if kind not in allowed_kinds:
                raise v.fail("change_kind_not_for_substrate",
                             f"A {substrate} Grove cannot advertise '{kind}'.", f"change_kinds[{index}]")
        if IsolationMode.HOST_PROCESS in isolation and substrate != Substrate.NATIVE:
            raise v.fail("isolation_not_for_substrate", "Only a native Grove offers host_process isolation.",
                         "isolation")
        if body.get("mesh") is not None and substrate != Substrate.NATIVE:
            raise v.fail("mesh_not_for_substrate", "Only a native Grove reports a mesh address.", "mesh")
    log_tail = v.lines(body.get("log_tail", []), "log_tail", max_items=MAX_LOG_LINES, max_length=MAX_LOG_LINE)
    return {
        "mesh": mesh(body.get("mesh"), networks=mesh_networks),
        "version": v.string(body["version"], "version", max_length=100, allow_empty=True),
        "change_kinds": change_kinds,
        "isolation": isolation,
        "capacity": capacity(body["capacity"]),
        "log_tail": log_tail,
    }


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def capacity_digests(capacity_report: dict[str, Any], change_kinds: list[str], isolation: list[str]) -> tuple[str, str]:
    """(shape, free) identities of what was reported. *Shape* is everything but free counts: units and
    their allocatable amounts, the accelerator inventory, change kinds and isolation; a change rewrites
    units, inventory, capabilities and history. *Free* covers only the free counts, which a busy Grove
    changes on most beats: a change is one small write of those counts."""
    shape_units, free_units = [], []
    for unit in capacity_report["placement_units"]:
        shape_units.append([unit["id"], unit["cpu_milli"]["allocatable"], unit["memory_bytes"]["allocatable"],
                            [[a["inventory_id"], a["allocatable"]] for a in unit["accelerators"]]])
        free_units.append(free_counts(unit))
    return (_digest([shape_units, capacity_report["accelerators"], change_kinds, isolation]),
            _digest(free_units))


def free_counts(unit: dict[str, Any]) -> list[Any]:
    """One unit's free counts as the free digest and the free-count write read them."""
    return [unit["id"], unit["cpu_milli"]["free"], unit["memory_bytes"]["free"],
            [a["free"] for a in unit["accelerators"]]]
