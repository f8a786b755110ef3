"""The pipeline run declaration (``apps.pipelines.bodies``: the OpenAPI schema of ``POST pipelines/runs`` and
of ``POST plan``, the MCP ``plan`` tool's ``graph``) is also the parse (``run_request``): an unknown key at every
level is refused naming exactly the declared keys, each declared bound is refused one past it at the field's
path, and the published schema is the declaration."""
from __future__ import annotations

import pytest
from pydantic import BaseModel

from apps.pipelines import bodies, rules
from apps.pipelines.vocabulary import Reuse, RunKind
from tests.core.declared import assert_same_bounds, assert_same_keys
from tests.pipelines.graphs import IMAGE

DIGEST = "sha256:" + "a" * 64


def _parse(body: dict) -> dict:
    return bodies.run_request(body)


def _body() -> dict:
    return {"kind": "build", "environment": "lab", "team": "ml", "build_id": "b-1", "graph": {"nodes": [
        {"id": "image", "kind": "build_image", "image": {"artifact": 7}, "trust": "trusted"},
        {"id": "test", "kind": "exec", "runtime": "container", "image": IMAGE, "command": ["pytest"],
         "env": {"SEED": "1"}, "inputs": [{"digest": DIGEST, "path": "data/in.bin", "storage_kind": "cas"}],
         "outputs": [{"name": "report", "path": "out/report.xml"}], "timeout_s": 600, "needs": ["image"],
         "resources": {"cpu_milli": 2000, "memory_bytes": 1 << 30}, "reuse": "never", "family": "build",
         "retries": 2, "backoff": {"delay_s": 1, "factor": 3, "max_s": 30}},
        {"id": "mac", "kind": "exec", "runtime": "native", "command": ["./train.sh"], "platform": ["darwin/arm64"],
         "accelerators": {"count": 1, "vendor": "apple", "min_memory_bytes": 1 << 30}, "grove": "studio"},
    ]}}


def _node(body: dict, index: int) -> dict:
    return body["graph"]["nodes"][index]


def test_a_body_using_every_field_is_accepted():
    data = _parse(_body())
    assert [node["id"] for node in data["canonical"]["nodes"]] == ["image", "mac", "test"]


# (where the object sits in a body, the declared model for it)
LEVELS = [
    (lambda b, extra: b.update(extra), bodies.RunRequest),
    (lambda b, extra: b["graph"].update(extra), bodies.PipelineGraph),
    (lambda b, extra: _node(b, 1).update(extra), bodies.PipelineNode),
    (lambda b, extra: _node(b, 0)["image"].update(extra), bodies.ImageArtifact),
    (lambda b, extra: _node(b, 1)["resources"].update(extra), bodies.StepResources),
    (lambda b, extra: _node(b, 2)["accelerators"].update(extra), bodies.StepAccelerators),
    (lambda b, extra: _node(b, 1)["backoff"].update(extra), bodies.StepBackoff),
    (lambda b, extra: _node(b, 1)["inputs"][0].update(extra), bodies.StepInput),
    (lambda b, extra: _node(b, 1)["outputs"][0].update(extra), bodies.StepOutput),
]

_MINIMAL: dict[type[BaseModel], dict] = {
    bodies.RunRequest: {"kind": "build", "graph": {"nodes": [{"id": "a", "kind": "deploy"}]}},
    bodies.PipelineGraph: {"nodes": [{"id": "a", "kind": "deploy"}]},
    bodies.PipelineNode: {"id": "a", "kind": "deploy"}, bodies.ImageArtifact: {"artifact": 1},
    bodies.StepAccelerators: {"count": 1}, bodies.StepOutput: {"name": "o", "path": "o"},
}


@pytest.mark.parametrize(("put", "model"), LEVELS, ids=[m.__name__ for _, m in LEVELS])
def test_every_level_declares_exactly_the_keys_the_parser_allows(put, model: type[BaseModel]):
    assert_same_keys(_parse, _body(), put, model, _MINIMAL.get(model, {}))


# (the field's path as the parser names it, how to set it, its declared model and field name)
BOUNDED = [
    ("graph.nodes[1].timeout_s", lambda b, x: _node(b, 1).update(timeout_s=x), bodies.PipelineNode, "timeout_s"),
    ("graph.nodes[1].retries", lambda b, x: _node(b, 1).update(retries=x), bodies.PipelineNode, "retries"),
    ("graph.nodes[0].image.artifact", lambda b, x: _node(b, 0)["image"].update(artifact=x), bodies.ImageArtifact,
     "artifact"),
    ("graph.nodes[1].resources.cpu_milli", lambda b, x: _node(b, 1)["resources"].update(cpu_milli=x),
     bodies.StepResources, "cpu_milli"),
    ("graph.nodes[1].resources.memory_bytes", lambda b, x: _node(b, 1)["resources"].update(memory_bytes=x),
     bodies.StepResources, "memory_bytes"),
    ("graph.nodes[2].accelerators.min_memory_bytes",
     lambda b, x: _node(b, 2)["accelerators"].update(min_memory_bytes=x), bodies.StepAccelerators,
     "min_memory_bytes"),
    ("graph.nodes[1].backoff.factor", lambda b, x: _node(b, 1)["backoff"].update(factor=x), bodies.StepBackoff,
     "factor"),
    ("graph.nodes[1].backoff.max_s", lambda b, x: _node(b, 1)["backoff"].update(max_s=x), bodies.StepBackoff,
     "max_s"),
]


@pytest.mark.parametrize(("path", "put", "model", "name"), BOUNDED, ids=[b[0] for b in BOUNDED])
def test_the_declared_bounds_are_the_parsers(path, put, model, name):
    assert_same_bounds(_parse, _body(), put, model, name, path)


def test_the_declared_choices_are_the_parsers():
    node = bodies.PipelineNode.model_json_schema()["properties"]
    assert set(node["kind"]["enum"]) == set(rules.NODE_KINDS)
    assert set(node["runtime"]["enum"]) == set(rules.RUNTIMES)
    assert set(node["reuse"]["enum"]) == set(Reuse)
    assert set(bodies.RunRequest.model_json_schema()["properties"]["kind"]["enum"]) == set(RunKind)


def _ref(schema: dict, path: str) -> str:
    return schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]


def _component(schema: dict, path: str) -> dict:
    return schema["components"]["schemas"][_ref(schema, path).rsplit("/", 1)[-1]]


def test_the_openapi_request_bodies_are_the_declarations(staff_client):
    schema = staff_client.get("/api/schema/?format=json").json()
    run = _component(schema, "/api/forest/v1/pipelines/runs")
    assert set(run["properties"]) == set(bodies.RunRequest.model_fields) and run["additionalProperties"] is False
    node = schema["components"]["schemas"]["PipelineNode"]
    assert set(node["properties"]) == set(bodies.PipelineNode.model_fields) and node["additionalProperties"] is False
    plan = _component(schema, "/api/forest/v1/plan")
    # one of the two submit bodies: the very components their own endpoints use
    assert {item["$ref"] for item in plan["anyOf"]} == {_ref(schema, "/api/forest/v1/pipelines/runs"),
                                                        _ref(schema, "/api/forest/v1/compute/jobs")}
