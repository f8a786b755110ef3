"""The CLI and the MCP server act with their token's user: a viewer and a submitter of team ``red``, against
a live Host (real HTTP, PostgreSQL), see nothing of team ``blue`` and cannot cancel its work."""
from __future__ import annotations

import json

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from typer.testing import CliRunner

from apps.pipelines.models import PipelineRun
from apps.placement.models import ExecutionPlacement
from forest_cli.main import app
from tests.cli.test_mcp import _payload
from tests.cli.test_staff_cli import FOREST, STAFF_FLAG
from tests.factories import api_token_for

pytestmark = pytest.mark.django_db(transaction=True)
runner = CliRunner()


@pytest.fixture
def scoped(live_server, users, estate, flag_on):
    flag_on(STAFF_FLAG)
    ExecutionPlacement.objects.filter(pk__in=[estate[t]["placement"].pk for t in ("red", "blue")]).update(
        would_refuse=True)

    tokens: dict = {}

    def cli(user, *args):
        if user.pk not in tokens:
            tokens[user.pk] = api_token_for(user, "cli")
        token = tokens[user.pk]
        return runner.invoke(app, ["--host", live_server.url, "--token", token, "--json", *args],
                             catch_exceptions=False)

    return cli


@pytest.mark.parametrize("role", ["viewer", "submitter"])
def test_the_cli_lists_only_the_users_team_and_cannot_cancel_another(scoped, users, estate, role):
    user = users[role]
    listed = scoped(user, "runs", "list")
    assert listed.exit_code == 0, listed.output
    assert str(estate["red"]["run"].id) in listed.output and str(estate["blue"]["run"].id) not in listed.output
    for args in (("placements",), ("placements", "--refused")):
        shown = scoped(user, *args)
        assert shown.exit_code == 0, shown.output
        assert "p-red" in shown.output and "p-blue" not in shown.output, args
    report = scoped(user, "refusals", "--since", "1d")
    assert report.exit_code == 0 and '"blue"' not in report.output, report.output
    blue = estate["blue"]["run"]
    refused = scoped(user, "runs", "cancel", str(blue.id))
    assert refused.exit_code == 1
    assert ("permission_required" if role == "viewer" else "team_forbidden") in refused.output
    assert PipelineRun.objects.get(pk=blue.pk).status == blue.status
    shown = scoped(user, "runs", "show", str(blue.id))
    assert shown.exit_code == 1 and "team_forbidden" in shown.output


def test_mcp_tools_act_only_on_the_users_team(live_server, users, estate, flag_on):
    flag_on(STAFF_FLAG)
    params = StdioServerParameters(command=FOREST, args=["mcp"], env={
        "FOREST_HOST": live_server.url, "FOREST_TOKEN": api_token_for(users["submitter"], "mcp")})
    seen: dict = {}

    async def exercise():
        with anyio.fail_after(60):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                seen["runs"] = _payload(await session.call_tool("runs_list", {}))
                seen["placements"] = _payload(await session.call_tool("placements_list", {}))
                refused = await session.call_tool("run_cancel", {"run_id": str(estate["blue"]["run"].id)})
                seen["refused"] = (refused.is_error, refused.content[0].text)
                own = await session.call_tool("run_cancel", {"run_id": str(estate["red"]["run"].id)})
                seen["own"] = _payload(own)

    anyio.run(exercise)
    text = json.dumps(seen["runs"]) + json.dumps(seen["placements"])
    assert str(estate["red"]["run"].id) in text and str(estate["blue"]["run"].id) not in text
    assert "p-blue" not in text
    assert seen["refused"][0] is True and "team_forbidden" in seen["refused"][1]
    assert PipelineRun.objects.get(pk=estate["blue"]["run"].pk).status != "cancelled"
    assert seen["own"]["status"] == "cancelled"
