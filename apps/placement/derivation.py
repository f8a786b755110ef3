"""Deriving an ``ExecutionRequirement`` from the thing that asks for work. Pure: no Django.

Called when a placement is *made*, never when a stored one is read back: a retry keeps the requirement
it was placed with even if the node spec or the derivation rules change later.

Every platform constraint records where it came from (``node:<id>``, ``artifact:<digest>``,
``grove:<slug>``, ``default``); two sources that share no platform are an error here, before any Grove
is looked at.
"""
from __future__ import annotations

from typing import Any

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

RUN_KIND_FAMILY = {"build": "build", "deploy": "runtime", "compute": "compute"}
NODE_KINDS = ("exec", "build_image", "deploy")
RUNTIMES = ("container", "native")


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
    return v.choice(spec.get("trust", "trusted"), "trust", choices=("trusted", "untrusted"))


def requirement_for_node(node: dict, *, run_kind: str, artifact: dict | None = None,
                         grove: dict | None = None) -> ExecutionRequirement:
    """A Canopy Pipeline Graph node (docs: /tmp interfaces) -> its requirement.

    exec/container -> oci_image, k8s.job, container; exec/native -> host_command, native.job,
    host_process; build_image -> oci_image, k8s.build_job, container, family build;
    deploy -> runtime, k8s.deployment (native.workload with a native bundle for a native runtime).
    ``artifact`` ({"digest", "platform"}) and ``grove`` ({"slug", "platforms"}) add platform sources.
    """
    if not isinstance(node, dict):
        raise ValidationFailed("invalid_type", "A pipeline node must be a JSON object.", field="node")
    node_id = str(node.get("id") or "?")
    kind = v.choice(node.get("kind", "exec"), "kind", choices=NODE_KINDS)
    if run_kind not in RUN_KIND_FAMILY:
        raise ValidationFailed("invalid_choice", f"Run kind must be one of {', '.join(RUN_KIND_FAMILY)}.",
                               field="run_kind")
    family = RUN_KIND_FAMILY[run_kind]
    runtime = v.choice(node.get("runtime", "container"), "runtime", choices=RUNTIMES)
    if kind == "build_image":
        family, artifact_kind, change_kind, isolation = "build", "oci_image", "k8s.build_job", "container"
    elif kind == "deploy":
        family = "runtime"
        if runtime == "native":
            artifact_kind, change_kind, isolation = "native_bundle", "native.workload", "host_process"
        else:
            artifact_kind, change_kind, isolation = "oci_image", "k8s.deployment", "container"
    elif runtime == "native":
        artifact_kind, change_kind, isolation = "host_command", "native.job", "host_process"
    else:
        artifact_kind, change_kind, isolation = "oci_image", "k8s.job", "container"
    if node.get("family") is not None and kind == "exec":
        family = v.choice(node["family"], "family", choices=("build", "runtime", "compute"))
    return ExecutionRequirement(
        family=family,
        resources=_resources(node),
        accelerators=_accelerators(node),
        compatibility=Compatibility(
            platform=_platform(node, source=f"node:{node_id}", artifact=artifact, grove=grove),
            artifact_kind=artifact_kind, change_kind=change_kind, isolation=isolation,
        ),
        trust=_trust(node),
        target=_target(node),
    )


def _requirement(spec: dict, *, family: str, source: str, artifact_kind: str, change_kind: str, isolation: str,
                 artifact: dict | None = None, grove: dict | None = None,
                 accelerators: bool = True) -> ExecutionRequirement:
    """The shared shape of every derivation below: what differs is the kind of work, not the reading."""
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


def _name(spec: dict) -> str:
    return str(spec.get("name") or spec.get("slug") or "?")


def requirement_for_build_job(build: dict, *, grove: dict | None = None) -> ExecutionRequirement:
    """A BuildJob (an image build on a Kubernetes build Grove): {"id", "platform", "resources", "trust", "grove"}."""
    return _requirement(build, family="build", source=f"build:{build.get('id') or '?'}", grove=grove,
                        artifact_kind="oci_image", change_kind="k8s.build_job", isolation="container",
                        accelerators=False)


def requirement_for_workload(workload: dict, *, artifact: dict | None = None,
                             grove: dict | None = None) -> ExecutionRequirement:
    """A desired runtime workload on Kubernetes: {"name", "image", "platform", "resources", "accelerators", ...}.

    ``artifact`` is the image's Artifact ({"digest", "platform"}): its config platform is a constraint.
    """
    return _requirement(workload, family="runtime", source=f"workload:{_name(workload)}", artifact=artifact,
                        grove=grove, artifact_kind="oci_image", change_kind="k8s.deployment", isolation="container")


def requirement_for_native_workload(workload: dict, *, artifact: dict | None = None,
                                    grove: dict | None = None) -> ExecutionRequirement:
    """A native workload (a signed bundle run as host processes by forest-agent)."""
    return _requirement(workload, family="runtime", source=f"workload:{_name(workload)}", artifact=artifact,
                        grove=grove, artifact_kind="native_bundle", change_kind="native.workload",
                        isolation="host_process")


def requirement_for_native_job(job: dict, *, grove: dict | None = None) -> ExecutionRequirement:
    """A native job (a host command run once by forest-agent), family from ``job["family"]`` (compute)."""
    family = v.choice(job.get("family", "compute"), "family", choices=("build", "runtime", "compute"))
    return _requirement(job, family=family, source=f"job:{job.get('id') or '?'}", grove=grove,
                        artifact_kind="host_command", change_kind="native.job", isolation="host_process")


def requirement_for_compute_step(step: dict[str, Any]) -> ExecutionRequirement:
    """A compute job step: an exec node of a compute run (family compute unless the step says otherwise)."""
    node = {**step, "kind": "exec"}
    node.setdefault("family", "compute")
    return requirement_for_node(node, run_kind="compute")
