"""Pure rules of the pipeline domain: graph validation, canonical form, digests, ordering, GRAPH_DEDUP
eligibility, detached-wait eligibility and each node's execution requirement. No Django.

A Canopy Pipeline Graph is ``{"nodes": [Node, ...]}``; edges are each node's ``needs`` (the node runs
after those). The node format is the one agreed with placement (``/docs/decisions.md``, "Canopy Pipeline
Graph"); this module is its one parser (compute steps are mapped to nodes and parsed here too). Every
refusal is a ``ValidationFailed`` with a stable code and the exact field path.
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from apps.artifacts.digests import DIGEST_RE as SHA256_DIGEST
from apps.artifacts.vocabulary import StorageKind, is_container_image
from apps.core import validation as v
from apps.core.errors import ValidationFailed
from apps.dispatch.vocabulary import DEFAULT_TIMEOUT_S
from apps.groves.vocabulary import MAX_PLATFORMS, ChangeKind, IsolationMode, Role
from apps.pipelines.vocabulary import (
    DEFAULT_BACKOFF,
    MAX_ARG,
    MAX_ARGV,
    MAX_BACKOFF_FACTOR,
    MAX_BACKOFF_S,
    MAX_DATA_PATH,
    MAX_ENV,
    MAX_INPUTS,
    MAX_NODES,
    MAX_OUTPUTS,
    MAX_RETRIES,
    MAX_TIMEOUT_S,
    RUN_KIND_FAMILY,
    NodeKind,
    NodeRuntime,
    NodeStatus,
    Reuse,
    RunKind,
)
from apps.placement.derivation import requirement, requirement_parsed
from apps.placement.requirements import ExecutionRequirement, parse_accelerators, parse_resources
from apps.placement.vocabulary import FAMILIES, TRUST_LEVELS, ArtifactKind

NODE_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
PINNED_IMAGE = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")

NODE_KINDS = tuple(NodeKind)
RUNTIMES = tuple(NodeRuntime)
REUSE = tuple(Reuse)
RUN_KINDS = tuple(RunKind)
STORAGE_KINDS = tuple(StorageKind)

NODE_FIELDS = {"id", "kind", "runtime", "image", "command", "env", "inputs", "outputs", "platform", "resources",
               "accelerators", "timeout_s", "reuse", "trust", "family", "grove", "needs", "retries", "backoff"}
INPUT_FIELDS = {"artifact", "digest", "image", "kind", "storage_kind", "ref", "path", "name"}
DATA_SEGMENT = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")
DATA_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


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
    return v.platforms(value, field, max_items=MAX_PLATFORMS,
                       blank=f"{field} must list at least one platform, or be left out.")


def resources(value: Any, field: str) -> dict[str, Any]:
    """A node's resources: a requirement's (one parser, one set of limits), and at least 1 of each."""
    return parse_resources(value, field, minimum=1).to_json()


def accelerators(value: Any, field: str) -> dict[str, Any]:
    """A node's accelerators, checked by the requirement's parser; stored as the node spelled them."""
    parse_accelerators(value, field)
    out = {"count": value["count"]}
    if value.get("vendor") is not None:
        out["vendor"] = value["vendor"].strip().lower()
    if value.get("min_memory_bytes") is not None:
        out["min_memory_bytes"] = value["min_memory_bytes"]
    return out


def data_path(value: Any, field: str, *, code: str) -> str:
    """A relative path inside the step's workspace, in plain segments: never absolute, never ``..``, no
    hidden or empty segment (executors re-check it against the real directory)."""
    path = v.string(value, field, max_length=MAX_DATA_PATH)
    segments = path.split("/")
    if path.startswith("/") or any(not DATA_SEGMENT.match(segment) for segment in segments):
        raise v.fail(code, f"{field} must be a relative path of plain segments (letters, digits, '.', '_', '-'; "
                     "not '.' or '..', not starting with '.').", field)
    return path


def _data_name(value: Any, field: str) -> str:
    name = v.string(value, field, max_length=63)
    if not DATA_NAME.match(name):
        raise v.fail("invalid_data_name", f"'{name}' must match [A-Za-z0-9][A-Za-z0-9_.-]* (at most 63).", field)
    return name


def _input(item: Any, where: str, index: int) -> dict[str, Any]:
    """One input as declared: what it names (exactly one of ``artifact`` id, ``digest``, ``image``
    reference), the kind the step expects, where it sees it (``path``) and its ``name``. Host resolves it
    at submit (``apps.artifacts.services.artifact_input_resolve``); the legacy ``storage_kind``/``ref``
    narrow a digest."""
    item = v.obj(item, where, allowed=INPUT_FIELDS)
    named = [key for key in ("artifact", "digest", "image") if item.get(key) is not None]
    if len(named) != 1:
        raise v.fail("input_reference_required", f"{where} names its artifact with exactly one of 'artifact' (an "
                     "id), 'digest' (a blob) or 'image' (an image reference).", where)
    entry: dict[str, Any] = {}
    if item.get("artifact") is not None:
        entry["artifact"] = v.integer(item["artifact"], f"{where}.artifact", minimum=1, maximum=2**63 - 1)
    if item.get("digest") is not None:
        digest = v.string(item["digest"], f"{where}.digest", max_length=80)
        if not SHA256_DIGEST.match(digest):
            raise v.fail("invalid_digest", f"{where}.digest must be 'sha256:' and 64 lowercase hex digits.",
                         f"{where}.digest")
        entry["digest"] = digest
    if item.get("image") is not None:
        entry["image"] = v.string(item["image"], f"{where}.image", max_length=500).strip()
    for key in ("kind", "storage_kind"):
        if item.get(key) is not None:
            entry[key] = v.choice(item[key], f"{where}.{key}", choices=STORAGE_KINDS)
    if item.get("ref") is not None:
        entry["ref"] = v.string(item["ref"], f"{where}.ref", max_length=500)
    if item.get("path") is not None:
        entry["path"] = data_path(item["path"], f"{where}.path", code="invalid_input_path")
    if item.get("name") is not None:
        entry["name"] = _data_name(item["name"], f"{where}.name")
    else:
        entry["name"] = entry["path"].rsplit("/", 1)[-1] if "path" in entry else f"input-{index}"
    return entry


def _inputs(value: Any, field: str) -> list[dict[str, Any]]:
    items = v.array(value, field, max_items=MAX_INPUTS)
    out = [_input(item, f"{field}[{index}]", index) for index, item in enumerate(items)]
    _no_repeats(out, "name", field, "duplicate_input_name")
    _no_repeats([i for i in out if "path" in i], "path", field, "duplicate_input_path")
    return out  # in the order declared: a refusal at submit names the input by its position


def _outputs(value: Any, field: str) -> list[dict[str, Any]]:
    """``[{"name", "path"}]``: what the executor uploads after a successful command (a file, or a directory
    as a deterministic tar); a declared output that is missing fails the step (``output_missing``)."""
    items = v.array(value, field, max_items=MAX_OUTPUTS)
    out = []
    for index, item in enumerate(items):
        where = f"{field}[{index}]"
        item = v.obj(item, where, allowed={"name", "path"}, required={"name", "path"})
        out.append({"name": _data_name(item["name"], f"{where}.name"),
                    "path": data_path(item["path"], f"{where}.path", code="invalid_output_path")})
    _no_repeats(out, "name", field, "duplicate_output_name")
    return sorted(out, key=lambda o: o["name"])


def output_key(*, attempt: int, name: str) -> str:
    """Where an attempt's output is written under the node's prefix (``runs/<run>/<node>/<key>``): each
    attempt its own key, so a retry that makes different bytes never collides with an earlier attempt,
    and a repeated upload of one attempt's bytes is the same artifact."""
    return f"attempt-{attempt}/{name}"


def _no_repeats(items: list[dict[str, Any]], key: str, field: str, code: str) -> None:
    repeat = v.first_repeat([item[key] for item in items])
    if repeat:
        first, index = repeat
        raise v.fail(code, f"{key} '{items[index][key]}' is used twice (entries {first} and {index}).",
                     f"{field}[{index}].{key}")


def backoff(value: Any, field: str) -> dict[str, Any]:
    """``{"delay_s"?, "factor"?, "max_s"?}`` with the defaults filled: the wait before each retry."""
    value = v.obj(value, field, allowed=set(DEFAULT_BACKOFF))
    delay = v.integer(value.get("delay_s", DEFAULT_BACKOFF["delay_s"]), f"{field}.delay_s", minimum=0,
                      maximum=MAX_BACKOFF_S)
    factor = v.integer(value.get("factor", DEFAULT_BACKOFF["factor"]), f"{field}.factor", minimum=1,
                       maximum=MAX_BACKOFF_FACTOR)
    cap = v.integer(value.get("max_s", max(delay, DEFAULT_BACKOFF["max_s"])), f"{field}.max_s", minimum=delay,
                    maximum=MAX_BACKOFF_S)
    return {"delay_s": delay, "factor": factor, "max_s": cap}


def _retry_fields(value: dict[str, Any], field: str) -> dict[str, Any]:
    """A node's retry policy in canonical form: absent when it has none (so graphs written before retries
    keep their digests), else ``retries`` and the filled-in ``backoff``."""
    retries = v.integer(value.get("retries", 0), f"{field}.retries", minimum=0, maximum=MAX_RETRIES)
    if not retries:
        if value.get("backoff") is not None:
            raise v.fail("backoff_without_retries", "A backoff only applies to retries; set retries (at least 1) "
                         "or leave backoff out.", f"{field}.backoff")
        return {}
    return {"retries": retries, "backoff": backoff(value.get("backoff", {}), f"{field}.backoff")}


def node_validate(value: Any, field: str) -> dict[str, Any]:
    """One node of a graph in canonical form, or raise."""
    return node_parse(v.obj(value, field, allowed=NODE_FIELDS, required={"id", "kind"}), field)


def node_parse(value: dict[str, Any], field: str) -> dict[str, Any]:
    """The node parser proper, over an object whose keys were already checked: a graph's node by
    ``node_validate``, a compute step against its own field names (``apps.compute.rules``)."""
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
            article = "An" if kind[:1] in "aeiou" else "A"
            raise v.fail("image_required", f"{article} {kind} node with a container needs an image.", f"{field}.image")
        if isinstance(value["image"], dict):
            # An image given as a recorded artifact: Host pins it at submit (``require_oci_image``).
            image = v.obj(value["image"], f"{field}.image", allowed={"artifact"}, required={"artifact"})
            node["image"] = {"artifact": v.integer(image["artifact"], f"{field}.image.artifact", minimum=1,
                                                   maximum=2**63 - 1)}
        else:
            node["image"] = v.string(value["image"], f"{field}.image", max_length=500).strip()
    if kind == "exec" or value.get("command") is not None:
        if value.get("command") is None:
            raise v.fail("command_required", "An exec node needs a command (a list of arguments).",
                         f"{field}.command")
        node["command"] = _argv(value["command"], f"{field}.command")
    node["env"] = env_map(value.get("env", {}), f"{field}.env")
    node["inputs"] = _inputs(value.get("inputs", []), f"{field}.inputs")
    if value.get("outputs"):
        if kind != "exec":
            raise v.fail("outputs_not_allowed", "Only exec nodes declare outputs.", f"{field}.outputs")
        node["outputs"] = _outputs(value["outputs"], f"{field}.outputs")
    if value.get("platform") is not None:
        node["platform"] = platform_list(value["platform"], f"{field}.platform")
    node["resources"] = resources(value.get("resources", {}), f"{field}.resources")
    if value.get("accelerators") is not None:
        node["accelerators"] = accelerators(value["accelerators"], f"{field}.accelerators")
    node["timeout_s"] = v.integer(value.get("timeout_s", DEFAULT_TIMEOUT_S), f"{field}.timeout_s", minimum=1,
                                  maximum=MAX_TIMEOUT_S)
    node.update(_retry_fields(value, field))
    node["reuse"] = v.choice(value.get("reuse", "graph_dedup"), f"{field}.reuse", choices=REUSE)
    node["trust"] = v.choice(value.get("trust", "trusted"), f"{field}.trust", choices=TRUST_LEVELS)
    if value.get("family") is not None:
        node["family"] = v.choice(value["family"], f"{field}.family", choices=FAMILIES)
    if value.get("grove") is not None:
        node["grove"] = v.string(value["grove"], f"{field}.grove", max_length=100).strip()
    needs = v.array(value.get("needs", []), f"{field}.needs", max_items=MAX_NODES)
    node["needs"] = sorted({v.string(n, f"{field}.needs[{i}]", max_length=63) for i, n in enumerate(needs)})
    return node


def graph_validate(graph: Any, *, field: str = "graph") -> dict[str, Any]:
    """Validate a graph and return its canonical form (defaults filled, nodes sorted by id), or raise."""
    graph = v.obj(graph, field, allowed={"nodes"}, required={"nodes"})
    items = v.array(graph["nodes"], f"{field}.nodes", max_items=MAX_NODES)
    if not items:
        raise v.fail("graph_empty", "A graph needs at least one node.", f"{field}.nodes")
    return graph_canonical([node_validate(item, f"{field}.nodes[{index}]") for index, item in enumerate(items)],
                           field=field)


def graph_canonical(nodes: list[dict[str, Any]], *, field: str = "graph") -> dict[str, Any]:
    """The graph-level checks (repeated ids, unknown needs, cycles) over nodes that ``node_validate`` already
    parsed, and the canonical form (nodes sorted by id). A compute request builds its nodes from steps and
    comes here directly: its nodes are parsed once, not again as a graph."""
    repeat = v.first_repeat([node["id"] for node in nodes])
    if repeat:
        first, index = repeat
        raise v.fail("duplicate_node_id", f"Node id '{nodes[index]['id']}' is used twice (nodes[{first}] "
                     f"and nodes[{index}]).", f"{field}.nodes[{index}].id")
    seen = {node["id"]: index for index, node in enumerate(nodes)}
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


def graph_digest(canonical: dict[str, Any]) -> str:
    """Identity of the *work*: the same graph, however it was spelled, has the same digest."""
    return "sha256:" + hashlib.sha256(canonical_json(canonical).encode()).hexdigest()


def topological_order(canonical: dict[str, Any]) -> list[str]:
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


# Fields that do not change what a node computes: where it runs, how long we wait, reuse and retry policy.
_NON_WORK_FIELDS = {"id", "needs", "grove", "timeout_s", "reuse", "retries", "backoff"}


def node_digests(canonical: dict[str, Any]) -> dict[str, str]:
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

def dedup_exclusion(node: dict[str, Any]) -> str | None:
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
    image = node.get("image")
    if not isinstance(image, str) or not PINNED_IMAGE.match(image):
        return "image_not_pinned"
    for item in node.get("inputs", []):
        if not is_container_image(item.get("storage_kind", "")):
            return "input_not_oci"
    return None


# --- step retries ---------------------------------------------------------------------------------

# Only an attempt that ran and failed, or ran out of time, is retried; a cancelled one never is (someone
# or something decided it should stop).
RETRYABLE_OUTCOMES = frozenset({NodeStatus.FAILED, NodeStatus.TIMED_OUT})


def retry_delay_s(node: dict[str, Any], *, attempt: int) -> int | None:
    """Seconds to wait before the attempt after ``attempt`` (1-based), or None when the node has no
    retries left."""
    retries = node.get("retries", 0)
    if attempt > retries:
        return None
    policy = node.get("backoff") or DEFAULT_BACKOFF
    delay: int = min(policy["delay_s"] * policy["factor"] ** (attempt - 1), policy["max_s"])
    return delay


def retry_after(node: dict[str, Any], *, attempt: int, outcome: str) -> int | None:
    """How long before a node whose attempt ended ``outcome`` runs again; None: it does not."""
    if outcome not in RETRYABLE_OUTCOMES:
        return None
    return retry_delay_s(node, attempt=attempt)


# --- detached wait eligibility --------------------------------------------------------------------

def detached_wait_exclusion(node: dict[str, Any]) -> str | None:
    """Why a node must wait in place (a code), or None when its runner slot may be released.

    Only plain container exec steps detach: accelerator steps, native steps and other node kinds keep
    their runner while the job runs (the graph has no build groups yet, so that exclusion does not arise).
    """
    if node["kind"] != "exec":
        return "not_exec"
    if node.get("runtime", "container") != "container":
        return "native_step"
    if node.get("accelerators"):
        return "accelerator_step"
    return None


# --- the execution requirement of a node ---------------------------------------------------------

# How each kind of node runs: (family or None for the run kind's, artifact kind, change kind, isolation).
_NODE_SHAPES: dict[tuple[str, str], tuple[str | None, str, str, str]] = {
    (NodeKind.EXEC, NodeRuntime.CONTAINER): (None, ArtifactKind.OCI_IMAGE, ChangeKind.K8S_JOB,
                                            IsolationMode.CONTAINER),
    (NodeKind.EXEC, NodeRuntime.NATIVE): (None, ArtifactKind.HOST_COMMAND, ChangeKind.NATIVE_JOB,
                                         IsolationMode.HOST_PROCESS),
    (NodeKind.BUILD_IMAGE, NodeRuntime.CONTAINER): (Role.BUILD, ArtifactKind.OCI_IMAGE, ChangeKind.K8S_BUILD_JOB,
                                                   IsolationMode.CONTAINER),
    (NodeKind.DEPLOY, NodeRuntime.CONTAINER): (Role.RUNTIME, ArtifactKind.OCI_IMAGE, ChangeKind.K8S_DEPLOYMENT,
                                              IsolationMode.CONTAINER),
    (NodeKind.DEPLOY, NodeRuntime.NATIVE): (Role.RUNTIME, ArtifactKind.NATIVE_BUNDLE, ChangeKind.NATIVE_WORKLOAD,
                                           IsolationMode.HOST_PROCESS),
}


def planned_requirement(node: dict[str, Any], *, run_kind: str) -> ExecutionRequirement:
    """The requirement of a node ``node_validate`` already parsed (the planner's): built from its
    canonical values without reading them again (``derivation.requirement_parsed``)."""
    kind = node["kind"]
    family, artifact_kind, change_kind, isolation = _node_shape(kind, node.get("runtime", NodeRuntime.CONTAINER))
    if kind == NodeKind.EXEC and node.get("family") is not None:
        family = node["family"]
    return requirement_parsed(
        family=family or RUN_KIND_FAMILY[RunKind(run_kind)], source=f"node:{node['id']}", artifact_kind=artifact_kind,
        change_kind=change_kind, isolation=isolation, resources=node["resources"],
        accelerators=node.get("accelerators"), platform=node.get("platform"), trust=node["trust"],
        grove=node.get("grove"))


def _node_shape(kind: str, runtime: str) -> tuple[str | None, str, str, str]:
    node_kind = NodeKind(kind)
    return _NODE_SHAPES.get((node_kind, NodeRuntime(runtime)), _NODE_SHAPES[(node_kind, NodeRuntime.CONTAINER)])


def node_requirement(node: dict[str, Any], *, run_kind: str, artifact: dict[str, Any] | None = None,
                     grove: dict[str, Any] | None = None) -> ExecutionRequirement:
    """A node -> its requirement (derived once, at plan time).

    exec/container -> oci_image, k8s.job, container; exec/native -> host_command, native.job,
    host_process; build_image -> oci_image, k8s.build_job, container, family build;
    deploy -> runtime, k8s.deployment (native.workload with a native bundle for a native runtime).
    ``artifact`` ({"digest", "platform"}) and ``grove`` ({"slug", "platforms"}) add platform sources.
    Reads a node as given (staff tools, tests); the planner, whose nodes are parsed, uses
    ``planned_requirement``.
    """
    if not isinstance(node, dict):
        raise ValidationFailed("invalid_type", "A pipeline node must be a JSON object.", field="node")
    kind = v.choice(node.get("kind", NodeKind.EXEC), "kind", choices=NODE_KINDS)
    if run_kind not in RUN_KIND_FAMILY:
        raise ValidationFailed("invalid_choice", f"Run kind must be one of {', '.join(RUN_KIND_FAMILY)}.",
                               field="run_kind")
    runtime = v.choice(node.get("runtime", NodeRuntime.CONTAINER), "runtime", choices=RUNTIMES)
    family, artifact_kind, change_kind, isolation = _node_shape(kind, runtime)
    family = family or RUN_KIND_FAMILY[run_kind]
    if node.get("family") is not None and kind == NodeKind.EXEC:
        family = v.choice(node["family"], "family", choices=FAMILIES)
    return requirement(node, family=family, source=f"node:{node.get('id') or '?'}", artifact=artifact, grove=grove,
                       artifact_kind=artifact_kind, change_kind=change_kind, isolation=isolation)


def run_request(body: Any) -> dict[str, Any]:
    """``POST pipelines/runs``: ``{"graph", "kind", "environment"?, "team"?, "build_id"?}``."""
    body = v.obj(body, "", allowed={"graph", "kind", "environment", "team", "build_id"}, required={"graph", "kind"})
    out = {"graph": body["graph"], "kind": v.choice(body["kind"], "kind", choices=RUN_KINDS)}
    for name in ("environment", "team", "build_id"):
        if body.get(name) is not None:
            out[name] = v.string(body[name], name, max_length=100)
    return out
