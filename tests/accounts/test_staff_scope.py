"""What the issue's attacker tried on the staff surfaces, as a viewer or submitter of team ``red``: asking
for team ``blue`` by filter, on the pages, in CSV and on the staff API, gets nothing of blue; a Grove
page counts blue's running jobs without naming them; a cancel from the staff page writes the API's
audit event."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from apps.accounts.models import AuditEvent
from apps.flags.services import flag_override_set
from apps.pipelines.models import PipelineNode
from apps.pipelines.services import pipeline_node_execute
from apps.placement.models import ExecutionPlacement
from tests.estate import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def scoped(estate):
    flag_override_set(name="host.staff.execution_observability", enabled=True, reason="test")
    for team in ("red", "blue"):
        for node in PipelineNode.objects.filter(run=estate[team]["run"], status="queued"):
            pipeline_node_execute(node_id=node.pk)
        ExecutionPlacement.objects.filter(pk=estate[team]["placement"].pk).update(would_refuse=True)
    return estate


def _page(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _body(response) -> str:
    return (b"".join(response.streaming_content) if response.streaming else response.content).decode()


@pytest.mark.parametrize("role", ["viewer", "submitter"])
def test_asking_for_the_other_team_by_filter_gets_nothing(scoped, users, role):
    page, api = _page(users[role]), client_for(users[role])
    blue = scoped["blue"]
    for path in ("staff:placement-list", "staff:run-list"):
        for query in ("?team=blue", "?team=blue&_export=csv"):
            response = page.get(reverse(path) + query)
            assert response.status_code == 200
            text = _body(response)
            assert blue["placement"].subject_id not in text and str(blue["run"].id) not in text, (path, query)
    for query in ("?team=blue", "?team=blue&refused=true", f"?subject_id={blue['placement'].subject_id}"):
        response = api.get(f"/api/forest/v1/staff/placements{query}")
        assert response.status_code == 200 and response.json()["results"] == [], query
    report = api.get("/api/forest/v1/staff/refusals?since=1d").json()
    assert {row["team"] for row in report["by_team"]} == {"red", "(other teams)"}
    assert report["total"] == 2  # fleet-wide counts stay whole


def test_a_grove_page_counts_other_teams_running_jobs_without_naming_them(scoped, users):
    blue_node = PipelineNode.objects.filter(run=scoped["blue"]["run"]).exclude(grove=None).select_related(
        "grove", "run").first()
    html = _page(users["viewer"]).get(reverse("staff:grove-detail", args=[blue_node.grove.slug])).content.decode()
    assert str(blue_node.run_id) not in html
    assert 'id="running-elsewhere"' in html and "of other teams" in html
    admin_html = _page(users["admin"]).get(reverse("staff:grove-detail", args=[blue_node.grove.slug])).content.decode()
    assert str(blue_node.run_id) in admin_html and 'id="running-elsewhere"' not in admin_html


def test_a_staff_page_cancel_writes_the_apis_audit_event(scoped, users):
    run = scoped["red"]["run"]
    response = _page(users["submitter"]).post(reverse("staff:run-cancel", args=[run.id]), {"reason": "wrong data"})
    assert response.status_code == 302
    event = AuditEvent.objects.get(action="pipeline-run-cancel")
    assert (event.via, event.target_id, event.team, event.actor_id) == ("page", str(run.id), "red",
                                                                         users["submitter"].pk)
    refused = _page(users["submitter"]).post(reverse("staff:run-cancel", args=[scoped["blue"]["run"].id]))
    assert refused.status_code == 403 and AuditEvent.objects.filter(action="pipeline-run-cancel").count() == 1
