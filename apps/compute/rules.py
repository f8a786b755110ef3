"""The compute request and its graph. Pure: no Django.

Request (extend, never rename): ``{"name", "environment"?, "team"?, "grove"?, "steps": [Step, ...]}``,
``Step = {"name", "kind": "container"|"native", "image"?, "command", "env"?, "platform"?, "resources"?,
"accelerators"?, "timeout_s"?, "retries"?, "backoff"?, "inputs"?, "outputs"?}``. Container steps become
``k8s.job`` work, native steps ``native.job`` work. ``inputs`` (``[{"artifact"|"digest"|"image", "path"?,
"name"?, "kind"?}]``) are resolved to exact artifacts at submit; ``outputs`` (``[{"name", "path"}]``) are
uploaded by the executor after a successful command (the pipeline node parser reads both).
"""
from __future__ import annotations

from typing import Any

from apps.compute.bodies import MAX_STEPS
from apps.core import validation as v
from apps.groves.vocabulary import Role
from apps.pipelines import rules as graph_rules
from apps.pipelines.vocabulary import NodeKind, NodeRuntime, Reuse

STEP_KINDS = tuple(NodeRuntime)
STEP_FIELDS = {"name", "kind", "image", "command", "env", "platform", "resources", "accelerators", "timeout_s",
               "inputs", "outputs", "retries", "backoff"}
# A step is an exec node of a compute run: the node fields it fills itself.
_STEP_AS_NODE = {"command", "env", "platform", "resources", "accelerators", "timeout_s", "image", "retries",
                 "backoff", "inputs", "outputs"}


def _step(value: Any, field: str) -> dict[str, Any]:
    """Map one step to its exec node and parse it with the pipeline node parser (one parser: same limits,
    same codes, the step's own field paths). The step's keys are checked here, so the node's are not."""
    value = v.obj(value, field, allowed=STEP_FIELDS, required={"name", "command"})
    name = v.string(value["name"], f"{field}.name", max_length=63)
    if not graph_rules.NODE_ID.match(name):
        raise v.fail("invalid_step_name", f"Step name '{name}' must match [a-z0-9][a-z0-9_-]* (at most 63).",
                     f"{field}.name")
    kind = v.choice(value.get("kind", NodeRuntime.CONTAINER), f"{field}.kind", choices=STEP_KINDS)
    node = {"id": name, "kind": NodeKind.EXEC, "runtime": kind, "reuse": Reuse.NEVER, "family": Role.COMPUTE,
            **{key: value[key] for key in _STEP_AS_NODE if value.get(key) is not None}}
    return graph_rules.node_parse(node, field)


def compute_request(body: Any) -> dict[str, Any]:
    """Validate a compute request; returns ``{"name", "environment", "team", "grove", "canonical",
    "step_fields"}`` (``canonical``: the steps as a canonical pipeline graph, each node parsed once)."""
    body = v.obj(body, "", allowed={"name", "environment", "team", "grove", "steps"}, required={"name", "steps"})
    out: dict[str, Any] = {"name": v.string(body["name"], "name", max_length=200),
           "environment": v.string(body.get("environment", ""), "environment", max_length=100, allow_empty=True),
           "team": v.string(body.get("team", ""), "team", max_length=100, allow_empty=True),
           "grove": None}
    if body.get("grove") is not None:
        out["grove"] = v.string(body["grove"], "grove", max_length=100).strip()
    steps = v.array(body["steps"], "steps", max_items=MAX_STEPS)
    if not steps:
        raise v.fail("compute_steps_empty", "A compute job needs at least one step.", "steps")
    nodes: list[dict[str, Any]] = []
    for index, raw in enumerate(steps):
        node = _step(raw, f"steps[{index}]")
        # Steps run one after another, in the order given.
        node["needs"] = [nodes[-1]["id"]] if nodes else []
        if out["grove"]:
            node["grove"] = out["grove"]
        nodes.append(node)
    repeat = v.first_repeat([node["id"] for node in nodes])
    if repeat:
        first, index = repeat
        raise v.fail("duplicate_step_name", f"Step name '{nodes[index]['id']}' is used twice (steps[{first}] "
                     f"and steps[{index}]).", f"steps[{index}].name")
    # Parsed once: the graph is canonical here and is not parsed again by the run's creation.
    out["canonical"] = graph_rules.graph_canonical(nodes, field="steps")
    out["step_fields"] = {node["id"]: f"steps[{index}]" for index, node in enumerate(nodes)}
    return out
