"""Step data end to end on a native Grove: a live Host (Django's live server on PostgreSQL), a real Celery
worker, and the real ``forest-agent`` process. Nothing is faked: the agent downloads each input from Host's
content-addressed store (bounded, digest-verified, into the job's directory), runs the command, and
uploads each declared output through the Grove-scoped write; Host records the artifacts and the lineage.

The two-job flow is ``examples/lineage/``'s: the first job writes a file and a directory, the second
consumes the file by reference and checks its digest itself.
"""
from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from apps.artifacts import services as artifacts
from apps.artifacts.models import ArtifactUse
from apps.artifacts.selectors import artifact_lineage, run_lineage
from apps.compute.selectors import compute_job_view
from apps.compute.services import compute_job_submit
from apps.dispatch.models import GroveJob
from apps.flags.services import flag_override_set
from apps.groves.models import Grove
from apps.pipelines.models import PipelineNode, PipelineRun
from tests.factories import api_token_for
from tests.pipelines.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _jobs():
    spec = importlib.util.spec_from_file_location("lineage_jobs", ROOT / "examples/lineage/jobs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def native_agent(enrolled, agents, worker):
    flag_override_set(name="host.deploy.forest_compute_jobs", enabled=True, reason="e2e")
    grove, state_dir = enrolled
    agent = agents(state_dir, "--enable-native-jobs")
    wait_for(lambda: "native.job" in Grove.objects.get(pk=grove.pk).change_kinds, what="the first heartbeat")
    worker()
    return grove, agent


def _submit(grove: Grove, step: dict):
    return compute_job_submit(body={"name": "data", "grove": grove.slug, "steps": [
        {"kind": "native", "timeout_s": 60, **step}]})


def _ended(run: PipelineRun, node: str) -> GroveJob:
    job = wait_for(lambda: PipelineNode.objects.filter(run=run, node_id=node).values_list("current_job_id", flat=True)
                   .first(), what=f"{node} dispatched")
    return wait_for(lambda: GroveJob.objects.filter(pk=job, status__in=["succeeded", "failed", "cancelled",
                                                                          "timed_out"]).first(),
                    timeout=90, what=f"{node}'s job to end")


def test_two_jobs_pass_a_file_by_reference_with_lineage_both_ways(native_agent):
    grove, agent = native_agent
    jobs = _jobs()
    first = compute_job_submit(body=jobs.writer(grove=grove.slug))
    job = _ended(first.run, "write")
    assert job.status == "succeeded", (job.reason, job.log_tail, agent.output())
    wait_for(lambda: PipelineRun.objects.get(pk=first.run_id).status == "succeeded", what="run 1 to succeed")

    produced = {use.name: use.artifact for use in ArtifactUse.objects.filter(run_id=first.run_id, role="output")}
    assert set(produced) == {"attempt-1/result", "attempt-1/report"}
    result, report = produced["attempt-1/result"], produced["attempt-1/report"]
    expected = "sha256:" + hashlib.sha256(b"forty-two\n" * 1000).hexdigest()
    assert (result.digest, result.size, result.storage_kind) == (expected, 10000, "cas")
    assert (result.producing_run_id, result.producing_node, result.producing_name) == (
        str(first.run_id), "write", "attempt-1/result")
    with tarfile.open(fileobj=io.BytesIO(b"".join(artifacts.blob_store().open(report.digest)))) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == ["a.txt", "sub", "sub/b.txt"]  # sorted, relative, nothing else
        assert {(m.mtime, m.uid, m.uname) for m in members.values()} == {(0, 0, "")}
        assert tar.extractfile(members["sub/b.txt"]).read() == b"beta"

    second = compute_job_submit(body=jobs.checker(grove=grove.slug, artifact_id=result.pk, digest=result.digest))
    node = PipelineNode.objects.get(run=second.run, node_id="check")
    assert node.spec["inputs"][0]["digest"] == result.digest  # resolved and stored at submit
    job = _ended(second.run, "check")
    assert job.status == "succeeded", (job.reason, job.log_tail, agent.output())
    assert any("input verified" in line for line in job.log_tail)

    lineage = artifact_lineage(artifact=result)
    assert [(p["run_id"], p["node"]) for p in lineage["producers"]] == [(str(first.run_id), "write")]
    assert [(c["run_id"], c["node"]) for c in lineage["consumers"]] == [(str(second.run_id), "check")]
    runs = run_lineage(run_id=second.run_id)
    assert [(i["name"], i["artifact"]["digest"]) for i in runs["inputs"]] == [("data", result.digest)]
    view = compute_job_view(first)["steps"][0]
    assert {o["name"]: o["digest"] for o in view["outputs"]}["attempt-1/result"] == result.digest
    assert compute_job_view(second)["steps"][0]["inputs"] == [
        {"name": "data", "artifact_id": result.pk, "digest": result.digest, "path": "in/data.bin"}]


def test_a_missing_output_fails_the_step_and_records_nothing(native_agent):
    grove, agent = native_agent
    run = _submit(grove, {"name": "forgets", "command": [sys.executable, "-c", "print('no file written')"],
                          "outputs": [{"name": "model", "path": "model.bin"}]}).run
    job = _ended(run, "forgets")
    assert (job.status, job.reason) == ("failed", "output_missing"), agent.output()
    node = wait_for(lambda: PipelineNode.objects.filter(run=run, node_id="forgets", status="failed").first(),
                    what="the node to fail")
    assert node.reason == "output_missing"
    assert not ArtifactUse.objects.filter(run_id=run.id).exists()


def test_an_input_whose_stored_bytes_changed_is_refused_before_the_command(native_agent, tmp_path):
    grove, agent = native_agent
    blob = artifacts.artifact_blob_create(chunks=[b"the real bytes"])
    marker = tmp_path / "ran"
    run = _submit(grove, {"name": "victim", "command": [sys.executable, "-c",
                                                        f"open({str(marker)!r}, 'w').write('ran')"],
                          "inputs": [{"digest": blob.digest, "path": "data.bin"}]}).run
    # The store's bytes are swapped after submit (a corrupted disk, a tampered bucket): same length.
    path = artifacts.blob_store().path(blob.digest)
    path.chmod(0o644)
    path.write_bytes(b"the fake bytes")
    job = _ended(run, "victim")
    assert (job.status, job.reason) == ("failed", "input_digest_mismatch"), agent.output()
    assert not marker.exists()  # the command never ran


def test_the_lineage_example_script_runs_against_the_local_agent(native_agent, live_server, staff_user):
    """``examples/lineage/run.py`` as a user runs it: a separate process, the HTTP API only."""
    grove, agent = native_agent
    token = api_token_for(staff_user, "lineage-example")
    env = {**os.environ, "FOREST_HOST": live_server.url, "FOREST_TOKEN": token}
    done = subprocess.run([sys.executable, str(ROOT / "examples/lineage/run.py"), "--grove", grove.slug,
                           "--timeout", "120"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr + agent.output()
    assert "input verified" in done.stdout and "consumed by: run" in done.stdout
