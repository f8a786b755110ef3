"""The node's tail committed with its job's terminal report (apps/pipelines/services/resume.py), and the
fall-backs to the Celery resume and its outbox row: busy run lock, a run above the node limit. Real
PostgreSQL; the Grove speaks the real wire endpoints."""
from __future__ import annotations

import threading

import pytest
from django.db import connection, connections, transaction

from apps.pipelines import services
from apps.pipelines.models import PipelineNode, PipelineNodeEvent, PipelineOutbox, PipelineRun
from tests.pipelines.conftest import execute_queued
from tests.pipelines.graphs import exec_node, graph


def _run(*nodes):
    run = services.pipeline_run_create(graph=graph(*nodes), kind="compute")
    execute_queued(run)
    return run


def _node(run, node_id) -> PipelineNode:
    return PipelineNode.objects.get(run=run, node_id=node_id)


def _tails(node) -> int:
    return PipelineNodeEvent.objects.filter(node=node, to_status__in=["succeeded", "failed"]).count()


@pytest.mark.django_db
def test_the_terminal_report_runs_the_tail_and_queues_successors(k8s_grove, wire, detached,
                                                                 django_capture_on_commit_callbacks):
    run = services.pipeline_run_create(graph=graph(exec_node("a", reuse="never"),
                                                   exec_node("b", needs=["a"], reuse="never")),
                                       kind="compute", environment="prod")
    execute_queued(run)
    a = _node(run, "a")
    assert a.wait_mode == "detached"
    grove = wire(k8s_grove)
    grove.claim(a.current_job_id)
    with django_capture_on_commit_callbacks() as callbacks:
        body = grove.report(a.current_job_id, state="succeeded", exit_code=0, outputs={"k": 1}).json()
    assert body == {"job_id": str(a.current_job_id), "status": "succeeded", "accepted": True}
    a = _node(run, "a")
    assert a.status == "succeeded" and a.outputs == {"k": 1} and a.exit_code == 0 and _tails(a) == 1
    assert a.awaiting_job_id is None
    assert not PipelineOutbox.objects.filter(node=a).exists()  # nothing left for the Celery resume
    assert _node(run, "b").status == "queued"
    assert len(callbacks) >= 1  # b's node_execute (and the Grove's wake-up), after commit
    assert services.pipeline_node_resume(node_id=a.pk) is False  # a late resume finds nothing to do
    assert grove.report(a.current_job_id, state="succeeded", exit_code=0).json()["accepted"] is False
    assert _tails(_node(run, "a")) == 1


@pytest.mark.django_db
def test_a_failed_job_fails_the_node_and_finishes_the_run(k8s_grove, wire, detached):
    run = services.pipeline_run_create(graph=graph(exec_node("a", reuse="never")), kind="compute",
                                       environment="prod")
    execute_queued(run)
    wire(k8s_grove).run_job(_node(run, "a").current_job_id, state="failed", exit_code=3)
    a = _node(run, "a")
    assert a.status == "failed" and a.exit_code == 3
    assert PipelineRun.objects.get(pk=run.pk).status == "failed"


@pytest.mark.django_db
def test_a_run_above_the_node_limit_goes_through_the_outbox(k8s_grove, wire, detached, settings):
    settings.PIPELINE_INLINE_TAIL_MAX_NODES = 1
    run = services.pipeline_run_create(graph=graph(exec_node("a", reuse="never"),
                                                   exec_node("b", needs=["a"], reuse="never")),
                                       kind="compute", environment="prod")
    execute_queued(run)
    wire(k8s_grove).run_job(_node(run, "a").current_job_id)
    a = _node(run, "a")
    assert a.status == "awaiting" and PipelineOutbox.objects.filter(node=a, done_at__isnull=True).count() == 1
    assert services.pipeline_node_resume(node_id=a.pk) is True
    assert _node(run, "a").status == "succeeded" and _tails(_node(run, "a")) == 1


def _hold_run_lock(run_id, locked: threading.Event, release: threading.Event) -> None:
    try:
        with transaction.atomic():
            PipelineRun.objects.select_for_update(no_key=True).get(pk=run_id)
            locked.set()
            release.wait(60)
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
def test_a_busy_run_lock_never_blocks_the_report_and_leaves_the_tail_to_celery(k8s_grove, wire, detached):
    run = services.pipeline_run_create(graph=graph(exec_node("a", reuse="never")), kind="compute",
                                       environment="prod")
    execute_queued(run)
    job_id = _node(run, "a").current_job_id
    locked, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_run_lock, args=(run.pk, locked, release))
    holder.start()
    try:
        assert locked.wait(10)
        wire(k8s_grove).run_job(job_id)  # answered while the run row stays locked elsewhere
        a = _node(run, "a")
        assert a.status == "awaiting" and PipelineOutbox.objects.filter(node=a, done_at__isnull=True).count() == 1
    finally:
        release.set()
        holder.join(10)
    assert services.pipeline_node_resume(node_id=_node(run, "a").pk) is True
    assert _tails(_node(run, "a")) == 1 and PipelineRun.objects.get(pk=run.pk).status == "succeeded"


@pytest.mark.django_db(transaction=True)
def test_three_concurrent_identical_reports_make_one_tail(k8s_grove, wire, detached):
    run = services.pipeline_run_create(graph=graph(exec_node("a", reuse="never")), kind="compute",
                                       environment="prod")
    execute_queued(run)
    job_id = _node(run, "a").current_job_id
    assert wire(k8s_grove).claim(job_id).status_code == 200
    barrier, answers = threading.Barrier(3), []

    def report():
        try:
            barrier.wait()
            answers.append(wire(k8s_grove).report(job_id, state="succeeded", exit_code=0).json())
        finally:
            connection.close()

    threads = [threading.Thread(target=report) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(a["accepted"] for a in answers) == [False, False, True]
    a = _node(run, "a")
    assert a.status == "succeeded" and _tails(a) == 1
    assert not PipelineOutbox.objects.filter(node=a).exists()
