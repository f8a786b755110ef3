"""The pipelines API: create a run from a graph, list and read runs with nodes, cancel; token auth."""
from __future__ import annotations

import pytest

from apps.groves.models import Grove
from apps.pipelines import services
from apps.pipelines.models import PipelineNode
from tests.pipelines.graphs import exec_node, graph

pytestmark = pytest.mark.django_db
URL = "/api/forest/v1/pipelines/runs"


def test_create_list_detail_cancel(staff_client, k8s_grove):
    body = {"graph": graph(exec_node("a"), exec_node("b", needs=["a"])), "kind": "compute", "environment": "lab"}
    created = staff_client.post(URL, body, format="json")
    assert created.status_code == 201, created.json()
    run = created.json()
    assert run["kind"] == "compute" and run["status"] == "running" and run["graph_digest"].startswith("sha256:")
    assert [(n["id"], n["status"]) for n in run["nodes"]] == [("a", "queued"), ("b", "pending")]
    listed = staff_client.get(URL, {"environment": "lab"}).json()
    assert [r["id"] for r in listed["results"]] == [run["id"]]
    assert staff_client.get(URL, {"environment": "prod"}).json()["results"] == []
    assert staff_client.get(f"{URL}/{run['id']}").json()["nodes"][1]["needs"] == ["a"]
    cancelled = staff_client.post(f"{URL}/{run['id']}/cancel").json()
    assert cancelled["status"] == "cancelled" and {n["status"] for n in cancelled["nodes"]} == {"cancelled"}


@pytest.mark.parametrize(("body", "code", "field"), [
    ({"kind": "compute"}, "field_required", "graph"),
    ({"graph": graph(exec_node("a")), "kind": "nightly"}, "invalid_choice", "kind"),
    ({"graph": graph(exec_node("a", needs=["zz"])), "kind": "build"}, "unknown_node_ref", "graph.nodes[0].needs"),
])
def test_bad_runs(staff_client, body, code, field):
    response = staff_client.post(URL, body, format="json")
    assert response.status_code == 400 and (response.json()["code"], response.json()["field"]) == (code, field)


def test_auth_and_not_found(anon_client, staff_client):
    assert anon_client.get(URL).status_code == 401
    missing = staff_client.get(f"{URL}/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404 and missing.json()["code"] == "run_not_found"


def test_run_responses_carry_retries_runner_slots_warnings_and_refusals(staff_client, k8s_grove, settings):
    settings.PIPELINE_RUNNER_SLOTS = 3
    body = {"graph": graph(exec_node("a", retries=2, platform=["linux/riscv64"]), exec_node("b")),
            "kind": "compute"}
    run = staff_client.post(URL, body, format="json").json()
    assert run["runner"] == {"queue": settings.PIPELINE_RUNNER_QUEUE, "slots": 3, "waiting_in_place": 0}
    nodes = {n["id"]: n for n in run["nodes"]}
    assert (nodes["a"]["attempt"], nodes["a"]["retries"], nodes["a"]["retry_at"]) == (1, 2, None)
    assert nodes["b"]["retries"] == 0 and nodes["a"]["refusal"] is None
    assert run["warnings"] and {(w["node"], w["flag"]) for w in run["warnings"]} == {
        ("a", "host.deploy.forest_compatibility")}
    Grove.objects.filter(pk=k8s_grove[0].pk).update(enabled=False)
    for node in PipelineNode.objects.filter(run_id=run["id"], status="queued"):
        services.pipeline_node_execute(node_id=node.pk)
    shown = staff_client.get(f"{URL}/{run['id']}").json()
    refused = {n["id"]: n["refusal"] for n in shown["nodes"]}
    assert refused["a"]["code"] == refused["b"]["code"] and refused["a"]["code"]  # no Grove to run either
    assert shown["nodes"][0]["attempt"] == 1  # a refusal is not an attempt: no retry
