"""Reliability of detached waiting with a real Celery worker process, real Redis and real PostgreSQL.

Each test starts ``celery -A forest_host worker`` on a queue of its own, pointed at this test's
database (tests/pipelines/conftest.py), and kills it at teardown. The Grove talks over the real wire
endpoints. Every test checks both halves of the contract: nothing lost, nothing run twice.
"""
from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
import redis
from django.conf import settings as django_settings
from django.db import connection, connections, transaction
from django.utils import timezone
from rest_framework.test import APIClient

from apps.dispatch import services as dispatch_services
from apps.dispatch.models import GroveJob
from apps.pipelines import services
from apps.pipelines.models import PipelineNode, PipelineNodeEvent, PipelineOutbox, PipelineRun
from tests.pipelines.conftest import WireGrove, wait_for
from tests.pipelines.graphs import exec_node, graph

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def grove(k8s_grove, detached):
    return k8s_grove


def _wire(grove_and_credential) -> WireGrove:
    grove, credential = grove_and_credential
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {credential}")
    return WireGrove(client, grove)


def _run(*nodes):
    return services.pipeline_run_create(graph=graph(*nodes), kind="compute", environment="prod")


def _node(run, node_id) -> PipelineNode:
    return PipelineNode.objects.get(run=run, node_id=node_id)


def _job_of(run, node_id, worker_log=None):
    return wait_for(lambda: _node(run, node_id).current_job_id, what=f"{node_id} dispatched by the worker")


def _tails(node, status="succeeded") -> int:
    return PipelineNodeEvent.objects.filter(node=node, to_status=status).count()


def _sweep_later(minutes=5):
    return services.pipeline_sweep(now=timezone.now() + timedelta(minutes=minutes))


@pytest.mark.usefixtures("celery_tail")
def test_broker_loses_the_resume_and_the_sweep_recovers_it(grove, worker, celery_queue):
    run = _run(exec_node("a", reuse="never"), exec_node("b", needs=["a"], reuse="never"))
    w = worker()
    job_a = _job_of(run, "a")
    w.stop()  # nobody consumes: the resume sent after commit sits in Redis...
    _wire(grove).run_job(job_a)
    broker = redis.Redis.from_url(django_settings.CELERY_BROKER_URL)
    queued = [json.loads(raw)["headers"]["task"] for raw in broker.lrange(celery_queue, 0, -1)]
    assert "pipeline.node_resume" in queued  # a worker stopped mid-ack may leave a redelivery beside it
    broker.delete(celery_queue)  # ...and is lost, as if Redis had been flushed after the commit
    worker()
    assert _node(run, "a").status == "awaiting"
    assert _sweep_later()["resent"] == 1
    wait_for(lambda: _node(run, "a").status == "succeeded", what="the swept resume")
    job_b = _job_of(run, "b")
    _wire(grove).run_job(job_b)
    wait_for(lambda: PipelineRun.objects.get(pk=run.pk).status == "succeeded", what="the run to finish")
    for node_id in ("a", "b"):
        node = _node(run, node_id)
        assert _tails(node) == 1 and GroveJob.objects.filter(node_id=node.pk).count() == 1


@pytest.mark.usefixtures("celery_tail")
def test_three_concurrent_identical_terminal_reports_make_one_resume_and_one_tail(grove, worker):
    run = _run(exec_node("a", reuse="never"), exec_node("b", needs=["a"], reuse="never"))
    worker()
    job_a = _job_of(run, "a")
    wire = _wire(grove)
    assert wire.claim(job_a).status_code == 200
    barrier, answers = threading.Barrier(3), []

    def report():
        try:
            barrier.wait()
            answers.append(_wire(grove).report(job_a, state="succeeded", exit_code=0, outputs={"n": 1}).json())
        finally:
            connection.close()

    threads = [threading.Thread(target=report) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(a["accepted"] for a in answers) == [False, False, True]
    wait_for(lambda: _node(run, "b").current_job_id, what="the successor to be dispatched")
    a = _node(run, "a")
    assert PipelineOutbox.objects.filter(node=a).count() == 1
    assert _tails(a) == 1 and a.outputs == {"n": 1}
    assert GroveJob.objects.filter(node_id=_node(run, "b").pk).count() == 1


def _lock_run_in_another_connection(run_id, holder: dict, locked: threading.Event, release: threading.Event):
    try:
        with transaction.atomic():
            PipelineRun.objects.select_for_update(no_key=True).get(pk=run_id)
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                holder["pid"] = cursor.fetchone()[0]
            locked.set()
            release.wait(60)
    finally:
        connections.close_all()


def _someone_waits_for(pid: int) -> bool:
    """Live lock table (not the cached statistics views): is any backend blocked by ``pid``?"""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND %s = ANY(pg_blocking_pids(pid))", [pid])
        return cursor.fetchone()[0] > 0


def test_worker_killed_mid_resume_is_completed_by_the_next_sweep_once(grove, worker):
    run = _run(exec_node("a", reuse="never"))
    first = worker()
    job_a = _job_of(run, "a")
    locked, release, held = threading.Event(), threading.Event(), {}
    holder = threading.Thread(target=_lock_run_in_another_connection, args=(run.pk, held, locked, release))
    holder.start()
    try:
        assert locked.wait(10)
        _wire(grove).run_job(job_a)
        # The worker has taken the resume and is inside its transaction, waiting for the run row.
        wait_for(lambda: _someone_waits_for(held["pid"]), what="the worker to be mid-resume")
        first.kill()  # SIGKILL to the whole worker: the task never finishes, its transaction rolls back
    finally:
        release.set()
        holder.join(10)
    assert _node(run, "a").status == "awaiting"
    worker()
    assert _sweep_later()["resent"] == 1
    wait_for(lambda: PipelineRun.objects.get(pk=run.pk).status == "succeeded", what="the recovered resume")
    assert _tails(_node(run, "a")) == 1


def test_overdue_job_is_timed_out_by_the_sweep_and_a_late_report_does_not_revive_it(grove, worker):
    run = _run(exec_node("a", reuse="never", timeout_s=5))
    worker()
    job_a = _job_of(run, "a")
    wire = _wire(grove)
    wire.claim(job_a)
    wire.report(job_a, state="running")
    grace = dispatch_services.scheduling_grace_s()
    counts = services.pipeline_sweep(now=timezone.now() + timedelta(seconds=5 + grace + 1))
    assert counts["timed_out"] == 1
    wait_for(lambda: _node(run, "a").status == "timed_out", what="the timed-out node to resume")
    job = GroveJob.objects.get(pk=job_a)
    assert job.reason == "deadline_exceeded" and _node(run, "a").reason == "deadline_exceeded"
    late = wire.report(job_a, state="succeeded", exit_code=0).json()
    assert late["accepted"] is False
    services.pipeline_sweep()
    assert _node(run, "a").status == "timed_out" and _tails(_node(run, "a")) == 0
    assert PipelineRun.objects.get(pk=run.pk).status == "failed"


def test_cancel_while_running_reaches_the_grove_on_its_next_poll(grove, worker):
    run = _run(exec_node("a", reuse="never"))
    worker()
    job_a = _job_of(run, "a")
    wire = _wire(grove)
    wire.claim(job_a)
    wire.report(job_a, state="running")
    services.pipeline_run_cancel(run_id=run.id)
    poll = wire.client.get(wire.url("changes?wait=5")).json()
    assert poll["cancel"] == [str(job_a)]
    late = wire.report(job_a, state="succeeded", exit_code=0).json()
    assert late["accepted"] is False
    services.pipeline_sweep(now=timezone.now() + timedelta(hours=2))
    node = _node(run, "a")
    assert node.status == "cancelled" and node.awaiting_job_id is None and _tails(node) == 0
    assert GroveJob.objects.get(pk=job_a).late_report["state"] == "succeeded"


def test_two_runs_of_one_graph_in_parallel_land_on_their_own_runs(grove, worker):
    nodes = (exec_node("a", reuse="never"), exec_node("b", needs=["a"], reuse="never"))
    one, two = _run(*nodes), _run(*nodes)
    worker()
    wire = _wire(grove)
    # Interleave: finish two's "a" first, then one's, each reporting which run it belongs to.
    for run in (two, one):
        job = _job_of(run, "a")
        wire.run_job(job, outputs={"run": str(GroveJob.objects.get(pk=job).payload["run_id"])})
    for run in (one, two):
        job = _job_of(run, "b")
        wire.run_job(job, outputs={"run": str(GroveJob.objects.get(pk=job).payload["run_id"])})
    for run in (one, two):
        wait_for(lambda run=run: PipelineRun.objects.get(pk=run.pk).status == "succeeded", what="both runs")
        for node in run.nodes.all():
            assert node.outputs == {"run": str(run.id)} and _tails(node) == 1
            assert GroveJob.objects.get(node_id=node.pk).run_id == run.id
