"""Deriving an ``ExecutionRequirement`` from the thing that asks for work. Pure: no Django.

The app that owns a kind of work maps it to its family, change kind, artifact kind and isolation
(``apps.pipelines.rules.node_requirement`` for pipeline nodes) and builds it with ``requirement``.

Called when a placement is *made*, never when a stored one is read back: a retry keeps the requirement
it was placed with even if the node spec or the derivation rules change later.

Every platform constraint records where it came from (``node:<id>``, ``artifact:<digest>``,
``grove:<slug>``, ``default``); two sources that share no platform are an error here, before any Grove
is looked at.
"""
from __future__ import annotations

from apps.core import validation as v
from apps.core.errors import ValidationFailed
from apps.placement.requirements import (
    AcceleratorRequest,
    Compatibility,
    ExecutionRequirement,
    PlatformConstraint,
    Resources,
    Target,
    parse_accelerators,
    parse_platforms,
    parse_resources,
)
from apps.placement.vocabulary import TRUST_LEVELS


def _merge_platforms(constraints: list[tuple[str, tuple[str, ...]]], field_path: str) -> PlatformConstraint:
    """Intersect every non-empty constraint (keeping the first one's preference order)."""
    allowed: tuple[str, ...] | None = None
    sources: list[str] = []
    for source, platforms in constraints:
        if not platforms:
            continue
        sources.append(source)
        if allowed is None:
            allowed = platforms
            continue
        narrowed = tuple(p for p in allowed if p in platforms)
        if not narrowed:
            raise ValidationFailed(
                "platform_conflict",
                f"{source} allows only {', '.join(platforms)}, which shares no platform with "
                f"{', '.join(allowed)} from {', '.join(sources[:-1])}.",
                field=field_path,
            )
        allowed = narrowed
    if allowed is None:
        return PlatformConstraint(allowed=(), sources=("default",))
    return PlatformConstraint(allowed=allowed, sources=tuple(sources))


def _platform(spec: dict, *, source: str, artifact: dict | None, grove: dict | None,
              field_path: str = "platform") -> PlatformConstraint:
    constraints: list[tuple[str, tuple[str, ...]]] = []
    if spec.get("platform") is not None:
        constraints.append((source, parse_platforms(spec["platform"], field_path)))
    if artifact and artifact.get("platform"):
        raw = artifact["platform"]
        platforms = parse_platforms(raw if isinstance(raw, list) else [raw], "artifact.platform")
        constraints.append((f"artifact:{artifact.get('digest', 'unknown')}", platforms))
    if grove and grove.get("platforms"):
        platforms = parse_platforms(grove["platforms"], "grove.platforms")
        constraints.append((f"grove:{grove.get('slug') or grove.get('id')}", platforms))
    return _merge_platforms(constraints, field_path)


def _accelerators(spec: dict) -> AcceleratorRequest | None:
    raw = spec.get("accelerators")
    return None if raw is None else parse_accelerators(raw, "accelerators")


def _resources(spec: dict) -> Resources:
    return parse_resources(spec.get("resources") or {}, "resources")


def _target(spec: dict) -> Target | None:
    pin = spec.get("grove")
    if pin in (None, ""):
        return None
    return Target(grove_id=v.string(pin, "grove", max_length=100).strip())


def _trust(spec: dict) -> str:
    return v.choice(spec.get("trust", "trusted"), "trust", choices=TRUST_LEVELS)


def requirement(spec: dict, *, family: str, source: str, artifact_kind: str, change_kind: str, isolation: str,
                 artifact: dict | None = None, grove: dict | None = None,
                 accelerators: bool = True) -> ExecutionRequirement:
    """The one builder of a requirement from a work spec (a pipeline node, a workload): what differs between
    kinds of work is the family, change kind, artifact kind and isolation, not how the spec is read."""
    return ExecutionRequirement(
        family=family,
        resources=_resources(spec),
        accelerators=_accelerators(spec) if accelerators else None,
        compatibility=Compatibility(
            platform=_platform(spec, source=source, artifact=artifact, grove=grove),
            artifact_kind=artifact_kind, change_kind=change_kind, isolation=isolation,
        ),
        trust=_trust(spec),
        target=_target(spec),
    )


def requirement_parsed(*, family: str, source: str, artifact_kind: str, change_kind: str, isolation: str,
                       resources: dict, accelerators: dict | None, platform: list[str] | None, trust: str,
                       grove: str | None) -> ExecutionRequirement:
    """``requirement`` for a spec its owner already parsed (a canonical pipeline node, validated by its
    declaration in ``apps.pipelines.bodies`` under the same bounds and platform reader): built, not read again."""
    return ExecutionRequirement(
        family=family,
        resources=Resources(cpu_milli=resources["cpu_milli"], memory_bytes=resources["memory_bytes"]),
        accelerators=None if accelerators is None else AcceleratorRequest.of_parsed(**accelerators),
        compatibility=Compatibility(
            platform=_merge_platforms([(source, tuple(platform or ()))], "platform"),
            artifact_kind=artifact_kind, change_kind=change_kind, isolation=isolation,
        ),
        trust=trust,
        target=Target(grove_id=grove) if grove else None,
    )


def _name(spec: dict) -> str:
    return str(spec.get("name") or spec.get("slug") or "?")


def requirement_for_native_workload(workload: dict, *, artifact: dict | None = None,
                                    grove: dict | None = None) -> ExecutionRequirement:
    """A native workload (a signed bundle run as host processes by forest-agent)."""
    return requirement(workload, family="runtime", source=f"workload:{_name(workload)}", artifact=artifact,
                        grove=grove, artifact_kind="native_bundle", change_kind="native.workload",
                        isolation="host_process")
