"""Native workload specs: validation of what staff submit, compilation into a generation, and
validation of agent status reports. Pure: no Django."""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from apps.core import bodies
from apps.core import validation as v
from apps.groves.vocabulary import MAX_PLATFORMS
from apps.workloads.bodies import WorkloadStatus
from apps.workloads.vocabulary import MAX_STOP_GRACE_S, MIN_STOP_GRACE_S, SecretsMode

SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,99}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")
PROBE_TYPES = {"http", "tcp", "exec"}
DEFAULT_RESTART = {"backoff_initial_s": 1, "backoff_max_s": 60, "crash_loop_after": 5}


def _port(value: Any, field: str) -> int:
    return v.integer(value, field, minimum=1, maximum=65535)


def _argv(value: Any, field: str) -> list[str]:
    items = v.array(value, field, max_items=256)
    if not items:
        raise v.fail("field_blank", f"{field} needs at least the program to run.", field)
    return [v.string(item, f"{field}[{i}]", max_length=4096) for i, item in enumerate(items)]


def _env(value: Any, field: str) -> dict[str, str]:
    value = v.obj(value, field, allowed=set(value) if isinstance(value, dict) else set())
    out = {}
    for key, item in value.items():
        if not ENV_NAME_RE.match(key):
            raise v.fail("invalid_env_name", f"'{key}' is not a valid environment variable name.", f"{field}.{key}")
        out[key] = v.string(item, f"{field}.{key}", max_length=32768, allow_empty=True)
    return out


def _probe(value: Any, field: str) -> dict[str, Any]:
    value = v.obj(value, field, allowed={"type", "path", "port", "command", "period_s", "timeout_s",
                                         "failure_threshold"}, required={"type"})
    kind = v.choice(value["type"], f"{field}.type", choices=PROBE_TYPES)
    probe: dict[str, Any] = {"type": kind}
    if kind in {"http", "tcp"}:
        if "port" not in value:
            raise v.fail("field_required", f"An {kind} probe needs a port.", f"{field}.port")
        probe["port"] = _port(value["port"], f"{field}.port")
    if kind == "http":
        path = v.string(value.get("path", "/"), f"{field}.path", max_length=500)
        if not path.startswith("/"):
            raise v.fail("invalid_value", "An HTTP probe path starts with '/'.", f"{field}.path")
        probe["path"] = path
    if kind == "exec":
        probe["command"] = _argv(value.get("command"), f"{field}.command")
    probe["period_s"] = v.integer(value.get("period_s", 5), f"{field}.period_s", minimum=1, maximum=3600)
    probe["timeout_s"] = v.integer(value.get("timeout_s", 2), f"{field}.timeout_s", minimum=1, maximum=600)
    probe["failure_threshold"] = v.integer(value.get("failure_threshold", 3), f"{field}.failure_threshold",
                                           minimum=1, maximum=100)
    return probe


PATH_PREFIX_RE = re.compile(r"^/([A-Za-z0-9._~-]+/)*$")
MAX_INGRESS_HOSTNAMES = 16


def ingress_hostname(value: Any, field: str, *, domains: Sequence[str], allow_wildcards: bool) -> str:
    """A public host name for native ingress: a DNS name under one of ``domains`` (the Host's public
    domains, ``FOREST_INGRESS_DOMAINS``); ``*.`` only when ``allow_wildcards``."""
    name = v.string(value, field, max_length=253).lower().rstrip(".")
    wildcard = name.startswith("*.")
    base = name[2:] if wildcard else name
    if not HOSTNAME_RE.match(base) or "." not in base:
        raise v.fail("invalid_hostname", f"'{name}' is not a DNS name such as app.example.com.", field)
    if wildcard and not allow_wildcards:
        raise v.fail("wildcard_not_allowed", "Wildcard host names are off on this Host "
                     "(FOREST_INGRESS_ALLOW_WILDCARDS).", field)
    if not any(base == domain or base.endswith(f".{domain}") for domain in domains):
        raise v.fail("hostname_outside_domains", f"'{name}' is not under this Host's public domains "
                     f"({', '.join(domains) or 'none configured: FOREST_INGRESS_DOMAINS'}).", field)
    return name


def _ingress(value: Any, field: str, ports: set[int], *, domains: Sequence[str],
             allow_wildcards: bool) -> dict[str, Any] | None:
    if value is None:
        return None
    value = v.obj(value, field, allowed={"hostnames", "path_prefix", "port"}, required={"hostnames", "port"})
    items = v.array(value["hostnames"], f"{field}.hostnames", max_items=MAX_INGRESS_HOSTNAMES)
    if not items:
        raise v.fail("field_blank", "Ingress needs at least one host name.", f"{field}.hostnames")
    hostnames: list[str] = []
    for i, item in enumerate(items):
        name = ingress_hostname(item, f"{field}.hostnames[{i}]", domains=domains, allow_wildcards=allow_wildcards)
        if name in hostnames:
            raise v.fail("duplicate_hostname", f"'{name}' is listed twice.", f"{field}.hostnames[{i}]")
        hostnames.append(name)
    prefix = v.string(value.get("path_prefix", "/"), f"{field}.path_prefix", max_length=200)
    prefix = prefix if prefix.endswith("/") else f"{prefix}/"
    if not PATH_PREFIX_RE.match(prefix):
        raise v.fail("invalid_path_prefix", "path_prefix is '/' or '/segment/...' (letters, digits, '._~-').",
                     f"{field}.path_prefix")
    target = _port(value["port"], f"{field}.port")
    if ports and target not in ports:
        raise v.fail("unknown_port", f"Ingress forwards to port {target}, which the workload does not declare.",
                     f"{field}.port")
    return {"hostnames": hostnames, "path_prefix": prefix, "port": target}


def workload_spec(body: Any, *, ingress_domains: Sequence[str] = (), allow_wildcards: bool = False) -> dict[str, Any]:
    """Validate and normalise a desired native workload as staff/CI submit it."""
    body = v.obj(body, "", allowed={"slug", "environment", "team", "bundle_digest", "command", "env", "secret_refs",
                                    "secrets_mode", "ports", "probes", "ingress", "restart", "platform",
                                    "resources", "grove", "stop_grace_s"},
                 required={"slug", "bundle_digest", "command"})
    slug = v.string(body["slug"], "slug", max_length=100)
    if not SLUG_RE.match(slug):
        raise v.fail("invalid_slug", "slug is lowercase letters, digits and '-'.", "slug")
    ports: list[dict[str, Any]] = []
    for i, item in enumerate(v.array(body.get("ports", []), "ports", max_items=32)):
        item = v.obj(item, f"ports[{i}]", allowed={"name", "port"}, required={"name", "port"})
        ports.append({"name": v.string(item["name"], f"ports[{i}].name", max_length=50),
                      "port": _port(item["port"], f"ports[{i}].port")})
    probes_in = v.obj(body.get("probes", {}), "probes", allowed={"readiness", "liveness"})
    restart_in = v.obj(body.get("restart", {}), "restart", allowed=set(DEFAULT_RESTART))
    restart = {key: v.integer(restart_in.get(key, default), f"restart.{key}", minimum=1, maximum=86400)
               for key, default in DEFAULT_RESTART.items()}
    platforms = v.platforms(body.get("platform", []), "platform", max_items=MAX_PLATFORMS)
    secret_refs = [v.string(name, f"secret_refs[{i}]", max_length=100)
                   for i, name in enumerate(v.array(body.get("secret_refs", []), "secret_refs", max_items=64))]
    for i, name in enumerate(secret_refs):
        if not ENV_NAME_RE.match(name):
            raise v.fail("invalid_env_name", f"Secret name '{name}' must be a valid variable name.",
                         f"secret_refs[{i}]")
    resources = v.obj(body.get("resources", {}), "resources", allowed={"cpu_milli", "memory_bytes"})
    return {
        "slug": slug,
        "environment": v.string(body.get("environment", "default"), "environment", max_length=100),
        "team": v.string(body.get("team", ""), "team", max_length=100, allow_empty=True),
        "bundle_digest": v.string(body["bundle_digest"], "bundle_digest", max_length=71),
        "command": _argv(body["command"], "command"),
        "env": _env(body.get("env", {}), "env"),
        "secret_refs": secret_refs,
        "secrets_mode": v.choice(body.get("secrets_mode", SecretsMode.ENV), "secrets_mode", choices=list(SecretsMode)),
        "ports": ports,
        "probes": {name: _probe(probe, f"probes.{name}") for name, probe in probes_in.items()},
        "ingress": _ingress(body.get("ingress"), "ingress", {p["port"] for p in ports}, domains=ingress_domains,
                            allow_wildcards=allow_wildcards),
        "restart": restart,
        "platform": platforms,
        "resources": {key: v.integer(value, f"resources.{key}", maximum=1 << 52) for key, value in resources.items()},
        "grove": v.string(body["grove"], "grove", max_length=100) if body.get("grove") else "",
        # Absent or null: the agent's own --kill-grace.
        "stop_grace_s": None if body.get("stop_grace_s") is None else v.integer(
            body["stop_grace_s"], "stop_grace_s", minimum=MIN_STOP_GRACE_S, maximum=MAX_STOP_GRACE_S),
    }


def generation_spec(*, workload: dict[str, Any], bundle: dict[str, Any], ingress_enabled: bool) -> dict[str, Any]:
    """The part of a generation that does not depend on its id, without secret values.

    ``stop_grace_s`` is in it only when declared: a spec without it is exactly what Host wrote before the
    field existed, so its digest is unchanged and no workload gets a new generation from the upgrade."""
    spec = {
        "bundle": {"digest": bundle["digest"], "size": bundle["size"], "signature": bundle["signature"],
                   "key_id": bundle["key_id"]},
        "command": workload["command"],
        "env": workload["env"],
        "secret_names": sorted(workload["secret_refs"]),
        "secrets_mode": workload["secrets_mode"],
        "ports": workload["ports"],
        "probes": workload["probes"],
        "ingress": workload["ingress"] if ingress_enabled else None,
        "restart": workload["restart"] or DEFAULT_RESTART,
    }
    if workload.get("stop_grace_s") is not None:
        spec["stop_grace_s"] = workload["stop_grace_s"]
    return spec


def spec_digest(spec: dict[str, Any], secrets: dict[str, str]) -> str:
    """Identity of a desired state: a changed secret value is a new generation too."""
    canonical = json.dumps([spec, sorted(secrets.items())], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def status_report(body: Any) -> dict[str, Any]:
    """Validate an agent's status report (its one declaration: ``apps.workloads.bodies.WorkloadStatus``)."""
    report = bodies.parse(WorkloadStatus, body)
    return {"state": report.state, "live": report.live, "restarts": report.restarts,
            "probes": report.probes.model_dump(exclude_unset=True), "reason": report.reason,
            "message": report.message, "log_tail": list(report.log_tail)}
