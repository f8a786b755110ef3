"""The pipelines API: create a run from a graph, list and read runs with nodes, cancel; token auth."""
from __future__ import annotations

import pytest

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
