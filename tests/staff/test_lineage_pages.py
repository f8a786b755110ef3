"""The staff artifact page (facts, producer, consumers, the lineage graph as SVG) and the lineage section of
the run page, read through the acting user's teams."""
from __future__ import annotations

import uuid

import pytest

from apps.artifacts.models import ArtifactUse
from apps.pipelines.services import pipeline_run_create
from tests.artifacts.test_inputs import _produce
from tests.factories import UserFactory, grant

pytestmark = pytest.mark.django_db


def test_artifact_page_shows_producer_consumers_and_graph(staff_browser, observability_on):
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    data = _produce(first, "write", b"a result")
    _produce(second, "check", b"a verdict", inputs=[data])
    page = staff_browser.get(f"/staff/artifacts/{data.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert data.digest in html and f"/staff/runs/{first}/" in html and f"/staff/runs/{second}/" in html
    graph = html[html.index('<figure id="lineage-graph"'):]
    assert graph.count('class="lineage-step"') == 2 and graph.count('class="lineage-artifact"') == 2
    assert "write @" + first[:8] in graph and "check @" + second[:8] in graph
    assert staff_browser.get("/staff/artifacts/999999/").status_code == 404


def test_run_page_lists_what_its_nodes_consumed_and_produced(staff_browser, observability_on, fresh_grove):
    fresh_grove(name="worker")
    data = _produce(str(uuid.uuid4()), "write", b"the input")
    run = pipeline_run_create(graph={"nodes": [{"id": "use", "kind": "exec", "runtime": "native", "command": ["true"],
                                                "grove": "worker", "inputs": [{"artifact": data.pk, "path": "in"}]}]},
                              kind="compute")
    html = staff_browser.get(f"/staff/runs/{run.id}/").content.decode()
    section = html[html.index('id="lineage-heading"'):]
    assert f"/staff/artifacts/{data.pk}/" in section and "input" in section and data.digest[:19] in section


def test_a_viewer_sees_only_their_teams_artifacts(client, observability_on):
    viewer = grant(UserFactory(username=f"v-{uuid.uuid4().hex[:6]}", is_staff=True), "viewer", teams=("red",))
    theirs = _produce(str(uuid.uuid4()), "write", b"blue's")
    ArtifactUse.objects.update(team="blue")
    theirs.team = "blue"
    theirs.save(update_fields=["team"])
    mine = _produce(str(uuid.uuid4()), "write", b"red's")
    mine.team = "red"
    mine.save(update_fields=["team"])
    client.force_login(viewer)
    assert client.get(f"/staff/artifacts/{mine.pk}/").status_code == 200
    assert client.get(f"/staff/artifacts/{theirs.pk}/").status_code == 404
