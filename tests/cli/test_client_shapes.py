"""What the type checker made explicit in the CLI: each client call says whether Host answers one object or a
list, and an answer of the other shape is ``bad_response`` (not a KeyError or AttributeError later); the MCP
tools' choices are Host's vocabularies (one definition each), whatever the checker is shown."""
from __future__ import annotations

import json

import anyio
import httpx
import pytest

from apps.groves.vocabulary import Role, Substrate
from apps.pipelines.vocabulary import RunKind, RunStatus
from apps.placement.vocabulary import SubjectType
from forest_cli.client import API, ForestClient, ForestClientError
from forest_cli.mcp_server import build_server

JOB_ID = "0b5c3d0e-8a43-4d0e-9a57-5e1f2e3c4d5a"


def _client(answers: dict[str, object]) -> ForestClient:
    """A client whose Host answers each path with the given JSON (in process: no socket)."""
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=json.dumps(answers[request.url.path.removeprefix(API)]).encode(),
                              headers={"Content-Type": "application/json"})

    client = ForestClient("http://127.0.0.1:9", "token")
    client._http = httpx.Client(base_url=client.host + API, transport=httpx.MockTransport(answer))
    return client


@pytest.mark.parametrize(("call", "answers"), [
    (lambda c: c.compute_get(JOB_ID), {f"/compute/jobs/{JOB_ID}": [{"id": JOB_ID}]}),
    (lambda c: c.compute_list(), {"/compute/jobs": {"results": []}}),
    (lambda c: c.inventory(), {"/staff/inventory": "inventory"}),
    (lambda c: c.groves_list(), {"/staff/groves": [{"slug": "kube"}]}),
])
def test_an_answer_of_the_wrong_shape_is_bad_response(call, answers):
    client = _client(answers)
    with pytest.raises(ForestClientError) as raised:
        call(client)
    assert raised.value.code == "bad_response"
    assert "is not a JSON" in raised.value.detail


def test_an_answer_of_the_right_shape_is_returned_as_it_came():
    job = {"id": JOB_ID, "steps": []}
    client = _client({f"/compute/jobs/{JOB_ID}": job, "/compute/jobs": [job]})
    assert client.compute_get(JOB_ID) == job
    assert client.compute_list() == [job]


def _choices(schema: dict) -> list[str]:
    return next(option["enum"] for option in schema["anyOf"] if "enum" in option)


def test_mcp_tool_choices_are_hosts_vocabularies():
    async def listed():
        return {tool.name: tool.input_schema["properties"]
                for tool in await build_server(host="http://127.0.0.1:9", token="t").list_tools()}

    tools = anyio.run(listed)
    assert _choices(tools["runs_list"]["status"]) == [m.value for m in RunStatus]
    assert _choices(tools["runs_list"]["kind"]) == [m.value for m in RunKind]
    assert _choices(tools["plan"]["kind"]) == [m.value for m in RunKind]
    assert _choices(tools["groves_list"]["substrate"]) == [m.value for m in Substrate]
    assert _choices(tools["groves_list"]["role"]) == [m.value for m in Role]
    assert _choices(tools["placements_list"]["subject_type"]) == [m.value for m in SubjectType]
