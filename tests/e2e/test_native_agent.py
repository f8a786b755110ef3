"""The native Grove end to end: a live Host (Django's live server on PostgreSQL), a real Celery worker
process, and the real ``forest-agent`` as a separate process on this machine.

Nothing here is faked: the agent enrolls with a one-time token, heartbeats its inventory, long-polls,
claims and runs real commands, and reports; compute runs are dispatched buildless by the exec driver
and resumed through the normal node tail.
"""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from apps.compute.services import compute_job_submit
from apps.dispatch.models import GroveJob
from apps.flags.services import flag_override_set
from apps.groves.models import Grove
from apps.pipelines.models import PipelineNode, PipelineRun
from apps.pipelines.services import pipeline_run_cancel
from tests.e2e.conftest import AGENT
from tests.pipelines.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def compute_on(settings):
    flag_override_set(name="host.deploy.forest_compute_jobs", enabled=True, reason="e2e")


def _submit(grove: Grove, *steps: dict):
    return compute_job_submit(body={"name": "e2e", "environment": "prod", "grove": grove.slug,
                                    "steps": list(steps)})


def _step(name: str, code: str, timeout_s: int = 60) -> dict:
    return {"name": name, "kind": "native", "command": [sys.executable, "-c", code], "timeout_s": timeout_s}


def _job(run: PipelineRun, name: str) -> GroveJob:
    node = wait_for(lambda: PipelineNode.objects.filter(run=run, node_id=name, current_job__isnull=False).first(),
                    what=f"{name} to be dispatched")
    return node.current_job


def _terminal(job: GroveJob, timeout: float = 60) -> GroveJob:
    return wait_for(lambda: GroveJob.objects.filter(pk=job.pk, status__in=["succeeded", "failed", "cancelled",
                                                                             "timed_out"]).first(),
                    timeout=timeout, what=f"job {job.pk} to end")


def test_agent_enrolls_heartbeats_and_runs_a_buildless_compute_step(enrolled, agents, worker, compute_on):
    grove, state_dir = enrolled
    agent = agents(state_dir, "--enable-native-jobs")
    wait_for(lambda: "native.job" in Grove.objects.get(pk=grove.pk).change_kinds, what="the first heartbeat")
    grove.refresh_from_db()
    assert not grove.stale and grove.isolation_modes == ["host_process"]
    unit = grove.placement_units.get()
    assert unit.cpu_milli_allocatable >= 1000 and unit.memory_bytes_allocatable > 0
    worker()
    job = _submit(grove, _step("hello", "print('hello from the agent')"), _step("after", "print('second')"))
    run = job.run
    assert run.kind == "compute" and GroveJob.objects.filter(build_id__isnull=False).count() == 0
    first = _terminal(_job(run, "hello"))
    assert (first.status, first.exit_code) == ("succeeded", 0), agent.output()
    assert any("hello from the agent" in line for line in first.log_tail)
    assert first.payload["command"][0] == sys.executable and first.idempotency_key.startswith(str(run.pk))
    _terminal(_job(run, "after"))
    wait_for(lambda: PipelineRun.objects.get(pk=run.pk).status == "succeeded", what="the run to succeed")


def test_timeout_and_cancellation_reach_the_process(enrolled, agents, worker, compute_on):
    grove, state_dir = enrolled
    agents(state_dir, "--enable-native-jobs")
    wait_for(lambda: "native.job" in Grove.objects.get(pk=grove.pk).change_kinds, what="the first heartbeat")
    worker()
    slow = _submit(grove, _step("slow", "import time; time.sleep(60)", timeout_s=2))
    timed_out = _terminal(_job(slow.run, "slow"), timeout=60)
    assert timed_out.status == "timed_out"
    wait_for(lambda: PipelineRun.objects.get(pk=slow.run_id).status == "failed", what="the run to fail")

    marker = state_dir.parent / "still-running"
    code = f"import pathlib, time; pathlib.Path({str(marker)!r}).write_text('x'); time.sleep(120)"
    long = _submit(grove, _step("long", code, timeout_s=300))
    job = _job(long.run, "long")
    wait_for(lambda: GroveJob.objects.get(pk=job.pk).status == "running" and marker.exists(),
             what="the job to be running")
    pipeline_run_cancel(run_id=long.run_id, reason="cancelled")
    cancelled = _terminal(job, timeout=30)
    assert cancelled.status == "cancelled"
    node = PipelineNode.objects.get(run=long.run, node_id="long")
    assert node.status == "cancelled"


def test_agent_killed_mid_job_reports_it_after_restart(enrolled, agents, worker, compute_on):
    grove, state_dir = enrolled
    agent = agents(state_dir, "--enable-native-jobs")
    wait_for(lambda: "native.job" in Grove.objects.get(pk=grove.pk).change_kinds, what="the first heartbeat")
    worker()
    job = _submit(grove, _step("survivor", "import time; time.sleep(4); print('done')"))
    grove_job = _job(job.run, "survivor")
    wait_for(lambda: GroveJob.objects.get(pk=grove_job.pk).status == "running", what="the job to run")
    agent.kill()
    time.sleep(1)
    assert GroveJob.objects.get(pk=grove_job.pk).status == "running"  # nobody has reported yet
    agents(state_dir, "--enable-native-jobs")  # the restart journal finds the job
    ended = _terminal(grove_job, timeout=60)
    # Re-attached and finished (its real exit code), or reported as lost: never silently forgotten.
    assert (ended.status, ended.exit_code) == ("succeeded", 0) or ended.reason == "agent_restarted"
    wait_for(lambda: PipelineNode.objects.get(run=job.run, node_id="survivor").status in {"succeeded", "failed"},
             what="the node to resume")


def test_a_second_agent_on_the_same_state_dir_refuses_to_start(enrolled, agents, tmp_path):
    _, state_dir = enrolled
    agents(state_dir)
    time.sleep(1.5)
    second = subprocess.run([str(AGENT), "run", "--state-dir", str(state_dir)], capture_output=True, text=True,
                            timeout=30)
    assert second.returncode != 0
    assert "lock" in (second.stdout + second.stderr).lower()


def test_the_readme_hello_job_without_a_grove_runs_on_the_agent_not_a_simulated_grove(enrolled, agents, worker,
                                                                                     compute_on):
    """`make run`'s estate: the demo's simulated Groves (gpu-box-1 outranks the agent by slug) and the real
    agent. The README's hello job names no Grove: it is placed on the agent (the only Grove that polls) and
    ends succeeded; the simulated Grove is passed over with ``grove_not_polling``."""
    from django.core.management import call_command

    from apps.placement.models import ExecutionPlacement

    call_command("load_demo")
    grove, state_dir = enrolled
    agents(state_dir, "--enable-native-jobs")
    wait_for(lambda: Grove.objects.get(pk=grove.pk).ready, what="the agent's first poll")
    worker()
    job = compute_job_submit(body={"name": "hello", "environment": "dev", "steps": [
        {"name": "hi", "kind": "native", "command": ["/bin/echo", "hello"], "timeout_s": 30}]})
    done = _terminal(_job(job.run, "hi"))
    assert (done.status, done.grove_id) == ("succeeded", grove.pk)
    assert any("hello" in line for line in done.log_tail)
    wait_for(lambda: PipelineRun.objects.get(pk=job.run_id).status == "succeeded", what="the job to succeed")
    decision = ExecutionPlacement.objects.get(grove=grove).decision
    passed_over = {c["grove_slug"]: c for c in decision["candidates"]}
    assert [i["code"] for i in passed_over["gpu-box-1"]["incompatibilities"]] == ["grove_not_polling"]
