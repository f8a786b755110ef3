"""A staff page per compute job (issue 21): steps with their decision and its outcome, attempts, the output
tail, links to the run, placements and Groves; scoped to the acting user's teams. Subjects named by job and
step on the placement pages; the decision id on every step of the status API; ``forest placements explain``
by job id (+ step) and by placement id."""
from __future__ import annotations

import pytest
from django.utils import timezone
from typer.testing import CliRunner

from apps.compute.services import compute_job_submit
from apps.dispatch.models import GroveJob
from apps.dispatch.services import grove_job_claim, grove_job_report
from apps.flags.services import flag_override_set
from apps.pipelines import services as pipelines
from apps.pipelines.models import PipelineNode
from forest_cli.main import app
from tests.factories import UserFactory, api_token_for, grant


def _job(grove, team="ml"):
    flag_override_set(name="host.deploy.forest_compute_jobs", enabled=True, reason="test")
    job = compute_job_submit(body={"name": "hello", "team": team, "steps": [
        {"name": "hi", "kind": "native", "command": ["/bin/echo", "hello"], "timeout_s": 30}]})
    for node in PipelineNode.objects.filter(run=job.run, status="queued"):
        pipelines.pipeline_node_execute(node_id=node.pk)
    grove_job = GroveJob.objects.get(run_id=job.run_id)
    grove_job_claim(grove=grove, job_id=grove_job.pk)
    grove_job_report(grove=grove, job_id=grove_job.pk, body={"state": "succeeded", "exit_code": 0,
                                                              "log_tail": ["hello"]})
    return job


@pytest.mark.django_db
def test_the_compute_job_page_links_everything_and_names_the_step(client, fresh_grove, observability_on):
    grove, _ = fresh_grove(name="local-box")
    job = _job(grove)
    member = UserFactory(username="ana")
    grant(member, "viewer", teams=("ml",))
    client.force_login(member)
    page = client.get(f"/staff/compute/{job.id}/").content.decode()
    assert "Compute job hello" in page and 'id="output-hi">hello\n</pre>' in page
    assert f'/staff/runs/{job.run_id}/' in page and "/staff/groves/local-box/" in page
    assert "/staff/placements/" in page and ">placed</span>" in page
    assert "hello:hi:1" in page or ":1</code>" in page  # the attempt's Grove job
    run_page = client.get(f"/staff/runs/{job.run_id}/").content.decode()
    assert f"/staff/compute/{job.id}/" in run_page
    listing = client.get("/staff/placements/").content.decode()
    assert "job hello · step hi" in listing and f"/staff/compute/{job.id}/" in listing


@pytest.mark.django_db
def test_the_page_is_scoped_to_the_acting_user_s_teams(client, fresh_grove, observability_on):
    grove, _ = fresh_grove(name="local-box")
    job = _job(grove, team="ml")
    outsider = UserFactory(username="bo")
    grant(outsider, "viewer", teams=("web",))
    client.force_login(outsider)
    # one rule for every door (docs/permissions.md): another team's object is 403 team_forbidden
    answer = client.get(f"/staff/compute/{job.id}/")
    assert answer.status_code == 403 and b"team_forbidden" in answer.content
    assert client.get("/staff/compute/00000000-0000-0000-0000-000000000000/").status_code == 404


@pytest.mark.django_db
def test_every_step_carries_its_decision_id(staff_client, fresh_grove, observability_on):
    grove, _ = fresh_grove(name="local-box")
    job = _job(grove)
    body = staff_client.get(f"/api/forest/v1/compute/jobs/{job.id}").json()
    decision = body["steps"][0]["decision"]
    assert decision["id"] and decision["outcome"] == "placed"


@pytest.mark.django_db(transaction=True)
def test_explain_takes_a_job_id_a_step_and_a_placement_id(live_server, staff_user, fresh_grove, observability_on):
    grove, _ = fresh_grove(name="local-box")
    job = _job(grove)
    token = api_token_for(staff_user)
    runner = CliRunner()

    def explain(*args):
        return runner.invoke(app, ["--host", live_server.url, "--token", token, "--json", "placements", "explain",
                                   *args], catch_exceptions=False)

    by_job = explain(str(job.id))
    assert by_job.exit_code == 0 and '"grove_slug": "local-box"' in by_job.output
    by_step = explain(str(job.id), "hi")
    assert by_step.exit_code == 0 and '"verdict"' in by_step.output
    import json

    placement_id = json.loads(by_job.output)[0]["id"]
    by_id = explain(str(placement_id))
    assert by_id.exit_code == 0 and json.loads(by_id.output)[0]["id"] == placement_id
    missing = explain(str(job.id), "nope")
    assert missing.exit_code != 0 and "step_not_found" in missing.output


@pytest.mark.django_db
def test_an_unclaimed_step_is_signalled_on_the_run_job_pages_and_status(client, staff_client, staff_user, settings,
                                                                        fresh_grove, observability_on):
    fresh_grove(name="sim", polled=False)
    flag_override_set(name="host.deploy.forest_compute_jobs", enabled=True, reason="test")
    job = compute_job_submit(body={"name": "stuck", "grove": "sim", "steps": [
        {"name": "hi", "kind": "native", "command": ["/bin/echo", "hello"], "timeout_s": 30}]})
    for node in PipelineNode.objects.filter(run=job.run, status="queued"):
        pipelines.pipeline_node_execute(node_id=node.pk)
    settings.GROVE_JOB_UNCLAIMED_AFTER_S = 0  # past the threshold at once
    client.force_login(staff_user)
    assert ">unclaimed</span>" in client.get(f"/staff/compute/{job.id}/").content.decode()
    assert ">unclaimed</span>" in client.get(f"/staff/runs/{job.run_id}/").content.decode()
    step = staff_client.get(f"/api/forest/v1/compute/jobs/{job.id}").json()["steps"][0]
    assert step["signal"]["code"] == "unclaimed" and step["signal"]["grove_last_poll_age_s"] is None


@pytest.mark.django_db
def test_an_unclaimed_step_keeps_its_explanation_after_the_policy_ends_it(client, staff_client, staff_user,
                                                                         settings, fresh_grove, observability_on):
    from apps.dispatch.services import grove_jobs_end_unclaimed

    fresh_grove(name="sim", polled=False)
    flag_override_set(name="host.deploy.forest_compute_jobs", enabled=True, reason="test")
    job = compute_job_submit(body={"name": "stuck", "grove": "sim", "steps": [
        {"name": "hi", "kind": "native", "command": ["/bin/echo", "hello"], "timeout_s": 30}]})
    for node in PipelineNode.objects.filter(run=job.run, status="queued"):
        pipelines.pipeline_node_execute(node_id=node.pk)
    settings.GROVE_JOB_UNCLAIMED_AFTER_S = 0
    assert grove_jobs_end_unclaimed(now=timezone.now(), limit=10) == 1
    node = PipelineNode.objects.get(run=job.run)
    pipelines.pipeline_node_resume(node_id=node.pk)
    step = staff_client.get(f"/api/forest/v1/compute/jobs/{job.id}").json()["steps"][0]
    assert step["status"] == "timed_out" and step["reason"] == "unclaimed"
    signal = step["signal"]
    assert signal["code"] == "unclaimed" and signal["ended_at"] and signal["grove"] == "sim"
    assert "never polled" in signal["detail"] and "ended it" in signal["detail"]
    client.force_login(staff_user)
    for url in (f"/staff/compute/{job.id}/", f"/staff/runs/{job.run_id}/"):
        page = client.get(url).content.decode()
        assert ">unclaimed</span>" in page and "ended it" in page, url


@pytest.mark.django_db(transaction=True)
def test_no_environment_reads_none_on_the_page_and_in_the_cli(client, live_server, staff_user, fresh_grove,
                                                              observability_on):
    grove, _ = fresh_grove(name="local-box")
    job = _job(grove)
    client.force_login(staff_user)
    assert "environment (none)" in client.get(f"/staff/compute/{job.id}/").content.decode()
    assert "environment (none)" in client.get(f"/staff/runs/{job.run_id}/").content.decode()
    token = api_token_for(staff_user)
    runner = CliRunner()
    status = runner.invoke(app, ["--host", live_server.url, "--token", token, "compute", "status", str(job.id)],
                           catch_exceptions=False, terminal_width=200)
    assert status.exit_code == 0 and "environment (none)" in status.output
    listed = runner.invoke(app, ["--host", live_server.url, "--token", token, "compute", "list"],
                           catch_exceptions=False, terminal_width=200)
    assert "(none)" in listed.output


@pytest.mark.django_db
def test_the_run_page_shows_each_step_s_output_tail(client, staff_user, dispatched_run, observability_on):
    """A plain pipeline run (no compute job) shows the last lines its nodes' current Grove jobs reported, the
    same fragment as the compute-job page; a node with no Grove job says so."""
    run = dispatched_run()
    grove_job = PipelineNode.objects.get(run=run, node_id="train").current_job
    grove_job.log_tail = [f"line {i}" for i in range(30)] + ["<b>done</b>"]
    grove_job.save(update_fields=["log_tail"])
    client.force_login(staff_user)
    page = client.get(f"/staff/runs/{run.id}/").content.decode()
    assert 'id="output-heading"' in page and 'id="output-train"' in page
    tail = page.split('id="output-train">', 1)[1].split("</pre>", 1)[0]
    assert tail.splitlines()[-1] == "&lt;b&gt;done&lt;/b&gt;" and "line 11" in tail and "line 10\n" not in tail
    assert "No output reported." in page.split("<h3>pinned</h3>", 1)[1]
