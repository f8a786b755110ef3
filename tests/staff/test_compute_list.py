"""The staff compute-jobs list (issue 35): a django-tables2 + htmx list like the others, with the API's
filterset and the API's actor-scoped selector, CSV export, linked from the navigation; the Runs list names
each compute run's job."""
from __future__ import annotations

import csv
import io
import json

import pytest

from apps.compute.services import compute_job_submit
from apps.flags.services import flag_override_set
from apps.pipelines import services as pipelines
from apps.pipelines.models import PipelineNode
from tests.factories import UserFactory, api_token_for, grant

pytestmark = pytest.mark.django_db


def _submit(name: str, team: str, command=("/bin/echo", "hello")):
    job = compute_job_submit(body={"name": name, "team": team, "steps": [
        {"name": "hi", "kind": "native", "command": list(command), "timeout_s": 30}]})
    for node in PipelineNode.objects.filter(run=job.run, status="queued"):
        pipelines.pipeline_node_execute(node_id=node.pk)
    return job


@pytest.fixture
def jobs(fresh_grove, observability_on):
    fresh_grove(name="local-box")
    flag_override_set(name="host.deploy.forest_compute_jobs", enabled=True, reason="test")
    return {"train": _submit("train-resnet", "ml"), "eval": _submit("eval-resnet", "ml"),
            "web": _submit("render-site", "web")}


@pytest.fixture
def ml_member(client):
    member = grant(UserFactory(username="ana"), "viewer", teams=("ml",))
    client.force_login(member)
    return member


def test_the_list_shows_only_the_acting_user_s_teams_and_links_each_job(client, jobs, ml_member):
    page = client.get("/staff/compute/").content.decode()
    table = page[page.index('id="compute-jobs-table"'):]
    assert "train-resnet" in table and "eval-resnet" in table and "render-site" not in table
    assert f'/staff/compute/{jobs["train"].id}/' in table and f'/staff/runs/{jobs["train"].run_id}/' in table
    assert "0 / 0 / 1" in table  # steps done / failed / all (awaiting their Grove jobs)
    assert 'href="/staff/compute/"' in page  # in the navigation


def test_the_api_list_reads_the_same_selector_and_filters(jobs, ml_member):
    from rest_framework.test import APIClient

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {api_token_for(ml_member)}")
    names = [job["name"] for job in api.get("/api/forest/v1/compute/jobs").json()]
    assert sorted(names) == ["eval-resnet", "train-resnet"]
    assert [job["name"] for job in api.get("/api/forest/v1/compute/jobs", {"name": "eval"}).json()] == [
        "eval-resnet"]
    bad = api.get("/api/forest/v1/compute/jobs", {"status": "sleeping"})
    assert bad.status_code == 400 and bad.json()["field"] == "status"


def test_filters_htmx_fragment_invalid_values_and_csv(client, jobs, ml_member):
    fragment = client.get("/staff/compute/", {"name": "train"}, HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in fragment and "train-resnet" in fragment and "eval-resnet" not in fragment
    assert "train-resnet" not in client.get("/staff/compute/", {"status": "succeeded"}).content.decode()
    refused = client.get("/staff/compute/", {"status": "sleeping"})
    assert refused.status_code == 400 and b"train-resnet" not in refused.content
    export = client.get("/staff/compute/", {"_export": "csv"})
    rows = list(csv.reader(io.StringIO(b"".join(export.streaming_content).decode())))
    assert rows[0][0] == "Job" and sorted(row[0] for row in rows[1:]) == ["eval-resnet", "train-resnet"]
    assert not any("<" in cell for row in rows for cell in row), rows


def test_the_runs_list_names_each_compute_run_s_job(client, jobs, ml_member):
    page = client.get("/staff/runs/").content.decode()
    table = page[page.index('id="runs-table"'):]
    assert "train-resnet" in table and f'/staff/compute/{jobs["eval"].id}/' in table
    assert "render-site" not in table
    rows = list(csv.reader(io.StringIO(b"".join(client.get("/staff/runs/", {"_export": "csv"})
                                                .streaming_content).decode())))
    assert rows[0][1] == "Job" and sorted(row[1] for row in rows[1:]) == ["eval-resnet", "train-resnet"]


@pytest.mark.django_db(transaction=True)
def test_the_cli_lists_with_the_same_filters(live_server, fresh_grove, observability_on):
    from typer.testing import CliRunner

    from forest_cli.main import app

    fresh_grove(name="local-box")
    flag_override_set(name="host.deploy.forest_compute_jobs", enabled=True, reason="test")
    _submit("train-resnet", "ml")
    _submit("render-site", "web")
    member = grant(UserFactory(username="ana"), "viewer", teams=("ml",))
    result = CliRunner().invoke(app, ["--host", live_server.url, "--token", api_token_for(member), "--json",
                                      "compute", "list", "--name", "resnet"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert [job["name"] for job in json.loads(result.output)] == ["train-resnet"]
