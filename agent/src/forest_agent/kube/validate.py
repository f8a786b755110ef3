"""Validation of every rendered object before it reaches a cluster.

1. `kubernetes-validate` against the OpenAPI schemas of **one pinned Kubernetes version**
   (`KUBERNETES_VERSION`, the version of the pinned `kubernetes` client), strict: unknown fields fail.
2. Our own checks for what those schemas cannot express: enum values (restart policy, operators,
   taint effects, protocols, ...), DNS-1123/1035 names, label keys and values, env var names,
   quantities, and that `Gt`/`Lt` carry exactly one integer.
A failure raises `RenderInvalid` (code `render_invalid`) naming the object and the field path.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

import jsonschema
import kubernetes_validate
from kubernetes.client import ApiClient
from kubernetes_validate import utils as kv_utils
from referencing import Registry, Resource

from forest_agent.errors import AgentError
from forest_agent.kube import names

KUBERNETES_VERSION = "1.37.0"

RESTART_POLICIES = {"Job": {"Never", "OnFailure"}, "Deployment": {"Always"}}
SELECTOR_OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}
TOLERATION_OPERATORS = {"Exists", "Equal"}
TAINT_EFFECTS = {"NoSchedule", "PreferNoSchedule", "NoExecute"}
PROTOCOLS = {"TCP", "UDP", "SCTP"}
SECCOMP_TYPES = {"RuntimeDefault", "Localhost", "Unconfined"}
PULL_POLICIES = {"Always", "IfNotPresent", "Never"}
SERVICE_TYPES = {"ClusterIP", "NodePort", "LoadBalancer", "ExternalName"}
POLICY_TYPES = {"Ingress", "Egress"}
STRATEGIES = {"RollingUpdate", "Recreate"}
TERMINATION_MESSAGE_POLICIES = {"File", "FallbackToLogsOnError"}
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
IANA_SVC_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[KMGTPE]i?|[munkMGTPE]|m)?$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")

_client = ApiClient()


class RenderInvalid(AgentError):
    code = "render_invalid"


def sanitize(obj: Any) -> dict[str, Any]:
    """What the official client would send (dicts pass through; models become their JSON form)."""
    sanitized: dict[str, Any] = _client.sanitize_for_serialization(obj)
    return sanitized


def _first_line(exc: Exception) -> str:
    return (getattr(exc, "message", None) or str(exc)).splitlines()[0]


@functools.lru_cache(maxsize=64)
def _validator(version: str, kind: str, api_version: str) -> jsonschema.Validator:
    """The validator `kubernetes_validate.validate(..., strict=True)` builds, built once per kind.

    The library re-reads the kind's schema and the multi-megabyte `_definitions.json` on every call
    (about 40 ms per object); caching the compiled validator makes validation cheap enough to run on
    every object before every apply. Same files, same registry, same Draft 2020-12 validator; a test
    checks both agree."""
    schema_version = [
        v for v in kv_utils.all_versions() if kv_utils.major_minor(v) <= kv_utils.major_minor(version)
    ][-1]
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    directory = f"kubernetes-json-schema/v{schema_version}-local-strict"
    try:
        schema = kv_utils.schema_contents(f"{directory}/{kind.lower()}-{group}.json", version)
    except FileNotFoundError:
        raise kubernetes_validate.SchemaNotFoundError(
            version=version, kind=kind, api_version=api_version
        ) from None
    definitions = kv_utils.schema_contents(f"{directory}/_definitions.json", version)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def schema_validate(data: dict[str, Any], *, version: str = KUBERNETES_VERSION) -> None:
    """kubernetes-validate's strict check with a cached validator; raises its ValidationError."""
    try:
        _validator(version, data["kind"], data["apiVersion"]).validate(data)
    except jsonschema.ValidationError as exc:
        raise kubernetes_validate.ValidationError(exc, version=kv_utils.major_minor(version)) from None


def validate_object(obj: Any, *, version: str = KUBERNETES_VERSION) -> dict[str, Any]:
    """Schema-validate one object, then run our own checks; returns the sanitized object."""
    data = sanitize(obj)
    where = f"{data.get('kind', '?')}/{data.get('metadata', {}).get('name', '?')}"
    try:
        schema_validate(data, version=version)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in getattr(exc, "absolute_path", []) or [])
        raise RenderInvalid(f"{where}: schema {version}: {path}: {_first_line(exc)}") from None
    except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as exc:
        raise RenderInvalid(f"{where}: no usable schema for Kubernetes {version}: {exc}") from None
    problems = list(semantic_problems(data))
    if problems:
        raise RenderInvalid(f"{where}: " + "; ".join(problems))
    return data


def validate_all(objects: Iterable[Any], *, version: str = KUBERNETES_VERSION) -> list[dict[str, Any]]:
    return [validate_object(obj, version=version) for obj in objects]


# -- our own checks ---------------------------------------------------------------------------
def _enum(value: Any, allowed: set[str], path: str) -> Iterable[str]:
    if value is not None and value not in allowed:
        yield f"{path}: {value!r} is not one of {', '.join(sorted(allowed))}"


def _metadata(meta: dict[str, Any], kind: str) -> Iterable[str]:
    name = meta.get("name", "")
    if kind == "Service":
        if not (len(name) <= 63 and DNS_1035.match(name)):
            yield f"metadata.name: {name!r} is not a DNS-1035 label (a Service name starts with a letter)"
    elif kind in ("Job", "Namespace"):
        # A Job's name becomes its Pods' `job-name` label value: it must be a DNS label.
        if not names.dns_label(name):
            yield f"metadata.name: {name!r} is not a DNS-1123 label"
    elif not names.dns_subdomain(name):
        yield f"metadata.name: {name!r} is not a DNS-1123 subdomain"
    namespace = meta.get("namespace")
    if namespace is not None and not names.dns_label(namespace):
        yield f"metadata.namespace: {namespace!r} is not a DNS-1123 label"
    yield from _labels(meta.get("labels") or {}, "metadata.labels")
    for key in meta.get("annotations") or {}:
        if not names.label_key(key):
            yield f"metadata.annotations: {key!r} is not a qualified name"


def _labels(labels: dict[str, str], path: str) -> Iterable[str]:
    for key, value in labels.items():
        if not names.label_key(key):
            yield f"{path}: {key!r} is not a qualified label key"
        if not names.label_value(str(value)):
            yield f"{path}.{key}: {value!r} is not a valid label value"


def _selector_terms(affinity: dict[str, Any], path: str) -> Iterable[str]:
    required = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for t, term in enumerate(required.get("nodeSelectorTerms") or []):
        for e, expr in enumerate(term.get("matchExpressions") or []):
            where = f"{path}.nodeSelectorTerms[{t}].matchExpressions[{e}]"
            op, values = expr.get("operator"), expr.get("values") or []
            yield from _enum(op, SELECTOR_OPERATORS, f"{where}.operator")
            if not names.label_key(expr.get("key", "")):
                yield f"{where}.key: {expr.get('key')!r} is not a qualified label key"
            if op in ("Gt", "Lt") and (len(values) != 1 or not re.fullmatch(r"-?\d+", str(values[0]))):
                yield f"{where}.values: {op} needs exactly one integer, got {values!r}"
            if op in ("In", "NotIn") and not values:
                yield f"{where}.values: {op} needs at least one value"
            if op in ("Exists", "DoesNotExist") and values:
                yield f"{where}.values: {op} takes no values"


def _pod(pod: dict[str, Any], kind: str, path: str) -> Iterable[str]:
    yield from _enum(
        pod.get("restartPolicy"),
        RESTART_POLICIES.get(kind, {"Always", "OnFailure", "Never"}),
        f"{path}.restartPolicy",
    )
    seccomp = (pod.get("securityContext") or {}).get("seccompProfile") or {}
    yield from _enum(seccomp.get("type"), SECCOMP_TYPES, f"{path}.securityContext.seccompProfile.type")
    runtime_class = pod.get("runtimeClassName")
    if runtime_class is not None and not names.dns_subdomain(runtime_class):
        yield f"{path}.runtimeClassName: {runtime_class!r} is not a DNS-1123 subdomain"
    yield from _selector_terms(pod.get("affinity") or {}, f"{path}.affinity.nodeAffinity")
    for i, tol in enumerate(pod.get("tolerations") or []):
        yield from _enum(tol.get("operator"), TOLERATION_OPERATORS, f"{path}.tolerations[{i}].operator")
        yield from _enum(tol.get("effect"), TAINT_EFFECTS, f"{path}.tolerations[{i}].effect")
    volumes = {v.get("name") for v in pod.get("volumes") or []}
    for v in volumes:
        if not names.dns_label(v or ""):
            yield f"{path}.volumes: {v!r} is not a DNS-1123 label"
    named = [("containers", c, x) for c, x in enumerate(pod.get("containers") or [])]
    named += [("initContainers", c, x) for c, x in enumerate(pod.get("initContainers") or [])]
    all_names = [container.get("name") for _, _, container in named]
    if len(set(all_names)) != len(all_names):
        yield f"{path}: container names must be unique across containers and initContainers"
    for section, c, container in named:
        where = f"{path}.{section}[{c}]"
        if not names.dns_label(container.get("name", "")):
            yield f"{where}.name: {container.get('name')!r} is not a DNS-1123 label"
        yield from _enum(container.get("imagePullPolicy"), PULL_POLICIES, f"{where}.imagePullPolicy")
        yield from _enum(
            container.get("terminationMessagePolicy"),
            TERMINATION_MESSAGE_POLICIES,
            f"{where}.terminationMessagePolicy",
        )
        if not (container.get("image") or "").strip():
            yield f"{where}.image: must not be blank"
        for e in container.get("env") or []:
            if not ENV_NAME.match(e.get("name", "")):
                yield f"{where}.env: {e.get('name')!r} is not a valid environment variable name"
        for section in ("requests", "limits"):
            for resource, amount in ((container.get("resources") or {}).get(section) or {}).items():
                if not QUANTITY.match(str(amount)):
                    yield f"{where}.resources.{section}.{resource}: {amount!r} is not a quantity"
        for p, port in enumerate(container.get("ports") or []):
            yield from _enum(port.get("protocol"), PROTOCOLS, f"{where}.ports[{p}].protocol")
            if port.get("name") is not None and not (
                len(port["name"]) <= 15 and IANA_SVC_NAME.match(port["name"])
            ):
                yield f"{where}.ports[{p}].name: {port['name']!r} is not an IANA service name (≤15)"
        for m in container.get("volumeMounts") or []:
            if m.get("name") not in volumes:
                yield f"{where}.volumeMounts: {m.get('name')!r} names no volume"


def semantic_problems(data: dict[str, Any]) -> Iterable[str]:
    kind = data.get("kind", "")
    yield from _metadata(data.get("metadata") or {}, kind)
    spec = data.get("spec") or {}
    template = spec.get("template") or {}
    if template:
        yield from _labels(
            (template.get("metadata") or {}).get("labels") or {}, "spec.template.metadata.labels"
        )
        yield from _pod(template.get("spec") or {}, kind, "spec.template.spec")
    if kind == "Deployment":
        yield from _enum((spec.get("strategy") or {}).get("type"), STRATEGIES, "spec.strategy.type")
        selector = (spec.get("selector") or {}).get("matchLabels") or {}
        template_labels = (template.get("metadata") or {}).get("labels") or {}
        if any(template_labels.get(k) != v for k, v in selector.items()):
            yield "spec.selector: does not match the pod template's labels"
    if kind == "Service":
        yield from _enum(spec.get("type"), SERVICE_TYPES, "spec.type")
        for p, port in enumerate(spec.get("ports") or []):
            yield from _enum(port.get("protocol"), PROTOCOLS, f"spec.ports[{p}].protocol")
    if kind == "NetworkPolicy":
        for t in spec.get("policyTypes") or []:
            yield from _enum(t, POLICY_TYPES, "spec.policyTypes")
