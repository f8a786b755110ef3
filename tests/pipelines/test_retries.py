"""Step retries with a real Celery worker process, real Redis and real PostgreSQL (tests/pipelines/conftest.py).

A node with ``retries`` runs again after a failed or timed-out attempt, with the attempt in the idempotency
key ``run:node:attempt``, on the Grove its stored placement names (never a fresh choice); a stored Grove
that is disabled or no longer compatible fails the retry with ``placed_grove_gone`` /
``placed_grove_incompatible``; a cancelled attempt is never retried.
The Grove talks over the real wire endpoints; every wait is on an observed row, never a sleep.
"""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.dispatch.models import GroveJob
from apps.groves.models import Grove
from apps.pipelines import services
from apps.pipelines.models import PipelineNode, PipelineNodeEvent, PipelineRun
from apps.placement.models import ExecutionPlacement
from apps.placement.requirements import ExecutionRequirement
from apps.placement.services import placement_decide
from tests.pipelines.conftest import WireGrove, wait_for
from tests.pipelines.graphs import exec_node, graph

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

NOW = {"delay_s": 0}


def _wire(grove_and_credential) -> WireGrove:
    grove, credential = grove_and_credential
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {credential}")
    return WireGrove(client, grove)


def _run(*nodes):
    return services.pipeline_run_create(graph=graph(*nodes), kind="compute", environment="prod")


def _node(run, node_id="a") -> PipelineNode:
    return PipelineNode.objects.get(run=run, node_id=node_id)


def _next_job(run, *, after=None, node_id="a") -> GroveJob:
    """The node's job once one newer than ``after`` is dispatched."""
    job_id = wait_for(lambda: (j := _node(run, node_id).current_job_id) and j != after and j,
                      what=f"{node_id}'s next attempt to be dispatched")
    return GroveJob.objects.get(pk=job_id)


def _finished(run) -> PipelineRun:
    return wait_for(lambda: (r := PipelineRun.objects.get(pk=run.pk)).status in {"succeeded", "failed"} and r,
                    what="the run to finish")


def test_fails_twice_then_succeeds_on_the_same_stored_grove(k8s_grove, fresh_grove, detached, worker):
    run = _run(exec_node("a", reuse="never", retries=2, backoff=NOW))
    worker()
    wire = _wire(k8s_grove)
    first = _next_job(run)
    assert first.grove_id == k8s_grove[0].id and first.attempt == 1
    # A second, equally able Grove enrols, and a fresh choice would now pick it (staff prefer it)...
    other, _ = fresh_grove(name="aaa-kube", substrate="kubernetes", roles=("compute", "build"))
    type(other).objects.filter(pk=other.pk).update(placement_preference=100)
    fresh = placement_decide(requirement=ExecutionRequirement.from_json(_node(run).requirement))
    assert fresh.grove.id == str(other.id)
    # ...yet every retry reads the stored placement and goes back to the first Grove.
    wire.run_job(first.id, state="failed", exit_code=1)
    second = _next_job(run, after=first.id)
    wire.run_job(second.id, state="failed", exit_code=2)
    third = _next_job(run, after=second.id)
    wire.run_job(third.id, state="succeeded", exit_code=0, outputs={"ok": True})
    assert _finished(run).status == "succeeded"

    node = _node(run)
    assert (node.status, node.attempt, node.exit_code, node.outputs) == ("succeeded", 3, 0, {"ok": True})
    jobs = list(GroveJob.objects.filter(node_id=node.pk).order_by("attempt"))
    assert [(j.attempt, j.grove_id, j.status) for j in jobs] == [
        (1, k8s_grove[0].id, "failed"), (2, k8s_grove[0].id, "failed"), (3, k8s_grove[0].id, "succeeded")]
    assert [j.idempotency_key for j in jobs] == [f"{run.id}:a:{n}" for n in (1, 2, 3)]
    assert ExecutionPlacement.objects.filter(subject_type="pipeline_node", subject_id=str(node.pk)).count() == 1
    events = list(PipelineNodeEvent.objects.filter(node=node).values_list("from_status", "to_status", "reason"))
    assert [e for e in events if e[2] == "retrying"] == [("awaiting", "queued", "retrying")] * 2
    assert [e[1] for e in events].count("succeeded") == 1
    assert node.retry_at is None


@pytest.mark.parametrize(("change", "code", "words"), [
    ({"enabled": False}, "placed_grove_gone", "disabled"),
    ({"platforms": ["linux/arm64"]}, "placed_grove_incompatible", "can no longer run it"),
])
def test_a_retry_whose_stored_grove_went_away_fails_with_the_stored_placement_codes(
        k8s_grove, fresh_grove, detached, worker, change, code, words):
    run = _run(exec_node("a", reuse="never", retries=3, backoff=NOW, platform=["linux/amd64"]))
    worker()
    first = _next_job(run)
    fresh_grove(name="aaa-kube", substrate="kubernetes", roles=("compute", "build"))  # somewhere else to go
    Grove.objects.filter(pk=k8s_grove[0].pk).update(**change)
    _wire(k8s_grove).run_job(first.id, state="failed", exit_code=1)
    assert _finished(run).status == "failed"
    node = _node(run)
    assert (node.status, node.reason, node.attempt) == ("failed", code, 2)
    assert words in node.detail
    assert GroveJob.objects.filter(node_id=node.pk).count() == 1  # no silent move to the other Grove


def test_timed_out_attempt_is_retried_and_a_cancelled_one_is_not(k8s_grove, detached, worker):
    timed = _run(exec_node("a", reuse="never", retries=1, backoff=NOW, timeout_s=5))
    cancelled = _run(exec_node("a", reuse="never", retries=1, backoff=NOW))
    worker()
    wire = _wire(k8s_grove)
    job = _next_job(timed)
    wire.claim(job.id)
    wire.report(job.id, state="running")
    job.refresh_from_db()
    # The Grove kept polling meanwhile (ready): the other run's unclaimed job is left alone by the sweep.
    Grove.objects.filter(pk=k8s_grove[0].pk).update(last_polled_at=job.deadline_at)
    counts = services.pipeline_sweep(now=job.deadline_at + timedelta(seconds=1))
    assert counts["timed_out"] == 1 and counts["unclaimed"] == 0
    retry = _next_job(timed, after=job.id)
    assert retry.attempt == 2 and _node(timed).reason == "wait_detached:eligible"
    wire.run_job(retry.id)
    assert _finished(timed).status == "succeeded"
    assert GroveJob.objects.get(pk=job.id).status == "timed_out"

    victim = _next_job(cancelled)
    assert wire.claim(victim.id).status_code == 200
    assert wire.report(victim.id, state="cancelled").status_code == 200
    assert _finished(cancelled).status == "failed"
    node = _node(cancelled)
    assert (node.status, node.attempt) == ("cancelled", 1)
    assert GroveJob.objects.filter(node_id=node.pk).count() == 1


def test_backoff_holds_the_retry_until_it_is_due_and_the_sweep_leaves_it_alone(k8s_grove, detached, worker):
    run = _run(exec_node("a", reuse="never", retries=1, backoff={"delay_s": 3600}))
    worker()
    first = _next_job(run)
    _wire(k8s_grove).run_job(first.id, state="failed", exit_code=1)
    node = wait_for(lambda: (n := _node(run)).status == "queued" and n, what="the retry to be queued")
    assert node.attempt == 2 and node.reason == "retrying" and "in 3600 s" in node.detail
    assert node.retry_at > timezone.now() + timedelta(minutes=59)
    # An early execute (a re-send) does nothing yet; the sweep does not count a backoff as overdue.
    assert services.pipeline_node_execute(node_id=node.pk) is None
    assert services.pipeline_sweep(now=timezone.now() + timedelta(minutes=5))["requeued"] == 0
    assert _node(run).current_job_id == first.id
    # Once the backoff is over, the sweep sends it and the attempt runs.
    assert services.pipeline_sweep(now=node.retry_at + timedelta(minutes=1))["requeued"] == 1
    PipelineNode.objects.filter(pk=node.pk).update(retry_at=timezone.now())
    services.pipeline_node_execute(node_id=node.pk)
    second = GroveJob.objects.get(pk=_node(run).current_job_id)
    assert second.attempt == 2 and second.idempotency_key == f"{run.id}:a:2"
