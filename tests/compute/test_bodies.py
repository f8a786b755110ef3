"""The compute submit declaration (``apps.compute.bodies``: the OpenAPI schema, the MCP tools, the CLI's
help) is also the parse (``compute_request``): an unknown key at every level (``resources`` and
``accelerators`` included) is refused naming exactly the declared keys, each declared bound is refused one
past it at the field's path, and the published schema is the declaration."""
from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from apps.compute import bodies
from apps.core.errors import ValidationFailed
from apps.pipelines import bodies as node_bodies
from apps.pipelines.vocabulary import MAX_ARGV, MAX_INPUTS, MAX_OUTPUTS
from tests.core.declared import assert_same_bounds, assert_same_keys
from tests.pipelines.graphs import IMAGE

DIGEST = "sha256:" + "a" * 64


def _body() -> dict:
    return {"name": "train", "environment": "lab", "team": "ml", "steps": [
        {"name": "prep", "kind": "container", "image": IMAGE, "command": ["python", "prep.py"],
         "env": {"SEED": "1"}, "inputs": [{"digest": DIGEST, "path": "data/in.bin"}, {"artifact": 3}],
         "outputs": [{"name": "model", "path": "out/model.bin"}], "timeout_s": 600},
        {"name": "train", "kind": "native", "command": ["./train.sh"], "platform": ["darwin/arm64"],
         "resources": {"cpu_milli": 4000, "memory_bytes": 8 << 30},
         "accelerators": {"count": 1, "vendor": "apple", "min_memory_bytes": 1 << 30},
         "retries": 2, "backoff": {"delay_s": 1, "factor": 3, "max_s": 30}},
    ]}


def test_a_body_using_every_field_is_accepted():
    data = bodies.compute_request(_body())
    assert data["step_fields"] == {"prep": "steps[0]", "train": "steps[1]"}


# (where the object sits in a body, the declared model for it)
LEVELS = [
    (lambda b, extra: b.update(extra), bodies.ComputeJobRequest),
    (lambda b, extra: b["steps"][0].update(extra), bodies.ComputeStep),
    (lambda b, extra: b["steps"][1]["resources"].update(extra), node_bodies.StepResources),
    (lambda b, extra: b["steps"][1]["accelerators"].update(extra), node_bodies.StepAccelerators),
    (lambda b, extra: b["steps"][1]["backoff"].update(extra), node_bodies.StepBackoff),
    (lambda b, extra: b["steps"][0]["inputs"][0].update(extra), node_bodies.StepInput),
    (lambda b, extra: b["steps"][0]["outputs"][0].update(extra), node_bodies.StepOutput),
]


@pytest.mark.parametrize(("put", "model"), LEVELS, ids=[m.__name__ for _, m in LEVELS])
def test_every_level_declares_exactly_the_keys_the_parser_allows(put, model: type[BaseModel]):
    assert_same_keys(bodies.compute_request, _body(), put, model, _minimal(model))


def _minimal(model: type[BaseModel]) -> dict:
    return {bodies.ComputeJobRequest: {"name": "x", "steps": [{"name": "a", "command": ["true"]}]},
            bodies.ComputeStep: {"name": "a", "command": ["true"]},
            node_bodies.StepAccelerators: {"count": 1},
            node_bodies.StepOutput: {"name": "o", "path": "o"}}.get(model, {})


# (the field's path in _body(), how to set it, its declared model and field name)
BOUNDED = [
    ("steps[1].resources.cpu_milli", lambda b, x: b["steps"][1]["resources"].update(cpu_milli=x),
     node_bodies.StepResources, "cpu_milli"),
    ("steps[1].resources.memory_bytes", lambda b, x: b["steps"][1]["resources"].update(memory_bytes=x),
     node_bodies.StepResources, "memory_bytes"),
    ("steps[1].accelerators.min_memory_bytes",
     lambda b, x: b["steps"][1]["accelerators"].update(min_memory_bytes=x), node_bodies.StepAccelerators,
     "min_memory_bytes"),
    ("steps[0].timeout_s", lambda b, x: b["steps"][0].update(timeout_s=x), bodies.ComputeStep, "timeout_s"),
    ("steps[1].retries", lambda b, x: b["steps"][1].update(retries=x), bodies.ComputeStep, "retries"),
    ("steps[1].backoff.factor", lambda b, x: b["steps"][1]["backoff"].update(factor=x), node_bodies.StepBackoff,
     "factor"),
    ("steps[1].backoff.max_s", lambda b, x: b["steps"][1]["backoff"].update(max_s=x), node_bodies.StepBackoff, "max_s"),
]


@pytest.mark.parametrize(("path", "put", "model", "name"), BOUNDED, ids=[b[0] for b in BOUNDED])
def test_the_declared_bounds_are_the_parsers(path, put, model, name):
    assert_same_bounds(bodies.compute_request, _body(), put, model, name, path)


def test_the_openapi_request_body_is_the_declaration(staff_client):
    schema = staff_client.get("/api/schema/?format=json").json()
    ref = schema["paths"]["/api/forest/v1/compute/jobs"]["post"]["requestBody"]["content"]["application/json"]
    component = schema["components"]["schemas"][ref["schema"]["$ref"].rsplit("/", 1)[-1]]
    assert set(component["properties"]) == set(bodies.ComputeJobRequest.model_fields)
    assert component["additionalProperties"] is False
    resources = schema["components"]["schemas"]["StepResources"]
    assert set(resources["properties"]) == {"cpu_milli", "memory_bytes"} and resources["additionalProperties"] is False
    # The request's inputs and outputs are the declared ones, not the response shapes of a job's inputs and
    # outputs (components of one name: the request's $ref pointed at the response's shape).
    for model in (node_bodies.StepInput, node_bodies.StepOutput):
        component = schema["components"]["schemas"][model.__name__]
        assert set(component["properties"]) == set(model.model_fields) and component["additionalProperties"] is False


# (the list field of a step, its bound, one item numbered i)
LISTS = [
    ("inputs", MAX_INPUTS, lambda i: {"digest": DIGEST, "path": f"data/in{i}.bin"}),
    ("outputs", MAX_OUTPUTS, lambda i: {"name": f"o{i}", "path": f"out/o{i}.bin"}),
    ("command", MAX_ARGV, lambda i: f"arg{i}"),
]


@pytest.mark.parametrize(("name", "bound", "item"), LISTS, ids=[entry[0] for entry in LISTS])
def test_the_declared_list_bounds_are_the_parsers(name, bound, item):
    """A step's list at its bound passes the reader and the declaration; one more item is refused by both (the
    reader with the step's field path), and the published schema (OpenAPI, MCP, CLI help) says the bound."""
    prop = bodies.ComputeStep.model_json_schema()["properties"][name]
    declared = next((entry for entry in prop.get("anyOf", [prop]) if entry.get("type") == "array"), prop)
    assert declared["maxItems"] == bound
    body = _body()
    body["steps"][0][name] = [item(i) for i in range(bound)]
    bodies.compute_request(body)
    bodies.ComputeJobRequest.model_validate(body)
    body["steps"][0][name].append(item(bound))
    with pytest.raises(ValidationFailed) as refused:
        bodies.compute_request(body)
    assert refused.value.field.startswith(f"steps[0].{name}")
    with pytest.raises(ValidationError, match=name):
        bodies.ComputeJobRequest.model_validate(body)
