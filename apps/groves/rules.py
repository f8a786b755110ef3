"""Validation of what a Grove says about itself (enrollment and heartbeat bodies, each parsed from its
declaration in ``apps.groves.bodies``). Pure: no Django.

Returns normalised plain data or raises ``ValidationFailed`` with the exact field path, before anything
is written, so a bad report leaves the stored state untouched.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from apps.core import bodies
from apps.core import validation as v
from apps.groves.bodies import EnrollRequest, HeartbeatRequest
from apps.groves.mesh import MeshPolicy
from apps.groves.vocabulary import (
    MAX_PLATFORMS,
    SUBSTRATE_CHANGE_KINDS,
    IsolationMode,
    Substrate,
)


def platforms(value: Any, field: str = "platforms") -> list[str]:
    return v.platforms(value, field, max_items=MAX_PLATFORMS, blank="A Grove must report at least one platform.")


def enrollment(body: Any) -> dict[str, Any]:
    """Validate an enrollment (its one declaration: ``apps.groves.bodies.EnrollRequest``)."""
    return bodies.parse(EnrollRequest, body).model_dump()


def heartbeat(body: Any, *, substrate: str | None, mesh_networks: Sequence[str] = (),
              mesh: MeshPolicy | None = None) -> dict[str, Any]:
    """Validate a heartbeat (its one declaration: ``apps.groves.bodies.HeartbeatRequest``). ``substrate=None``
    skips the substrate checks: only for the unchanged-report fast path, where a matching digest proves the
    same lists already passed them for this Grove. ``mesh`` is the operator's mesh policy (else one of
    ``mesh_networks`` alone, with the default port bounds)."""
    beat = bodies.parse(HeartbeatRequest, body,
                        context={"mesh": mesh or MeshPolicy(networks=tuple(mesh_networks))})
    if substrate is not None:
        allowed_kinds = SUBSTRATE_CHANGE_KINDS[Substrate(substrate)]
        for index, kind in enumerate(beat.change_kinds):
            if kind not in allowed_kinds:
                raise v.fail("change_kind_not_for_substrate",
                             f"A {substrate} Grove cannot advertise '{kind}'.", f"change_kinds[{index}]")
        if IsolationMode.HOST_PROCESS in beat.isolation and substrate != Substrate.NATIVE:
            raise v.fail("isolation_not_for_substrate", "Only a native Grove offers host_process isolation.",
                         "isolation")
        if beat.mesh is not None and substrate != Substrate.NATIVE:
            raise v.fail("mesh_not_for_substrate", "Only a native Grove reports a mesh address.", "mesh")
    return {
        "mesh": None if beat.mesh is None else {"address": beat.mesh.address, "proxy_port": beat.mesh.proxy_port},
        "version": beat.version,
        "change_kinds": list(beat.change_kinds),
        "isolation": list(beat.isolation),
        "capacity": beat.capacity.to_json(),
        "log_tail": list(beat.log_tail),
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
