"""The ``forest`` CLI against a live Host server (real HTTP, PostgreSQL): compute submit/status/watch/cancel,
runs, placements explain, and clear errors for configuration, auth and unreachable hosts."""
from __future__ import annotations

import json
import threading

import pytest
from django.db import connection
from typer.testing import CliRunner

from apps.dispatch.models import GroveJob
from apps.groves.models import Grove
from apps.pipelines import services as pipelines
from apps.pipelines.models import PipelineNode
from forest_cli.main import app
from tests.factories import api_token_for
from tests.pipelines.graphs import IMAGE

pytestmark = pytest.mark.django_db(transaction=True)
runner = CliRunner()


@pytest.fixture
def cli(live_server, staff_user, flag_on):
    flag_on("host.deploy.forest_compute_jobs")
    token = api_token_for(staff_user, "cli")

    def _run(*args, token=token):
        return runner.invoke(app, ["--host", live_server.url, "--token", token, *args], catch_exceptions=False)

    return _run


def _dispatch_all():
    for node in PipelineNode.objects.filter(status="queued"):
        pipelines.pipeline_node_execute(node_id=node.pk)


def test_submit_cmd_status_and_cancel(cli, k8s_grove):
    result = cli("--json", "compute", "submit", "--cmd", "python -c 'print(1)'", "--image", IMAGE, "--name", "one")
    assert result.exit_code == 0, result.output
    job = json.loads(result.output)
    assert job["name"] == "one" and job["steps"][0]["name"] == "main"
    _dispatch_all()
    shown = cli("compute", "status", job["id"])
    assert shown.exit_code == 0 and "awaiting" in shown.output and "kube" in shown.output
    cancelled = cli("--json", "compute", "cancel", job["id"])
    assert json.loads(cancelled.output)["status"] == "cancelled"
    assert job["id"] in cli("compute", "list").output


def test_submit_file_and_watch_until_done(cli, k8s_grove, native_grove, tmp_path, wire):
    spec = tmp_path / "train.yaml"
    spec.write_text(f"steps:\n  - name: prep\n    image: '{IMAGE}'\n    command: [python, prep.py]\n"
                    "  - name: train\n    kind: native\n    command: [./train.sh]\n")
    submitted = json.loads(cli("--json", "compute", "submit", str(spec)).output)
    assert submitted["name"] == "train"

    def grove_side():
        # The Groves do the work while the CLI watches: dispatch, claim, report, resume, for both steps.
        try:
            for grove in (k8s_grove, native_grove):
                _dispatch_all()
                job = GroveJob.objects.get(grove=grove[0])
                wire(grove).run_job(job.id)
                pipelines.pipeline_node_resume(node_id=job.node_id)
        finally:
            connection.close()

    worker = threading.Thread(target=grove_side)
    worker.start()
    watched = cli("compute", "status", submitted["id"], "--watch", "--interval", "0.2")
    worker.join(30)
    assert watched.exit_code == 0, watched.output
    assert "succeeded" in watched.output and "mac" in watched.output
    # Not a terminal (CliRunner): each change is printed as it happens, then the final table.
    assert "succeeded: prep succeeded (attempt 1), train succeeded (attempt 1)" in watched.output


def test_runs_and_placements_explain(cli, k8s_grove, tmp_path):
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps({"nodes": [{"id": "a", "kind": "exec", "image": IMAGE, "command": ["true"]}]}))
    run = json.loads(cli("--json", "runs", "create", str(graph), "--kind", "compute").output)
    _dispatch_all()
    assert run["id"] in cli("runs", "list").output
    assert "awaiting" in cli("runs", "show", run["id"]).output
    explained = cli("placements", "explain", f"{run['id']}:a")
    assert explained.exit_code == 0, explained.output
    assert "kube" in explained.output and "pipeline_node:" in explained.output
    # Why here: the sentence, and every plugin's column and the total for each candidate.
    assert "Why here: kube: the only Grove with room now" in explained.output
    assert "spread" in explained.output and "binpack" in explained.output and "total" in explained.output
    subject = json.loads(cli("--json", "runs", "show", run["id"]).output)["nodes"][0]["placement_subject"]
    rows = json.loads(cli("--json", "placements", "explain", subject).output)
    assert rows[0]["grove_slug"] == "kube"
    assert rows[0]["decision"]["scores"]["chosen"]["grove_slug"] == "kube"
    assert rows[0]["decision"]["candidates"][0]["score"]["total"] == rows[0]["decision"]["scores"]["chosen"]["total"]
    assert "cancelled" in cli("runs", "cancel", run["id"]).output


def test_clear_errors(cli, live_server):
    bad = cli("compute", "submit", "--cmd", "true", "--image", IMAGE, "--platform", "linux/amd65")
    assert bad.exit_code == 1 and "invalid_platform" in bad.output and "steps[0].platform[0]" in bad.output
    both = cli("compute", "submit", "x.json", "--cmd", "true")
    assert both.exit_code == 2 and "either FILE or --cmd" in both.output
    denied = cli("compute", "list", token="nope")
    assert denied.exit_code == 1 and "authentication_failed" in denied.output
    gone = runner.invoke(app, ["--host", "http://127.0.0.1:9", "--token", "t", "runs", "list"])
    assert gone.exit_code == 2 and "Cannot reach Forest Host" in gone.output
    missing = runner.invoke(app, ["runs", "list"], env={"FOREST_HOST": "", "FOREST_TOKEN": ""})
    assert missing.exit_code == 2 and "FOREST_HOST" in missing.output


def test_status_prints_refusals_warnings_attempts_and_runner_slots(cli, k8s_grove, tmp_path):
    body = {"name": "riscv", "grove": "kube", "steps": [
        {"name": "a", "image": IMAGE, "command": ["true"], "platform": ["linux/riscv64"], "retries": 2}]}
    submitted = cli("--json", "compute", "submit", "--cmd", "true", "--image", IMAGE)  # a plain job: no warnings
    assert json.loads(submitted.output)["warnings"] == []
    spec = tmp_path / "riscv.json"
    spec.write_text(json.dumps(body))
    response = cli("compute", "submit", str(spec))
    assert response.exit_code == 0, response.output
    assert "warning step a on kube: [" in response.output  # the Grove the step was placed on (pinned)
    assert "(would be refused with host.deploy.forest_compatibility on)" in response.output
    assert "1/3" in response.output  # attempt 1 of 1 + 2 retries
    assert "runner slots: " in response.output
    job_id = json.loads(cli("--json", "compute", "list").output)[0]["id"]
    Grove.objects.filter(slug="kube").update(enabled=False)
    _dispatch_all()
    shown = cli("compute", "status", job_id)
    assert shown.exit_code == 0, shown.output
    assert "refused step a: [placed_grove_gone]" in shown.output and "disabled" in shown.output
    as_json = json.loads(cli("--json", "compute", "status", job_id).output)
    assert as_json["steps"][0]["refusal"]["code"] == "placed_grove_gone"


def test_a_refused_step_is_stored_listed_and_explained(cli, k8s_grove, tmp_path, flag_on):
    """A refusal is a decision too: stored, listed (outcome=refused) and explained, with each Grove's fit."""
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps({"nodes": [{"id": "huge", "kind": "exec", "image": IMAGE, "command": ["true"],
                                            "resources": {"cpu_milli": 64000, "memory_bytes": 1 << 30}}]}))
    run = json.loads(cli("--json", "runs", "create", str(graph), "--kind", "compute").output)
    _dispatch_all()
    shown = json.loads(cli("--json", "runs", "show", run["id"]).output)["nodes"][0]
    assert (shown["status"], shown["refusal"]["code"]) == ("failed", "resources_never_fit")
    assert shown["decision"]["outcome"] == "refused"
    explained = cli("placements", "explain", f"{run['id']}:huge")
    assert explained.exit_code == 0, explained.output
    assert "refused" in explained.output and "[resources_never_fit]" in explained.output
    rows = json.loads(cli("--json", "placements", "explain", f"{run['id']}:huge").output)
    assert rows[0]["outcome"] == "refused" and rows[0]["grove_id"] is None
    assert "needs 64 CPU, the largest unit of Grove kube has 8" in rows[0]["decision"]["detail"]
    flag_on("host.staff.execution_observability")
    listed = cli("--json", "placements", "--outcome", "refused")
    assert listed.exit_code == 0, listed.output
    refused = json.loads(listed.output)
    assert [row["code"] for row in refused] == ["resources_never_fit"]


def test_commands_accept_the_unique_id_prefix_a_table_shows(cli, k8s_grove, tmp_path):
    """Ids are long; a unique prefix names the job or run (resolved through the list), an ambiguous or unknown
    one is refused with its own code."""
    ids: list[str] = []
    while not any(a[0] == b[0] for a in ids for b in ids if a != b):  # two ids sharing a first character
        submitted = cli("--json", "compute", "submit", "--cmd", "true", "--image", IMAGE, "--name", "p")
        ids.append(json.loads(submitted.output)["id"])
    job = ids[0]
    shown = cli("--json", "compute", "status", job[:8])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["id"] == job
    assert json.loads(cli("--json", "compute", "logs", job[:8].upper()).output) == []
    assert json.loads(cli("--json", "compute", "cancel", job[:8]).output)["status"] == "cancelled"
    shared = next(a[0] for a in ids for b in ids if a != b and a[0] == b[0])
    ambiguous = cli("compute", "status", shared)
    assert ambiguous.exit_code == 1 and "id_prefix_ambiguous" in ambiguous.output
    unknown = cli("compute", "status", "zz")
    assert unknown.exit_code == 1 and "id_prefix_unknown" in unknown.output
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps({"nodes": [{"id": "a", "kind": "exec", "image": IMAGE, "command": ["true"]}]}))
    run = json.loads(cli("--json", "runs", "create", str(graph), "--kind", "compute").output)
    assert json.loads(cli("--json", "runs", "show", run["id"][:8]).output)["id"] == run["id"]
    assert "cancelled" in cli("runs", "cancel", run["id"][:8]).output
    assert "id_prefix_unknown" in cli("runs", "show", "zz").output
