"""``ExecutionRequirement``: what one unit of work needs from a Grove (docs/design.md §2). Pure: no Django.

A requirement is a frozen value with one JSON form (``to_json``), one strict parser (``from_json``,
raising ``ValidationFailed`` with a stable code and the exact field path) and a published JSON Schema
(``JSON_SCHEMA``). It is derived once, when a placement is made, and stored verbatim with it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from apps.accelerators.rules import AcceleratorRequest, parse_accelerators
from apps.accelerators.vocabulary import MAX_ACCELERATOR_COUNT, MAX_ACCELERATOR_MEMORY
from apps.core import validation as v
from apps.groves.vocabulary import (
    MAX_CPU_MILLI,
    MAX_MEMORY_BYTES,
    MAX_PLATFORMS,
    substrate_for_change_kind,
)
from apps.placement.vocabulary import (
    ARTIFACT_KINDS,
    CHANGE_KINDS,
    DEFAULT_CPU_MILLI,
    DEFAULT_MEMORY_BYTES,
    FAMILIES,
    ISOLATION_MODES,
    TRUST_LEVELS,
)

__all__ = ["AcceleratorRequest", "ExecutionRequirement", "parse_accelerators", "substrate_for_change_kind"]


@dataclass(frozen=True)
class Resources:
    cpu_milli: int = DEFAULT_CPU_MILLI
    memory_bytes: int = DEFAULT_MEMORY_BYTES

    def to_json(self) -> dict:
        return {"cpu_milli": self.cpu_milli, "memory_bytes": self.memory_bytes}


@dataclass(frozen=True)
class PlatformConstraint:
    """Acceptable ``os/arch[/variant]`` values in preference order; empty means any platform.

    ``sources`` says where the constraint came from: ``node:<id>``, ``artifact:<digest>``,
    ``grove:<slug>``, ``default``.
    """

    allowed: tuple[str, ...] = ()
    sources: tuple[str, ...] = ("default",)

    def to_json(self) -> dict:
        return {"allowed": list(self.allowed), "sources": list(self.sources)}


@dataclass(frozen=True)
class Compatibility:
    platform: PlatformConstraint = field(default_factory=PlatformConstraint)
    artifact_kind: str = "oci_image"
    change_kind: str = "k8s.job"
    isolation: str = "container"

    def to_json(self) -> dict:
        return {"platform": self.platform.to_json(), "artifact_kind": self.artifact_kind,
                "change_kind": self.change_kind, "isolation": self.isolation}


@dataclass(frozen=True)
class Target:
    """An explicit Grove (its id, or its slug). It never waives compatibility."""

    grove_id: str

    def to_json(self) -> dict:
        return {"grove_id": self.grove_id}


@dataclass(frozen=True)
class ExecutionRequirement:
    family: str
    compatibility: Compatibility
    resources: Resources = field(default_factory=Resources)
    accelerators: AcceleratorRequest | None = None
    trust: str = "trusted"
    target: Target | None = None

    def to_json(self) -> dict:
        body: dict[str, Any] = {"family": self.family, "resources": self.resources.to_json()}
        if self.accelerators is not None:
            body["accelerators"] = self.accelerators.to_json()
        body["compatibility"] = self.compatibility.to_json()
        body["trust"] = self.trust
        if self.target is not None:
            body["target"] = self.target.to_json()
        return body

    @classmethod
    def from_json(cls, data: Any) -> ExecutionRequirement:
        """Strict: unknown fields, bad platforms, negative resources, an Apple count other than 1 are errors.
        For a body from outside (the placement API); a stored requirement loads with ``from_stored``."""
        return parse_requirement(data)

    @classmethod
    def from_stored(cls, data: Any) -> ExecutionRequirement:
        """Trusted: a requirement this code derived and stored with ``to_json`` (on a pipeline node, on a
        placement), loaded without validating it again: it was parsed once, when it was derived.
        ``from_stored(r.to_json()) == r`` (tests/placement/test_requirement_roundtrip.py)."""
        compat = data["compatibility"]
        platform = compat.get("platform")
        resources = data.get("resources")
        accelerators = data.get("accelerators")
        target = data.get("target")
        return cls(
            family=data["family"],
            resources=Resources(**resources) if resources else Resources(),
            accelerators=None if accelerators is None else AcceleratorRequest.of_parsed(**accelerators),
            compatibility=Compatibility(
                platform=PlatformConstraint(allowed=tuple(platform["allowed"]),
                                            sources=tuple(platform.get("sources") or ("default",)))
                if platform else PlatformConstraint(),
                artifact_kind=compat["artifact_kind"], change_kind=compat["change_kind"],
                isolation=compat["isolation"],
            ),
            trust=data.get("trust", "trusted"),
            target=None if target is None else Target(grove_id=target["grove_id"]),
        )

    @property
    def substrate(self) -> str | None:
        """The substrate the change kind needs (``native.*`` -> native, ``k8s.*`` -> kubernetes)."""
        return substrate_for_change_kind(self.compatibility.change_kind)


# --- strict parsing -------------------------------------------------------------------------------

def parse_platforms(value: Any, field_path: str) -> tuple[str, ...]:
    return tuple(v.platforms(value, field_path, max_items=MAX_PLATFORMS))


def _sources(value: Any, field_path: str) -> tuple[str, ...]:
    items = v.array(value, field_path, max_items=MAX_PLATFORMS)
    out: list[str] = []
    for index, item in enumerate(items):
        source = v.string(item, f"{field_path}[{index}]", max_length=300)
        if source not in out:
            out.append(source)
    return tuple(out) or ("default",)


def parse_resources(value: Any, field_path: str = "resources", *, minimum: int = 0) -> Resources:
    value = v.obj(value, field_path, allowed={"cpu_milli", "memory_bytes"})
    return Resources(
        cpu_milli=v.integer(value.get("cpu_milli", DEFAULT_CPU_MILLI), f"{field_path}.cpu_milli",
                            minimum=minimum, maximum=MAX_CPU_MILLI),
        memory_bytes=v.integer(value.get("memory_bytes", DEFAULT_MEMORY_BYTES), f"{field_path}.memory_bytes",
                               minimum=minimum, maximum=MAX_MEMORY_BYTES),
    )


def parse_requirement(data: Any) -> ExecutionRequirement:
    data = v.obj(data, "", allowed={"family", "resources", "accelerators", "compatibility", "trust", "target"},
                 required={"family", "compatibility"})
    compat = v.obj(data["compatibility"], "compatibility",
                   allowed={"platform", "artifact_kind", "change_kind", "isolation"},
                   required={"artifact_kind", "change_kind", "isolation"})
    platform = PlatformConstraint()
    if "platform" in compat:
        raw = v.obj(compat["platform"], "compatibility.platform", allowed={"allowed", "sources"},
                    required={"allowed"})
        platform = PlatformConstraint(
            allowed=parse_platforms(raw["allowed"], "compatibility.platform.allowed"),
            sources=_sources(raw.get("sources", []), "compatibility.platform.sources"),
        )
    target = None
    if data.get("target") is not None:
        raw_target = v.obj(data["target"], "target", allowed={"grove_id"}, required={"grove_id"})
        target = Target(grove_id=v.string(raw_target["grove_id"], "target.grove_id", max_length=100).strip())
    return ExecutionRequirement(
        family=v.choice(data["family"], "family", choices=FAMILIES),
        resources=parse_resources(data.get("resources", {})),
        accelerators=None if data.get("accelerators") is None else parse_accelerators(data["accelerators"]),
        compatibility=Compatibility(
            platform=platform,
            artifact_kind=v.choice(compat["artifact_kind"], "compatibility.artifact_kind", choices=ARTIFACT_KINDS),
            change_kind=v.choice(compat["change_kind"], "compatibility.change_kind", choices=CHANGE_KINDS),
            isolation=v.choice(compat["isolation"], "compatibility.isolation", choices=ISOLATION_MODES),
        ),
        trust=v.choice(data.get("trust", "trusted"), "trust", choices=TRUST_LEVELS),
        target=target,
    )


# --- the published schema (served with the API and checked against to_json() in tests) -----------

_NON_NEGATIVE = {"type": "integer", "minimum": 0}
JSON_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://forest.example/schemas/execution-requirement.json",
    "title": "ExecutionRequirement",
    "type": "object",
    "additionalProperties": False,
    "required": ["family", "compatibility"],
    "properties": {
        "family": {"enum": list(FAMILIES), "description": "The Grove role the work needs."},
        "resources": {
            "type": "object", "additionalProperties": False,
            "properties": {"cpu_milli": {**_NON_NEGATIVE, "maximum": MAX_CPU_MILLI, "default": DEFAULT_CPU_MILLI},
                           "memory_bytes": {**_NON_NEGATIVE, "maximum": MAX_MEMORY_BYTES,
                                            "default": DEFAULT_MEMORY_BYTES}},
        },
        "accelerators": {
            "type": ["object", "null"], "additionalProperties": False, "required": ["count"],
            "properties": {
                "count": {"type": "integer", "minimum": 1, "maximum": MAX_ACCELERATOR_COUNT},
                "vendor": {"type": "string", "minLength": 1, "maxLength": 50},
                "api": {"type": "string", "minLength": 1, "maxLength": 30,
                        "description": "Normalised from vendor when absent: nvidia->cuda, apple->metal."},
                "min_memory_bytes": {**_NON_NEGATIVE, "maximum": MAX_ACCELERATOR_MEMORY},
            },
            # An Apple request is for exactly one unified-memory GPU.
            "if": {"properties": {"vendor": {"const": "apple"}}, "required": ["vendor"]},
            "then": {"properties": {"count": {"const": 1}}},
        },
        "compatibility": {
            "type": "object", "additionalProperties": False,
            "required": ["artifact_kind", "change_kind", "isolation"],
            "properties": {
                "platform": {
                    "type": "object", "additionalProperties": False, "required": ["allowed"],
                    "properties": {
                        "allowed": {"type": "array", "maxItems": MAX_PLATFORMS, "uniqueItems": True,
                                    "items": {"type": "string", "pattern": r"^[a-z0-9]+/[a-z0-9]+(/[a-z0-9]+)?$"},
                                    "description": "os/arch[/variant] in preference order; empty = any."},
                        "sources": {"type": "array", "maxItems": MAX_PLATFORMS,
                                    "items": {"type": "string", "minLength": 1}},
                    },
                },
                "artifact_kind": {"enum": list(ARTIFACT_KINDS)},
                "change_kind": {"enum": list(CHANGE_KINDS)},
                "isolation": {"enum": list(ISOLATION_MODES)},
            },
        },
        "trust": {"enum": list(TRUST_LEVELS), "default": "trusted"},
        "target": {
            "type": ["object", "null"], "additionalProperties": False, "required": ["grove_id"],
            "properties": {"grove_id": {"type": "string", "minLength": 1, "maxLength": 100}},
        },
    },
}
