"""The MCP tools' input schemas are Host's declarations: the ``plan`` tool's ``graph`` is
``apps.pipelines.bodies.PipelineGraph`` (exact keys, Host's bounds), its ``steps`` the compute step's."""
from __future__ import annotations

import anyio

from apps.pipelines.bodies import PipelineGraph, PipelineNode
from forest_cli.mcp_server import build_server
from tests.pipelines.graphs import IMAGE, exec_node, graph


def _tool_schema(name: str) -> dict:
    server = build_server(host="http://127.0.0.1:9", token="unused")  # listing tools calls no Host

    async def tools() -> list:
        return list(await server.list_tools())

    return next(tool for tool in anyio.run(tools) if tool.name == name).input_schema


def test_the_plan_tools_graph_is_the_declared_graph():
    schema = _tool_schema("plan")
    graph_ref = next(item for item in schema["properties"]["graph"]["anyOf"] if "$ref" in item)["$ref"]
    assert graph_ref.endswith("/PipelineGraph")
    node = schema["$defs"]["PipelineNode"]
    assert set(node["properties"]) == set(PipelineNode.model_fields) and node["additionalProperties"] is False
    assert node["properties"]["timeout_s"] == PipelineNode.model_json_schema()["properties"]["timeout_s"]
    assert schema["$defs"]["PipelineGraph"]["properties"]["nodes"]["maxItems"] == \
        PipelineGraph.model_json_schema()["properties"]["nodes"]["maxItems"]


def test_a_graph_goes_to_host_as_it_was_given():
    given = graph(exec_node("a", image=IMAGE), exec_node("b", needs=["a"], runtime="native", image=None))
    assert PipelineGraph.model_validate(given).model_dump(exclude_unset=True) == given
