"""Pure rules of the pipeline domain over canonical graphs: cycles, digests, ordering, GRAPH_DEDUP
eligibility, retries, detached-wait eligibility and each node's execution requirement. No Django.

A Canopy Pipeline Graph is ``{"nodes": [Node, ...]}``; edges are each node's ``needs`` (the node runs
after those). The node format is the one agreed with placement (``/docs/decisions.md``, "Canopy Pipeline
Graph"); it is declared and validated once, in ``apps.pipelines.bodies`` (a compute step is an exec node
declared in ``apps.compute.bodies``), which gives the canonical form these rules read.
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from apps.artifacts.vocabulary import is_container_image
from apps.core import validation as v
from apps.core.errors import ValidationFailed
from apps.groves.vocabulary import ChangeKind, IsolationMode, Role
from apps.pipelines.vocabulary import (
    DEFAULT_BACKOFF,
    RUN_KIND_FAMILY,
    NodeKind,
    NodeRuntime,
    NodeStatus,
    RunKind,
)
from apps.placement.derivation import requirement, requirement_parsed
from apps.placement.requirements import ExecutionRequirement
from apps.placement.vocabulary import FAMILIES, ArtifactKind

PINNED_IMAGE = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")

NODE_KINDS = tuple(NodeKind)
RUNTIMES = tuple(NodeRuntime)
RUN_KINDS = tuple(RunKind)


# --- graph identity and order ------------------------------------------------------------------

def output_key(*, attempt: int, name: str) -> str:
    """Where an attempt's output is written under the node's prefix (``runs/<run>/<node>/<key>``): each
    attempt its own key, so a retry that makes different bytes never collides with an earlier attempt,
    and a repeated upload of one attempt's bytes is the same artifact."""
    return f"attempt-{attempt}/{name}"


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
    """The requirement of a node ``bodies`` already parsed (the planner's): built from its
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
