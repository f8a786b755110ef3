"""``forest mcp`` as a real subprocess over stdio, driven by the official ``mcp`` SDK client against a
live Host server: the tools are listed, a compute job is submitted, read and cancelled, and a Host
refusal comes back as a tool error with its code."""
from __future__ import annotations

import json
import os

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.console import console_script
from tests.factories import api_token_for
from tests.pipelines.graphs import IMAGE

pytestmark = pytest.mark.django_db(transaction=True)
FOREST = console_script("forest")


def _payload(result) -> object:
    if result.structured_content:
        content = result.structured_content
        return content.get("result", content) if isinstance(content, dict) else content
    return json.loads(result.content[0].text)


def test_mcp_tools_over_stdio(live_server, staff_user, flag_on, k8s_grove):
    flag_on("host.deploy.forest_compute_jobs")
    token = api_token_for(staff_user, "cli")
    params = StdioServerParameters(command=FOREST, args=["mcp"],
                                   env={"FOREST_HOST": live_server.url, "FOREST_TOKEN": token,
                                        # this checkout's code first, as the test process has it
                                        **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}})
    seen: dict = {}

    async def session_run():
        with anyio.fail_after(60):
            await _exercise()

    async def _exercise():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            seen["tools"] = {tool.name for tool in (await session.list_tools()).tools}
            request = {"name": "mcp-job", "steps": [{"name": "a", "image": IMAGE, "command": ["true"]}]}
            submitted = _payload(await session.call_tool("compute_submit", request))  # no {"request": ...} wrapper
            seen["submitted"] = submitted
            seen["status"] = _payload(await session.call_tool("compute_status", {"job_id": submitted["id"]}))
            seen["cancelled"] = _payload(await session.call_tool("compute_cancel", {"job_id": submitted["id"]}))
            bad = await session.call_tool("compute_submit", {"name": "x", "steps": []})
            seen["error"] = (bad.is_error, bad.content[0].text)

    anyio.run(session_run)
    assert seen["tools"] >= {"compute_submit", "compute_status", "compute_cancel", "compute_list", "runs_list",
                             "run_show", "run_cancel", "placements_explain"}
    assert seen["submitted"]["name"] == "mcp-job" and seen["status"]["id"] == seen["submitted"]["id"]
    assert seen["cancelled"]["status"] == "cancelled"
    assert seen["error"][0] is True and "compute_steps_empty" in seen["error"][1]
