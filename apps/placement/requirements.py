"""``ExecutionRequirement``: what one unit of work needs from a Grove (DESIGN.md §2). Pure: no Django.

A requirement is a frozen value with one JSON form (``to_json``), one strict parser (``from_json``,
raising ``ValidationFailed`` with a stable code and the exact field path) and a published JSON Schema
(``JSON_SCHEMA``). It is derived once, when a placement is made, and stored verbatim with it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from apps.core import validation as v
from apps.core.platforms import PlatformError, normalise_platform

FAMILIES = ("build", "runtime", "compute")
ARTIFACT_KINDS = ("oci_image", "native_bundle", "host_command", "none")
CHANGE_KINDS = ("k8s.build_job", "k8s.job", "k8s.deployment", "native.job", "native.workload")
ISOLATION_MODES = ("container", "vm", "host_process")
TRUST_LEVELS = ("trusted", "untrusted")
# Vendor -> the API a request for that vendor means (NVIDIA -> CUDA, Apple -> Metal).
VENDOR_APIS = {"nvidia": "cuda", "apple": "metal", "amd": "rocm", "intel": "oneapi"}
# A unified-memory Apple GPU is one cooperative device per machine: a request can only ever get one.
SINGLE_DEVICE_VENDORS = frozenset({"apple"})

MAX_CPU_MILLI = 100_000_000
MAX_MEMORY_BYTES = 1 << 52
MAX_ACCELERATORS = 4096
MAX_ACCELERATOR_MEMORY = 1 << 44
DEFAULT_CPU_MILLI = 1000
DEFAULT_MEMORY_BYTES = 1 << 30


@dataclass(frozen=True)
class Resources:
    cpu_milli: int = DEFAULT_CPU_MILLI
    memory_bytes: int = DEFAULT_MEMORY_BYTES

    def to_json(self) -> dict:
        return {"cpu_milli": self.cpu_milli, "memory_bytes": self.memory_bytes}


@dataclass(frozen=True)
class AcceleratorRequest:
    """``count`` devices; ``vendor`` optional; ``api`` normalised from the vendor when not given."""

    count: int = 1
    vendor: str | None = None
    api: str | None = None
    min_memory_bytes: int = 0

    def to_json(self) -> dict:
        body: dict[str, Any] = {"count": self.count}
        if self.vendor:
            body["vendor"] = self.vendor
        if self.api:
            body["api"] = self.api
        if self.min_memory_bytes:
            body["min_memory_bytes"] = self.min_memory_bytes
        return body


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
        """Strict: unknown fields, bad platforms, negative resources, an Apple count other than 1 are errors."""
        return parse_requirement(data)

    @property
    def substrate(self) -> str | None:
        """The substrate the change kind needs (``native.*`` -> native, ``k8s.*`` -> kubernetes)."""
        return substrate_for_change_kind(self.compatibility.change_kind)


def substrate_for_change_kind(change_kind: str) -> str | None:
    if change_kind.startswith("native."):
        return "native"
    if change_kind.startswith("k8s."):
        return "kubernetes"
    return None


# --- strict parsing -------------------------------------------------------------------------------

def parse_platforms(value: Any, field_path: str) -> tuple[str, ...]:
    items = v.array(value, field_path, max_items=32)
    out: list[str] = []
    for index, item in enumerate(items):
        try:
            platform = normalise_platform(item)
        except PlatformError as exc:
            raise v.fail("invalid_platform", str(exc), f"{field_path}[{index}]") from None
        if platform not in out:
            out.append(platform)
    return tuple(out)


def _sources(value: Any, field_path: str) -> tuple[str, ...]:
    items = v.array(value, field_path, max_items=32)
    out: list[str] = []
    for index, item in enumerate(items):
        source = v.string(item, f"{field_path}[{index}]", max_length=300)
        if source not in out:
            out.append(source)
    return tuple(out) or ("default",)


def parse_accelerators(value: Any, field_path: str = "accelerators") -> AcceleratorRequest:
    value = v.obj(value, field_path, allowed={"count", "vendor", "api", "min_memory_bytes"}, required={"count"})
    count = v.integer(value["count"], f"{field_path}.count", minimum=1, maximum=MAX_ACCELERATORS)
    vendor = value.get("vendor")
    if vendor is not None:
        vendor = v.string(vendor, f"{field_path}.vendor", max_length=50).strip().lower()
    api = value.get("api")
    if api is not None:
        api = v.string(api, f"{field_path}.api", max_length=30).strip().lower()
    implied = VENDOR_APIS.get(vendor or "")
    if api is None:
        api = implied
    elif implied is not None and api != implied:
        raise v.fail("accelerator_api_mismatch",
                     f"A {vendor} accelerator speaks {implied}, not {api}; drop 'api' or fix the vendor.",
                     f"{field_path}.api")
    if vendor in SINGLE_DEVICE_VENDORS and count != 1:
        raise v.fail("apple_accelerator_count",
                     f"An Apple GPU request must have count 1 (one unified-memory GPU per machine), not {count}.",
                     f"{field_path}.count")
    min_memory = v.integer(value.get("min_memory_bytes", 0), f"{field_path}.min_memory_bytes",
                           maximum=MAX_ACCELERATOR_MEMORY)
    return AcceleratorRequest(count=count, vendor=vendor, api=api, min_memory_bytes=min_memory)


def parse_resources(value: Any, field_path: str = "resources") -> Resources:
    value = v.obj(value, field_path, allowed={"cpu_milli", "memory_bytes"})
    return Resources(
        cpu_milli=v.integer(value.get("cpu_milli", DEFAULT_CPU_MILLI), f"{field_path}.cpu_milli",
                            maximum=MAX_CPU_MILLI),
        memory_bytes=v.integer(value.get("memory_bytes", DEFAULT_MEMORY_BYTES), f"{field_path}.memory_bytes",
                               maximum=MAX_MEMORY_BYTES),
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
                "count": {"type": "integer", "minimum": 1, "maximum": MAX_ACCELERATORS},
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
                        "allowed": {"type": "array", "maxItems": 32, "uniqueItems": True,
                                    "items": {"type": "string", "pattern": r"^[a-z0-9]+/[a-z0-9]+(/[a-z0-9]+)?$"},
                                    "description": "os/arch[/variant] in preference order; empty = any."},
                        "sources": {"type": "array", "maxItems": 32, "items": {"type": "string", "minLength": 1}},
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
