"""Waiting for capacity: work that could fit an eligible Grove, not now, waits in the admission queue and
is admitted when capacity frees, in submission order; a wait is bounded and can be cancelled.

Real worker processes (tests/pipelines/conftest.py), real Redis and PostgreSQL, Groves over the real wire:
a job's terminal report releases its accelerator claim and wakes the queue (dispatch hook); a heartbeat
whose free counts moved wakes it too (groves hook). No test here sleeps: each waits on a state it can see.
"""
from __future__ import annotations

import time
from collections import Counter

import pytest

from apps.dispatch.models import GroveJob
from apps.pipelines import services
from apps.pipelines.models import PipelineNode, PipelineNodeEvent, PipelineNodeWait, PipelineRun
from apps.pipelines.selectors import queue_positions
from apps.placement.models import ExecutionPlacement
from tests.factories import GIB, heartbeat_body, unit
from tests.pipelines.conftest import wait_for
from tests.pipelines.graphs import exec_node, graph

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
GPU = {"count": 1, "vendor": "nvidia"}


def _run(name: str, **extra) -> PipelineRun:
    node = exec_node(name, reuse="never", accelerators=GPU, **extra)
    return services.pipeline_run_create(graph=graph(node), kind="compute", environment="prod")


def _node(run) -> PipelineNode:
    return PipelineNode.objects.select_related("current_job").get(run=run)


def _status(run, status: str):
    return lambda: _node(run).status == status


@pytest.fixture
def gpu_grove(fresh_grove, wire):
    grove = fresh_grove(name="gpu", substrate="kubernetes", roles=("compute",), gpus=1)
    return grove, wire(grove)


def test_capacity_freed_admits_waiting_work_in_submission_order(gpu_grove, worker, detached):
    grove, kube = gpu_grove
    worker()
    first = _run("first")
    wait_for(_status(first, "awaiting"), what="the first job to take the GPU")
    later = []
    for name in ("second", "third", "fourth"):
        later.append(_run(name))
        wait_for(_status(later[-1], "waiting"), what=f"{name} to wait for capacity")
    node = _node(later[0])
    assert (node.reason, node.capacity_wait.code) == ("waiting_for_capacity", "accelerator_unavailable")
    positions = queue_positions([_node(run) for run in later])
    assert [positions[_node(run).pk]["position"] for run in later] == [1, 2, 3]
    assert {p["grove"] for p in positions.values()} == {grove[0].slug}
    stored = ExecutionPlacement.objects.get(subject_id=str(node.pk))
    assert (stored.outcome, stored.code, stored.grove_id) == ("waiting", "waiting_for_capacity", None)

    order, running = [], first
    for expected in later:
        kube.run_job(_node(running).current_job_id)  # the report releases the claim: the queue wakes
        wait_for(_status(expected, "awaiting"), what="the next in line to be admitted")
        assert all(_node(run).status == "waiting" for run in later[later.index(expected) + 1:])
        order.append(expected)
        running = expected
    kube.run_job(_node(running).current_job_id)
    for run in [first, *later]:
        wait_for(lambda run=run: PipelineRun.objects.get(pk=run.pk).status == "succeeded", what="every run")
    assert order == later
    assert not PipelineNodeWait.objects.exists()
    # A placement replaced the stored wait: the retry path reads a placed row, never the wait.
    placed = ExecutionPlacement.objects.get(subject_id=str(node.pk))
    assert (placed.outcome, placed.grove_id, placed.decision["earlier"]["outcome"]) == ("placed", grove[0].id,
                                                                                        "waiting")


def test_cancel_while_waiting_leaves_the_queue(gpu_grove, worker, detached):
    _grove, kube = gpu_grove
    worker()
    holder = _run("holder")
    wait_for(_status(holder, "awaiting"), what="the GPU to be taken")
    queued = _run("queued")
    wait_for(_status(queued, "waiting"), what="the second run to wait")
    services.pipeline_run_cancel(run_id=queued.pk)
    assert _node(queued).status == "cancelled"
    assert not PipelineNodeWait.objects.filter(node__run=queued).exists()
    kube.run_job(_node(holder).current_job_id)
    wait_for(lambda: PipelineRun.objects.get(pk=holder.pk).status == "succeeded", what="the holder's run")
    assert not GroveJob.objects.filter(run_id=queued.pk).exists()  # never dispatched


def test_a_wait_is_bounded_by_the_node_timeout(gpu_grove, worker, detached):
    worker()
    holder = _run("holder")
    wait_for(_status(holder, "awaiting"), what="the GPU to be taken")
    short = _run("short", timeout_s=2)
    wait_for(_status(short, "waiting"), what="the short run to wait")
    wait_for(_status(short, "timed_out"), timeout=60, what="the wait's expiry (a Celery countdown)")
    node = _node(short)
    assert node.reason == "waiting_for_capacity_timeout" and "Waited 2 s" in node.detail
    assert PipelineRun.objects.get(pk=short.pk).status == "failed"
    assert not PipelineNodeWait.objects.exists()


def test_a_heartbeat_with_more_free_cpu_admits_work_waiting_on_cpu(fresh_grove, wire, worker, detached,
                                                                   grove_client):
    grove, credential = fresh_grove(name="cpu", substrate="kubernetes", roles=("compute",))
    busy = heartbeat_body(substrate="kubernetes")
    busy["capacity"]["placement_units"] = [unit(cpu=8000, free_cpu=2000)]
    client = grove_client(credential)
    assert client.post(f"/api/forest/v1/groves/{grove.id}/heartbeat", busy, format="json").status_code == 200
    worker()
    run = services.pipeline_run_create(graph=graph(exec_node("big", reuse="never", resources={
        "cpu_milli": 4000, "memory_bytes": GIB})), kind="compute", environment="prod")
    wait_for(_status(run, "waiting"), what="the CPU-bound step to wait")
    wait = _node(run).capacity_wait
    assert wait.code == "resources_unavailable"
    assert "needs 4 CPU, the largest free unit of Grove cpu has 2" in wait.detail
    freed = heartbeat_body(substrate="kubernetes")
    freed["capacity"]["placement_units"] = [unit(cpu=8000, free_cpu=8000)]
    assert client.post(f"/api/forest/v1/groves/{grove.id}/heartbeat", freed, format="json").status_code == 200
    wait_for(_status(run, "awaiting"), what="the heartbeat to admit it")
    wire((grove, credential)).run_job(_node(run).current_job_id)
    wait_for(lambda: PipelineRun.objects.get(pk=run.pk).status == "succeeded", what="the run")


def test_hundred_queued_jobs_on_three_groves_all_finish_once(fresh_grove, wire, worker, detached):
    groves = [wire(fresh_grove(name=f"gpu{i}", substrate="kubernetes", roles=("compute",), gpus=2))
              for i in range(3)]
    worker(concurrency=4)
    runs = [_run(f"job{i:03d}") for i in range(100)]
    ids = {run.pk for run in runs}

    beats = {"at": time.monotonic(), "progress": time.monotonic(), "done": 0, "swept": 0}

    def drive() -> bool:
        """Play the three Groves: run every job dispatched to them (and stay fresh); True once every run
        succeeded."""
        if time.monotonic() - beats["at"] > 20:
            for grove in groves:
                grove.client.post(grove.url("heartbeat"), heartbeat_body(substrate="kubernetes", gpus=2),
                                  format="json")
            beats["at"] = time.monotonic()
        for grove in groves:
            for job_id in GroveJob.objects.filter(grove=grove.grove, status="assigned").values_list("id", flat=True):
                grove.run_job(job_id)
        done = PipelineRun.objects.filter(pk__in=ids, status="succeeded").count()
        if done != beats["done"]:
            beats["done"], beats["progress"] = done, time.monotonic()
        elif time.monotonic() - beats["progress"] > 30:
            # Stalled: run the beat's sweep (the queue's safety net: it wakes every Grove with waiters), as the
            # beat would every PIPELINE_SWEEP_INTERVAL_S. Counted, so the event path's share stays visible.
            services.pipeline_sweep()
            beats["progress"], beats["swept"] = time.monotonic(), beats["swept"] + 1
        return done == len(ids)

    try:
        wait_for(drive, timeout=240, interval=0.05, what="all 100 runs to succeed")
    except AssertionError as exc:
        states = Counter(PipelineNode.objects.filter(run__in=runs).values_list("status", "reason"))
        raise AssertionError(f"{exc}: nodes {dict(states)}; waits {PipelineNodeWait.objects.count()}; "
                             f"jobs {Counter(GroveJob.objects.values_list('status', flat=True))}") from None
    assert beats["swept"] == 0, beats  # the events did all of it: the sweep never had to
    jobs = Counter(GroveJob.objects.filter(run_id__in=ids).values_list("run_id", flat=True))
    assert set(jobs) == ids and set(jobs.values()) == {1}  # none lost, none doubled
    assert PipelineNodeEvent.objects.filter(node__run__in=runs, to_status="succeeded").count() == 100
    assert PipelineNodeEvent.objects.filter(node__run__in=runs, to_status="waiting").exists()
    assert not PipelineNodeWait.objects.exists()
