"""CLI and MCP parity for the staff reads and the plan preview, against a live Host (real HTTP, PostgreSQL):
``forest groves``, ``inventory``, ``placements [--refused]``, ``refusals --since``, ``plan FILE``,
``compute logs``; and the same as MCP tools with typed input schemas and the server's version."""
from __future__ import annotations

import json
import os

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from typer.testing import CliRunner

from apps.dispatch.models import GroveJob
from apps.pipelines import services as pipelines
from apps.pipelines.models import PipelineNode
from apps.placement.models import ExecutionPlacement
from forest_cli.main import app
from forest_cli.mcp_server import server_version
from tests.console import console_script
from tests.factories import api_token_for
from tests.pipelines.graphs import IMAGE

pytestmark = pytest.mark.django_db(transaction=True)
runner = CliRunner()
FOREST = console_script("forest")
STAFF_FLAG = "host.staff.execution_observability"


@pytest.fixture
def token(staff_user):
    return api_token_for(staff_user)


@pytest.fixture
def cli(live_server, token, flag_on):
    flag_on(STAFF_FLAG)
    flag_on("host.deploy.forest_compute_jobs")

    def _run(*args):
        return runner.invoke(app, ["--host", live_server.url, "--token", token, *args], catch_exceptions=False)

    _run.host, _run.token = live_server.url, token
    return _run


def _dispatch_all():
    for node in PipelineNode.objects.filter(status="queued"):
        pipelines.pipeline_node_execute(node_id=node.pk)


def _shadow_job(cli, native_grove, tmp_path) -> dict:
    """A compute job whose container step is pinned to the native Grove: placed, but would refuse."""
    spec = tmp_path / "shadow.yaml"
    spec.write_text(f"name: shadow\ngrove: {native_grove[0].slug}\nsteps:\n"
                    f"  - name: a\n    image: '{IMAGE}'\n    command: [python, a.py]\n")
    job = json.loads(cli("--json", "compute", "submit", str(spec)).output)
    _dispatch_all()
    return job


def test_groves_and_inventory(cli, k8s_grove, native_grove, fresh_grove):
    fresh_grove(name="gpu-box", gpus=2)
    listed = cli("groves")
    assert listed.exit_code == 0, listed.output
    assert "kube" in listed.output and "gpu-box" in listed.output and "fresh" in listed.output
    native = json.loads(cli("--json", "groves", "--substrate", "native").output)
    assert {g["slug"] for g in native} == {"mac", "gpu-box"}
    assert [g["slug"] for g in json.loads(cli("--json", "groves", "--api", "cuda").output)] == ["gpu-box"]
    bad = cli("groves", "--substrate", "moon")
    assert bad.exit_code == 1 and "invalid_choice" in bad.output and "substrate" in bad.output
    inventory = cli("inventory")
    assert inventory.exit_code == 0 and "H100" in inventory.output and "2/2" in inventory.output


def test_groves_and_inventory_mark_simulated_and_not_ready_groves(cli, fresh_grove):
    from apps.groves.models import Grove

    demo, _ = fresh_grove(name="demo", gpus=2, polled=False)
    Grove.objects.filter(pk=demo.pk).update(simulated=True)
    fresh_grove(name="idle", polled=False)
    rows = {g["slug"]: g for g in json.loads(cli("--json", "groves").output)}
    assert (rows["demo"]["simulated"], rows["demo"]["ready"]) == (True, False)
    assert (rows["idle"]["simulated"], rows["idle"]["ready"]) == (False, False)
    listed = runner.invoke(app, ["--host", cli.host, "--token", cli.token, "groves"], env={"COLUMNS": "200"})
    table = {line.split()[0]: line for line in listed.output.splitlines() if line.split()[:1] in (["demo"], ["idle"])}
    assert "simulated" in table["demo"] and "not ready" in table["demo"]
    assert "not ready" in table["idle"] and "simulated" not in table["idle"]
    inventory = json.loads(cli("--json", "inventory").output)
    assert inventory["accelerators"] == [] and inventory["simulated"][0]["simulated"] is True
    assert "simulated" in cli("inventory").output


def test_staff_commands_need_the_flag_and_staff(live_server, token, k8s_grove, django_user_model):
    off = runner.invoke(app, ["--host", live_server.url, "--token", token, "groves"])
    assert off.exit_code == 1 and "feature_disabled" in off.output
    bot = api_token_for(django_user_model.objects.create_user("bot", is_staff=False))
    denied = runner.invoke(app, ["--host", live_server.url, "--token", bot, "inventory"])
    assert denied.exit_code == 1 and ("staff_only" in denied.output or "feature_disabled" in denied.output)


def test_placements_refused_and_refusals(cli, k8s_grove, native_grove, tmp_path):
    _shadow_job(cli, native_grove, tmp_path)
    listed = cli("placements")
    assert listed.exit_code == 0 and "mac" in listed.output
    rows = json.loads(cli("--json", "placements").output)
    assert rows[0]["subject"]["label"] == "job shadow · step a" and rows[0]["subject"]["status"] == "awaiting"
    refused = json.loads(cli("--json", "placements", "--refused").output)
    assert len(refused) == 1 and refused[0]["would_refuse"] is True
    codes = {i["code"] for i in ExecutionPlacement.objects.get().decision["incompatibilities"]}
    report = cli("refusals", "--since", "7d")
    assert report.exit_code == 0 and "1 placements refused or would be refused" in report.output
    assert "0 refused, 1 would refuse; 1 Groves involved" in report.output
    assert all(code in report.output for code in codes)
    body = json.loads(cli("--json", "refusals", "--since", "1d").output)
    assert body["total"] == 1 and body["by_grove"][0]["grove"] == "mac"
    bad = cli("refusals", "--since", "someday")
    assert bad.exit_code == 1 and "invalid_value" in bad.output


def test_plan_previews_without_storing(cli, k8s_grove, native_grove, tmp_path):
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps({"nodes": [{"id": "a", "kind": "exec", "image": IMAGE, "command": ["true"]},
                                           {"id": "b", "kind": "exec", "image": IMAGE, "command": ["true"],
                                            "needs": ["a"], "grove": "mac"}]}))
    previewed = cli("plan", str(graph), "--kind", "compute")
    assert previewed.exit_code == 0, previewed.output
    assert "kube" in previewed.output and "would refuse" in previewed.output
    body = json.loads(cli("--json", "plan", str(graph), "--kind", "compute").output)
    assert [n["node"] for n in body["nodes"]] == ["a", "b"] and body["nodes"][0]["grove"] == "kube"
    assert body["nodes"][1]["would_refuse"] is True and body["placeable"] is True
    assert not PipelineNode.objects.exists() and not ExecutionPlacement.objects.exists()
    request = tmp_path / "job.yaml"
    request.write_text(f"steps:\n  - name: s\n    image: '{IMAGE}'\n    command: [true]\n    platfrom: [linux/amd64]\n")
    typo = cli("plan", str(request))
    assert typo.exit_code == 1 and "did you mean 'platform'" in typo.output


def test_compute_logs_show_job_output(cli, k8s_grove, wire):
    job = json.loads(cli("--json", "compute", "submit", "--cmd", "python -c 'print(1)'", "--image", IMAGE).output)
    _dispatch_all()
    grove_job = GroveJob.objects.get()
    grove = wire(k8s_grove)
    assert grove.claim(grove_job.id).status_code == 200
    grove.report(grove_job.id, state="running", log_tail=["epoch 1 loss 0.9", "epoch 2 loss 0.4"])
    grove.report(grove_job.id, state="succeeded", exit_code=0, log_tail=["epoch 1 loss 0.9", "epoch 2 loss 0.4",
                                                                          "done"])
    logs = cli("compute", "logs", job["id"])
    assert logs.exit_code == 0, logs.output
    assert "== main" in logs.output and "epoch 2 loss 0.4" in logs.output and "done" in logs.output
    assert json.loads(cli("--json", "compute", "logs", job["id"]).output)[0]["exit_code"] == 0


def test_mcp_staff_tools_typed_schemas_and_version(live_server, token, flag_on, k8s_grove, native_grove):
    flag_on(STAFF_FLAG)
    params = StdioServerParameters(command=FOREST, args=["mcp"],
                                   env={"FOREST_HOST": live_server.url, "FOREST_TOKEN": token,
                                        # this checkout's code first, as the test process has it
                                        **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}})
    seen: dict = {}

    async def session_run():
        with anyio.fail_after(60):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                seen["init"] = await session.initialize()
                seen["tools"] = {tool.name: tool for tool in (await session.list_tools()).tools}
                groves = await session.call_tool("groves_list", {"substrate": "native"})
                seen["groves"] = json.loads(groves.content[0].text) if not groves.structured_content else \
                    groves.structured_content.get("result")
                plan = await session.call_tool("plan", {"kind": "compute", "graph": {"nodes": [
                    {"id": "a", "kind": "exec", "image": IMAGE, "command": ["true"]}]}})
                seen["plan"] = plan.structured_content or json.loads(plan.content[0].text)
                bad = await session.call_tool("runs_list", {"status": "sideways"})
                seen["bad"] = bad.is_error

    anyio.run(session_run)
    info = seen["init"].server_info
    assert info.name == "forest" and info.version == server_version() and info.version not in ("", "0+unknown")
    tools = seen["tools"]
    assert {"groves_list", "inventory", "placements_list", "refusals_report", "plan", "compute_logs"} <= set(tools)
    submit = tools["compute_submit"].input_schema
    assert "ComputeStep" in json.dumps(submit) and "command" in json.dumps(submit)
    assert {"name", "steps"} <= set(submit["properties"]) and "request" not in submit["properties"]
    plan_schema = tools["plan"].input_schema  # typed: a compute request's fields or a run's graph and kind
    assert {"steps", "graph", "kind"} <= set(plan_schema["properties"]) and "PipelineGraph" in json.dumps(plan_schema)
    status = tools["runs_list"].input_schema["properties"]["status"]
    assert "running" in json.dumps(status) and "enum" in json.dumps(status)
    assert [g["slug"] for g in seen["groves"]] == ["mac"]
    assert seen["plan"]["nodes"][0]["grove"] == "kube"
    assert seen["bad"] is True
