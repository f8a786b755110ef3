"""The enrollment and heartbeat bodies, declared once (``apps.core.bodies``): its validation, its OpenAPI schema and the
agent-facing docs come from these classes. Pure: no Django.

Cross-field rules (free <= allocatable, a unit's slots name reported devices once, ids are unique) are
validators here; the checks that depend on the Grove (its substrate) stay in ``apps.groves.rules``.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from apps.core.bodies import Body, BodyError, choices, count, literal, platforms, text
from apps.groves import mesh
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
    AcceleratorKind,
    ChangeKind,
    IsolationMode,
    MemoryKind,
    ShareMode,
    Substrate,
)

ChangeKindName = Literal[tuple(m.value for m in ChangeKind)]  # type: ignore[valid-type]
IsolationName = Literal[tuple(m.value for m in IsolationMode)]  # type: ignore[valid-type]
AcceleratorKindName = Literal[tuple(m.value for m in AcceleratorKind)]  # type: ignore[valid-type]
MemoryKindName = Literal[tuple(m.value for m in MemoryKind)]  # type: ignore[valid-type]
ShareModeName = Literal[tuple(m.value for m in ShareMode)]  # type: ignore[valid-type]
SubstrateName = Literal[tuple(m.value for m in Substrate)]  # type: ignore[valid-type]


class EnrollRequest(Body):
    """``POST groves/enroll``: spend a one-time token to become a Grove."""

    token: text(200, description="The one-time enrollment token")  # type: ignore[valid-type]
    name: text(200, description="The Grove's name")  # type: ignore[valid-type]
    substrate: SubstrateName = Field(..., description="kubernetes or native")  # type: ignore[valid-type]
    platforms: platforms(MAX_PLATFORMS, blank="A Grove must report at least one platform.",  # type: ignore[valid-type]
                         description="What it runs, os/arch[/variant] (normalised, repeats dropped)")
    version: text(100, blank=True, description="The agent's version string") = ""  # type: ignore[valid-type]


class _HeartbeatAmount(Body):
    @model_validator(mode="after")
    def _free_fits(self) -> _HeartbeatAmount:
        free, allocatable = self.free, self.allocatable  # type: ignore[attr-defined]
        if free > allocatable:
            raise BodyError("free_exceeds_allocatable", f"{{field}}.free ({free}) exceeds allocatable "
                            f"({allocatable}).", at="free")
        return self


class HeartbeatCpuAmount(_HeartbeatAmount):
    allocatable: count(0, MAX_CPU_MILLI)  # type: ignore[valid-type]
    free: count(0, MAX_CPU_MILLI)  # type: ignore[valid-type]


class HeartbeatMemoryAmount(_HeartbeatAmount):
    allocatable: count(0, MAX_MEMORY_BYTES)  # type: ignore[valid-type]
    free: count(0, MAX_MEMORY_BYTES)  # type: ignore[valid-type]


class HeartbeatUnitAccelerator(_HeartbeatAmount):
    """A unit's share of one reported device (``inventory_id`` names an entry of ``capacity.accelerators``)."""

    inventory_id: text()  # type: ignore[valid-type]
    allocatable: count(0, MAX_ACCELERATOR_COUNT)  # type: ignore[valid-type]
    free: count(0, MAX_ACCELERATOR_COUNT)  # type: ignore[valid-type]


class HeartbeatPlacementUnit(Body):
    """Where one unit of work can land whole (a machine, a node pool), with its allocatable and free."""

    id: text()  # type: ignore[valid-type]
    cpu_milli: HeartbeatCpuAmount
    memory_bytes: HeartbeatMemoryAmount
    accelerators: list[HeartbeatUnitAccelerator] = Field([], max_length=MAX_INVENTORY_ITEMS)

    @model_validator(mode="after")
    def _slots_once(self) -> HeartbeatPlacementUnit:
        seen: set[str] = set()
        for index, slot in enumerate(self.accelerators):
            if slot.inventory_id in seen:
                raise BodyError("duplicate_inventory_id", literal(f"Accelerator '{slot.inventory_id}' is listed "
                                                                  "twice in one unit."),
                                at=f"accelerators[{index}].inventory_id")
            seen.add(slot.inventory_id)
        return self


class HeartbeatAccelerator(Body):
    """One reported device."""

    id: text()  # type: ignore[valid-type]
    kind: AcceleratorKindName  # type: ignore[valid-type]
    vendor: text(50)  # type: ignore[valid-type]
    model: text(blank=True) = ""  # type: ignore[valid-type]
    apis: list[text(30)] = Field(..., max_length=16)  # type: ignore[valid-type]
    memory_bytes: count(0, MAX_ACCELERATOR_MEMORY) | None = None  # type: ignore[valid-type]
    memory_kind: MemoryKindName  # type: ignore[valid-type]
    memory_enforced: bool
    share_mode: ShareModeName  # type: ignore[valid-type]


class HeartbeatCapacity(Body):
    placement_units: list[HeartbeatPlacementUnit] = Field(..., max_length=MAX_UNITS)
    accelerators: list[HeartbeatAccelerator] = Field([], max_length=MAX_INVENTORY_ITEMS)

    @model_validator(mode="after")
    def _references(self) -> HeartbeatCapacity:
        inventory: set[str] = set()
        for index, device in enumerate(self.accelerators):
            if device.id in inventory:
                raise BodyError("duplicate_inventory_id", f"Accelerator id '{device.id}' is reported twice.",
                                at=f"accelerators[{index}].id")
            inventory.add(device.id)
        units: set[str] = set()
        for index, unit in enumerate(self.placement_units):
            for slot_index, slot in enumerate(unit.accelerators):
                if slot.inventory_id not in inventory:
                    raise BodyError("unknown_inventory_id", f"Placement unit refers to accelerator "
                                    f"'{slot.inventory_id}', which is not in the inventory.",
                                    at=f"placement_units[{index}].accelerators[{slot_index}].inventory_id")
            if unit.id in units:
                raise BodyError("duplicate_unit_id", f"Placement unit id '{unit.id}' is reported twice.",
                                at=f"placement_units[{index}].id")
            units.add(unit.id)
        return self

    def to_json(self) -> dict:
        """The stored form: vendors and apis normalised (lower case, apis sorted, repeats dropped)."""
        data = self.model_dump()  # one pass in pydantic-core, then the two normalisations in place
        for device in data["accelerators"]:
            device["vendor"] = device["vendor"].strip().lower()
            device["apis"] = sorted({api.strip().lower() for api in device["apis"]})
        return data


def _mesh_policy(info: ValidationInfo) -> mesh.MeshPolicy:
    context = info.context or {}
    return context.get("mesh") or mesh.MeshPolicy(networks=tuple(context.get("mesh_networks", ())))


class HeartbeatMesh(Body):
    """A native Grove's mesh address and ingress proxy port, under the operator's mesh policy
    (``apps.groves.mesh``: inside ``FOREST_MESH_NETWORKS``, never the edge's or Host's own address, a strict
    IP literal; the port within ``FOREST_MESH_PROXY_PORTS``)."""

    address: text(45)  # type: ignore[valid-type]
    proxy_port: count(1, 65535)  # type: ignore[valid-type]

    @field_validator("address")
    @classmethod
    def _inside_the_mesh(cls, literal: str, info: ValidationInfo) -> str:
        try:
            return mesh.check_address(literal, _mesh_policy(info))
        except mesh.MeshRefused as refused:
            raise BodyError(refused.code, refused.detail) from None

    @field_validator("proxy_port")
    @classmethod
    def _bounded_port(cls, port: int, info: ValidationInfo) -> int:
        try:
            return mesh.check_port(port, _mesh_policy(info))
        except mesh.MeshRefused as refused:
            raise BodyError(refused.code, refused.detail) from None


class HeartbeatRequest(Body):
    """``POST groves/{id}/heartbeat``: what a Grove can run now and what it has free."""

    version: text(100, blank=True, description="The agent's version string")  # type: ignore[valid-type]
    change_kinds: choices(ChangeKindName, description="The kinds of change this Grove runs")  # type: ignore[valid-type]
    isolation: choices(IsolationName) = []  # type: ignore[valid-type]
    capacity: HeartbeatCapacity
    log_tail: list[text(MAX_LOG_LINE, blank=True)] = Field(  # type: ignore[valid-type]
        [], max_length=MAX_LOG_LINES, description="The agent's latest log lines")
    mesh: HeartbeatMesh | None = None
