"""Pure rules of the pipeline domain: graph validation, canonical form, digests, ordering, GRAPH_DEDUP
eligibility, the node/job/run state machines and the wire report body. No Django.

A Canopy Pipeline Graph is ``{"nodes": [Node, ...]}``; edges are each node's ``needs`` (the node runs
after those). The node format is the one agreed with placement (``/docs/decisions.md``, "Canopy Pipeline
Graph"). Every refusal is a ``ValidationFailed`` with a stable code and the exact field path.
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from apps.artifacts.digests import DIGEST_RE as SHA256_DIGEST
from apps.artifacts.kinds import STORAGE_KINDS, is_container_image
from apps.core import validation as v
from apps.core.errors import Conflict, ValidationFailed
from apps.core.platforms import PlatformError, normalise_platform

NODE_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
PINNED_IMAGE = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")

NODE_KINDS = ("exec", "build_image", "deploy")
RUNTIMES = ("container", "native")
REUSE = ("graph_dedup", "never")
TRUST = ("trusted", "untrusted")
FAMILIES = ("build", "runtime", "compute")
RUN_KINDS = ("build", "deploy", "compute")
FAMILY_FOR_RUN_KIND = {"build": "build", "deploy": "runtime", "compute": "compute"}

MAX_NODES = 500
MAX_ARGV = 256
MAX_ARG = 8192
MAX_ENV = 256
MAX_INPUTS = 64
MAX_TIMEOUT_S = 7 * 24 * 3600
DEFAULT_TIMEOUT_S = 3600
DEFAULT_CPU_MILLI = 1000
DEFAULT_MEMORY_BYTES = 1024**3
MAX_CPU_MILLI = 1_000_000
MAX_MEMORY_BYTES = 1 << 44
MAX_ACCELERATORS = 64

NODE_FIELDS = {"id", "kind", "runtime", "image", "command", "env", "inputs", "platform", "resources",
               "accelerators", "timeout_s", "reuse", "trust", "family", "grove", "needs"}


# --- graph validation and canonical form ----------------------------------------------------------

def _argv(value: Any, field: str) -> list[str]:
    items = v.array(value, field, max_items=MAX_ARGV)
    if not items:
        raise v.fail("command_required", f"{field} must name a program to run.", field)
    return [v.string(item, f"{field}[{i}]", max_length=MAX_ARG, allow_empty=True) for i, item in enumerate(items)]


def env_map(value: Any, field: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise v.fail("invalid_type", f"{field} must be an object of NAME: value strings.", field)
    if len(value) > MAX_ENV:
        raise v.fail("too_many_items", f"{field} has {len(value)} variables; at most {MAX_ENV} are allowed.", field)
    out = {}
    for name in sorted(value):
        if not ENV_NAME.match(name):
            raise v.fail("invalid_env_name", f"'{name}' is not an environment variable name.", f"{field}.{name}")
        out[name] = v.string(value[name], f"{field}.{name}", max_length=MAX_ARG, allow_empty=True)
    return out


def platform_list(value: Any, field: str) -> list[str]:
    items = v.array(value, field, max_items=32)
    if not items:
        raise v.fail("field_blank", f"{field} must list at least one platform, or be left out.", field)
    out: list[str] = []
    for index, item in enumerate(items):
        try:
            platform = normalise_platform(item)
        except PlatformError as exc:
            raise v.fail("invalid_platform", str(exc), f"{field}[{index}]") from None
        if platform not in out:  # order is preference; repeats add nothing
            out.append(platform)
    return out


def resources(value: Any, field: str) -> dict:
    value = v.obj(value, field, allowed={"cpu_milli", "memory_bytes"})
    return {
        "cpu_milli": v.integer(value.get("cpu_milli", DEFAULT_CPU_MILLI), f"{field}.cpu_milli", minimum=1,
                               maximum=MAX_CPU_MILLI),
        "memory_bytes": v.integer(value.get("memory_bytes", DEFAULT_MEMORY_BYTES), f"{field}.memory_bytes",
                                  minimum=1, maximum=MAX_MEMORY_BYTES),
    }


def accelerators(value: Any, field: str) -> dict:
    value = v.obj(value, field, allowed={"count", "vendor", "min_memory_bytes"}, required={"count"})
    out = {"count": v.integer(value["count"], f"{field}.count", minimum=1, maximum=MAX_ACCELERATORS)}
    if value.get("vendor") is not None:
        out["vendor"] = v.string(value["vendor"], f"{field}.vendor", max_length=50).strip().lower()
    if value.get("min_memory_bytes") is not None:
        out["min_memory_bytes"] = v.integer(value["min_memory_bytes"], f"{field}.min_memory_bytes",
                                            maximum=MAX_MEMORY_BYTES)
    return out


def _inputs(value: Any, field: str) -> list[dict]:
    items = v.array(value, field, max_items=MAX_INPUTS)
    out = []
    for index, item in enumerate(items):
        where = f"{field}[{index}]"
        item = v.obj(item, where, allowed={"digest", "storage_kind", "ref"}, required={"digest", "storage_kind"})
        digest = v.string(item["digest"], f"{where}.digest", max_length=80)
        if not SHA256_DIGEST.match(digest):
            raise v.fail("invalid_digest", f"{where}.digest must be 'sha256:' and 64 lowercase hex digits.",
                         f"{where}.digest")
        entry = {"digest": digest,
                 "storage_kind": v.choice(item["storage_kind"], f"{where}.storage_kind", choices=STORAGE_KINDS)}
        if item.get("ref") is not None:
            entry["ref"] = v.string(item["ref"], f"{where}.ref", max_length=500)
        out.append(entry)
    return sorted(out, key=lambda i: (i["digest"], i["storage_kind"], i.get("ref", "")))


def _node(value: Any, field: str) -> dict:
    value = v.obj(value, field, allowed=NODE_FIELDS, required={"id", "kind"})
    node_id = v.string(value["id"], f"{field}.id", max_length=63)
    if not NODE_ID.match(node_id):
        raise v.fail("invalid_node_id", f"Node id '{node_id}' must match [a-z0-9][a-z0-9_-]* (at most 63).",
                     f"{field}.id")
    kind = value["kind"]
    if not isinstance(kind, str) or kind not in NODE_KINDS:
        raise v.fail("invalid_node_kind", f"Node kind must be one of: {', '.join(NODE_KINDS)}.", f"{field}.kind")
    node: dict[str, Any] = {"id": node_id, "kind": kind}
    if kind == "exec":
        node["runtime"] = v.choice(value.get("runtime", "container"), f"{field}.runtime", choices=RUNTIMES)
    elif "runtime" in value:
        raise v.fail("runtime_not_allowed", "Only exec nodes choose a runtime.", f"{field}.runtime")
    native = node.get("runtime") == "native"
    if native and value.get("image") is not None:
        raise v.fail("image_not_allowed", "A native exec node runs a host command; it takes no image.",
                     f"{field}.image")
    if not native:
        if value.get("image") is None:
            raise v.fail("image_required", f"A {kind} node with a container needs an image.", f"{field}.image")
        node["image"] = v.string(value["image"], f"{field}.image", max_length=500).strip()
    if kind == "exec" or value.get("command") is not None:
        if value.get("command") is None:
            raise v.fail("command_required", "An exec node needs a command (a list of arguments).",
                         f"{field}.command")
        node["command"] = _argv(value["command"], f"{field}.command")
    node["env"] = env_map(value.get("env", {}), f"{field}.env")
    node["inputs"] = _inputs(value.get("inputs", []), f"{field}.inputs")
    if value.get("platform") is not None:
        node["platform"] = platform_list(value["platform"], f"{field}.platform")
    node["resources"] = resources(value.get("resources", {}), f"{field}.resources")
    if value.get("accelerators") is not None:
        node["accelerators"] = accelerators(value["accelerators"], f"{field}.accelerators")
    node["timeout_s"] = v.integer(value.get("timeout_s", DEFAULT_TIMEOUT_S), f"{field}.timeout_s", minimum=1,
                                  maximum=MAX_TIMEOUT_S)
    node["reuse"] = v.choice(value.get("reuse", "graph_dedup"), f"{field}.reuse", choices=REUSE)
    node["trust"] = v.choice(value.get("trust", "trusted"), f"{field}.trust", choices=TRUST)
    if value.get("family") is not None:
        node["family"] = v.choice(value["family"], f"{field}.family", choices=FAMILIES)
    if value.get("grove") is not None:
        node["grove"] = v.string(value["grove"], f"{field}.grove", max_length=100).strip()
    needs = v.array(value.get("needs", []), f"{field}.needs", max_items=MAX_NODES)
    node["needs"] = sorted({v.string(n, f"{field}.needs[{i}]", max_length=63) for i, n in enumerate(needs)})
    return node


def graph_validate(graph: Any, *, field: str = "graph") -> dict:
    """Validate a graph and return its canonical form (defaults filled, nodes sorted by id), or raise."""
    graph = v.obj(graph, field, allowed={"nodes"}, required={"nodes"})
    items = v.array(graph["nodes"], f"{field}.nodes", max_items=MAX_NODES)
    if not items:
        raise v.fail("graph_empty", "A graph needs at least one node.", f"{field}.nodes")
    nodes: list[dict] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        node = _node(item, f"{field}.nodes[{index}]")
        if node["id"] in seen:
            raise v.fail("duplicate_node_id", f"Node id '{node['id']}' is used twice (nodes[{seen[node['id']]}] "
                         f"and nodes[{index}]).", f"{field}.nodes[{index}].id")
        seen[node["id"]] = index
        nodes.append(node)
    for node in nodes:
        index = seen[node["id"]]
        for need in node["needs"]:
            if need == node["id"]:
                raise v.fail("graph_cycle", f"Node '{need}' needs itself.", f"{field}.nodes[{index}].needs")
            if need not in seen:
                raise v.fail("unknown_node_ref", f"Node '{node['id']}' needs '{need}', which is not in the graph.",
                             f"{field}.nodes[{index}].needs")
    cycle = find_cycle({n["id"]: n["needs"] for n in nodes})
    if cycle:
        raise v.fail("graph_cycle", f"The graph has a cycle: {' -> '.join(cycle)}.", f"{field}.nodes")
    return {"nodes": sorted(nodes, key=lambda n: n["id"])}


def find_cycle(needs: dict[str, list[str]]) -> list[str]:
    """One cycle as a path that returns to its start (``a -> b -> a``), or ``[]``. Iterative DFS."""
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(needs, white)
    for start in sorted(needs):
        if colour[start] != white:
            continue
        stack = [(start, iter(needs[start]))]
        path = [start]
        colour[start] = grey
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = black
                stack.pop()
                path.pop()
                continue
            if colour[child] == grey:
                return [*path[path.index(child):], child]
            if colour[child] == white:
                colour[child] = grey
                stack.append((child, iter(needs[child])))
                path.append(child)
    return []


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def graph_digest(canonical: dict) -> str:
    """Identity of the *work*: the same graph, however it was spelled, has the same digest."""
    return "sha256:" + hashlib.sha256(canonical_json(canonical).encode()).hexdigest()


def topological_order(canonical: dict) -> list[str]:
    """Node ids in dependency order; ties broken by id so the order is stable."""
    needs = {n["id"]: set(n["needs"]) for n in canonical["nodes"]}
    order: list[str] = []
    ready = sorted(n for n, deps in needs.items() if not deps)
    done: set[str] = set()
    while ready:
        node = ready.pop(0)
        order.append(node)
        done.add(node)
        newly = [n for n, deps in needs.items() if n not in done and n not in ready and deps <= done]
        ready = sorted(set(ready) | set(newly))
    return order


# Fields that do not change what a node computes: where it runs, how long we wait, reuse policy.
_NON_WORK_FIELDS = {"id", "needs", "grove", "timeout_s", "reuse"}


def node_digests(canonical: dict) -> dict[str, str]:
    """Per-node identity of the work: its own work fields plus the digests of what it needs."""
    by_id = {n["id"]: n for n in canonical["nodes"]}
    out: dict[str, str] = {}
    for node_id in topological_order(canonical):
        node = by_id[node_id]
        work = {k: val for k, val in node.items() if k not in _NON_WORK_FIELDS}
        work["needs"] = sorted(out[n] for n in node["needs"])
        out[node_id] = "sha256:" + hashlib.sha256(canonical_json(work).encode()).hexdigest()
    return out


# --- GRAPH_DEDUP ----------------------------------------------------------------------------------

def dedup_exclusion(node: dict) -> str | None:
    """Why a node may not inherit an earlier result (a stable code), or None when it is eligible.

    Only trusted container work whose every input is a content-addressed OCI artifact and whose image
    is pinned by digest is a pure function of its digest; anything else must run.
    """
    if node.get("reuse") == "never":
        return "reuse_never"
    if node["kind"] != "exec" or node.get("runtime", "container") != "container":
        return "host_command" if node.get("runtime") == "native" else "not_container_exec"
    if node.get("trust") != "trusted":
        return "untrusted"
    if not PINNED_IMAGE.match(node.get("image", "")):
        return "image_not_pinned"
    for item in node.get("inputs", []):
        if not is_container_image(item["storage_kind"]):
            return "input_not_oci"
    return None


# --- state machines -------------------------------------------------------------------------------

NODE_TRANSITIONS: dict[str, set[str]] = {
    "pending": {"queued", "cancelled", "skipped"},
    "queued": {"awaiting", "failed", "cancelled"},
    "awaiting": {"succeeded", "failed", "timed_out", "cancelled"},
    "succeeded": set(), "failed": set(), "timed_out": set(), "cancelled": set(), "skipped": set(),
}
NODE_TERMINAL = frozenset({"succeeded", "failed", "timed_out", "cancelled", "skipped"})

JOB_TRANSITIONS: dict[str, set[str]] = {
    "assigned": {"claimed", "cancelled", "timed_out"},
    "claimed": {"running", "succeeded", "failed", "cancelled", "timed_out"},
    "running": {"succeeded", "failed", "cancelled", "timed_out"},
    "succeeded": set(), "failed": set(), "cancelled": set(), "timed_out": set(),
}
JOB_LIVE = frozenset({"assigned", "claimed", "running"})
JOB_TERMINAL = frozenset({"succeeded", "failed", "cancelled", "timed_out"})

RUN_TRANSITIONS: dict[str, set[str]] = {
    "pending": {"running", "cancelled", "failed", "succeeded"},
    "running": {"succeeded", "failed", "cancelled"},
    "succeeded": set(), "failed": set(), "cancelled": set(),
}
RUN_TERMINAL = frozenset({"succeeded", "failed", "cancelled"})


class IllegalTransition(Conflict):
    def __init__(self, machine: str, current: str, target: str):
        super().__init__("illegal_transition", f"A {machine} cannot go from {current} to {target}.")


def check_transition(machine: str, table: dict[str, set[str]], current: str, target: str) -> None:
    if target not in table.get(current, set()):
        raise IllegalTransition(machine, current, target)


def node_outcome_for_job(job_status: str) -> str:
    """The node status a terminal job leads to. A job cancelled by its Grove (or by budget policy)
    ends the node as cancelled; the run then fails unless the run itself was cancelled."""
    return {"succeeded": "succeeded", "failed": "failed", "timed_out": "timed_out",
            "cancelled": "cancelled"}[job_status]


def run_outcome(node_statuses: list[str]) -> str | None:
    """The run's terminal status once every node is terminal, else None."""
    if any(s not in NODE_TERMINAL for s in node_statuses):
        return None
    return "succeeded" if all(s == "succeeded" for s in node_statuses) else "failed"


# --- detached wait eligibility --------------------------------------------------------------------

def detached_wait_exclusion(node: dict, *, in_build_group: bool = False) -> str | None:
    """Why a node must wait in place (a code), or None when its runner slot may be released.

    Only plain container exec steps detach: build-group members, accelerator steps, native steps and
    other node kinds keep their runner while the job runs (DESIGN.md §4, design note).
    """
    if node["kind"] != "exec":
        return "not_exec"
    if node.get("runtime", "container") != "container":
        return "native_step"
    if node.get("accelerators"):
        return "accelerator_step"
    if in_build_group:
        return "build_group_member"
    return None


# --- wire: job report body ------------------------------------------------------------------------

REPORT_STATES = ("running", "succeeded", "failed", "cancelled", "timed_out")
MAX_LOG_LINES = 500
MAX_LOG_LINE = 4000
MAX_OUTPUTS_BYTES = 64 * 1024


def job_report(body: Any) -> dict:
    body = v.obj(body, "", allowed={"state", "exit_code", "log_tail", "outputs", "reason"}, required={"state"})
    out: dict[str, Any] = {"state": v.choice(body["state"], "state", choices=REPORT_STATES)}
    if body.get("exit_code") is not None:
        out["exit_code"] = v.integer(body["exit_code"], "exit_code", minimum=-255, maximum=255)
    lines = v.array(body.get("log_tail", []), "log_tail", max_items=MAX_LOG_LINES)
    out["log_tail"] = [v.string(line, f"log_tail[{i}]", max_length=MAX_LOG_LINE, allow_empty=True)
                       for i, line in enumerate(lines)]
    outputs = body.get("outputs", {})
    if not isinstance(outputs, dict):
        raise v.fail("invalid_type", "outputs must be a JSON object.", "outputs")
    if len(canonical_json(outputs)) > MAX_OUTPUTS_BYTES:
        raise v.fail("too_large", f"outputs is larger than {MAX_OUTPUTS_BYTES} bytes.", "outputs")
    out["outputs"] = outputs
    if body.get("reason") is not None:
        reason = v.string(body["reason"], "reason", max_length=64)
        if not re.match(r"^[a-z][a-z0-9_]*$", reason):
            raise v.fail("invalid_reason", "reason must be a stable snake_case code.", "reason")
        out["reason"] = reason
    return out


def changes_wait(raw: str | None, *, default: int = 20, maximum: int = 30) -> int:
    """The ``wait`` query parameter of ``changes``: 0..30 seconds."""
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationFailed("invalid_wait", f"wait must be a whole number of seconds 0..{maximum}.",
                               field="wait") from None
    if not 0 <= value <= maximum:
        raise ValidationFailed("invalid_wait", f"wait must be between 0 and {maximum} seconds.", field="wait")
    return value


def run_request(body: Any) -> dict:
    """``POST pipelines/runs``: ``{"graph", "kind", "environment"?, "team"?, "build_id"?}``."""
    body = v.obj(body, "", allowed={"graph", "kind", "environment", "team", "build_id"}, required={"graph", "kind"})
    out = {"graph": body["graph"], "kind": v.choice(body["kind"], "kind", choices=RUN_KINDS)}
    for name in ("environment", "team", "build_id"):
        if body.get(name) is not None:
            out[name] = v.string(body[name], name, max_length=100)
    return out
