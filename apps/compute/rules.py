"""The compute request and its graph. Pure: no Django.

Request (extend, never rename): ``{"name", "environment"?, "team"?, "grove"?, "steps": [Step, ...]}``,
``Step = {"name", "kind": "container"|"native", "image"?, "command", "env"?, "platform"?, "resources"?,
"accelerators"?, "timeout_s"?}``. Container steps become ``k8s.job`` work, native steps ``native.job``
work. Input artifacts are refused with ``compute_inputs_unsupported`` until the artifacts work adds them.
"""
from __future__ import annotations

from typing import Any

from apps.core import validation as v
from apps.pipelines import rules as graph_rules

MAX_STEPS = 100
STEP_KINDS = ("container", "native")
STEP_FIELDS = {"name", "kind", "image", "command", "env", "platform", "resources", "accelerators", "timeout_s",
               "inputs"}


def _step(value: Any, field: str) -> dict:
    value = v.obj(value, field, allowed=STEP_FIELDS, required={"name", "command"})
    if "inputs" in value:
        raise v.fail("compute_inputs_unsupported", "Compute steps cannot take input artifacts yet; "
                     "bake inputs into the image or fetch them in the command.", f"{field}.inputs")
    name = v.string(value["name"], f"{field}.name", max_length=63)
    if not graph_rules.NODE_ID.match(name):
        raise v.fail("invalid_step_name", f"Step name '{name}' must match [a-z0-9][a-z0-9_-]* (at most 63).",
                     f"{field}.name")
    kind = v.choice(value.get("kind", "container"), f"{field}.kind", choices=STEP_KINDS)
    node: dict[str, Any] = {"id": name, "kind": "exec", "runtime": kind, "reuse": "never", "family": "compute"}
    if kind == "container":
        if value.get("image") is None:
            raise v.fail("image_required", "A container step needs an image.", f"{field}.image")
        node["image"] = v.string(value["image"], f"{field}.image", max_length=500).strip()
    elif value.get("image") is not None:
        raise v.fail("image_not_allowed", "A native step runs a host command; it takes no image.", f"{field}.image")
    items = v.array(value["command"], f"{field}.command", max_items=graph_rules.MAX_ARGV)
    if not items:
        raise v.fail("command_required", "A step needs a command (a list of arguments).", f"{field}.command")
    node["command"] = [v.string(a, f"{field}.command[{i}]", max_length=graph_rules.MAX_ARG, allow_empty=True)
                       for i, a in enumerate(items)]
    node["env"] = graph_rules.env_map(value.get("env", {}), f"{field}.env")
    if value.get("platform") is not None:
        node["platform"] = graph_rules.platform_list(value["platform"], f"{field}.platform")
    if value.get("resources") is not None:
        node["resources"] = graph_rules.resources(value["resources"], f"{field}.resources")
    if value.get("accelerators") is not None:
        node["accelerators"] = graph_rules.accelerators(value["accelerators"], f"{field}.accelerators")
    if value.get("timeout_s") is not None:
        node["timeout_s"] = v.integer(value["timeout_s"], f"{field}.timeout_s", minimum=1,
                                      maximum=graph_rules.MAX_TIMEOUT_S)
    return node


def compute_request(body: Any) -> dict:
    """Validate a compute request; returns ``{"name", "environment", "team", "grove", "graph"}``."""
    body = v.obj(body, "", allowed={"name", "environment", "team", "grove", "steps"}, required={"name", "steps"})
    out = {"name": v.string(body["name"], "name", max_length=200),
           "environment": v.string(body.get("environment", ""), "environment", max_length=100, allow_empty=True),
           "team": v.string(body.get("team", ""), "team", max_length=100, allow_empty=True),
           "grove": None}
    if body.get("grove") is not None:
        out["grove"] = v.string(body["grove"], "grove", max_length=100).strip()
    steps = v.array(body["steps"], "steps", max_items=MAX_STEPS)
    if not steps:
        raise v.fail("compute_steps_empty", "A compute job needs at least one step.", "steps")
    nodes: list[dict] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(steps):
        node = _step(raw, f"steps[{index}]")
        if node["id"] in seen:
            raise v.fail("duplicate_step_name", f"Step name '{node['id']}' is used twice (steps[{seen[node['id']]}] "
                         f"and steps[{index}]).", f"steps[{index}].name")
        seen[node["id"]] = index
        # Steps run one after another, in the order given.
        node["needs"] = [nodes[-1]["id"]] if nodes else []
        if out["grove"]:
            node["grove"] = out["grove"]
        nodes.append(node)
    out["graph"] = {"nodes": nodes}
    return out
