"""Waiting never starves dispatch: in-place waits hold runner slots (their own Celery pool, sized by
``PIPELINE_RUNNER_SLOTS``), never the workers that dispatch and resume.

Real worker processes (tests/pipelines/conftest.py: the dispatch worker with ONE process and the
``manage.py pipeline_runner`` pool with two slots), real Redis and PostgreSQL, Groves over the real wire.
Four long in-place steps run on one Grove and are never reported until the end; a short step on another
Grove must still be dispatched, run and resumed meanwhile. Before the runner pool, the single dispatch
process sat in the first long step's wait and nothing else moved.
"""
from __future__ import annotations

import pytest
import redis
from django.conf import settings as django_settings
from rest_framework.test import APIClient

from apps.pipelines import selectors, services
from apps.pipelines.models import PipelineNode, PipelineNodeEvent, PipelineRun
from tests.pipelines.conftest import WireGrove, wait_for
from tests.pipelines.graphs import exec_node, graph

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

LONG, SLOTS = 4, 2


def _wire(grove_and_credential) -> WireGrove:
    grove, credential = grove_and_credential
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {credential}")
    return WireGrove(client, grove)


def _run(node):
    return services.pipeline_run_create(graph=graph(node), kind="compute", environment="prod")


def _node(run) -> PipelineNode:
    return PipelineNode.objects.get(run=run)


def test_long_in_place_waits_do_not_delay_a_short_job_on_another_grove(k8s_grove, native_grove, worker,
                                                                       celery_queue):
    worker(concurrency=1, runner_slots=SLOTS)
    long_runs = [_run(exec_node(f"long{i}", reuse="never")) for i in range(LONG)]
    # Every long step is dispatched though the one dispatch process saw each of them start waiting.
    long_nodes = [wait_for(lambda r=r: (n := _node(r)).current_job_id and n, what="a long step dispatched")
                  for r in long_runs]
    assert {(n.status, n.wait_mode) for n in long_nodes} == {("awaiting", "in_place")}
    # The runner pool holds SLOTS of the waits; the rest queue for a slot (they still finish via the outbox).
    broker = redis.Redis.from_url(django_settings.CELERY_BROKER_URL)
    wait_for(lambda: broker.llen(f"{celery_queue}.runner") == LONG - SLOTS, what="the runner slots to fill")
    assert selectors.runner_status()["waiting_in_place"] == LONG

    short = _run(exec_node("short", runtime="native", platform=["darwin/arm64"], reuse="never"))
    job = wait_for(lambda: _node(short).current_job_id, what="the short step to be dispatched")
    mac = _wire(native_grove)
    mac.run_job(job)
    wait_for(lambda: PipelineRun.objects.get(pk=short.pk).status == "succeeded", what="the short run to finish")
    assert all(_node(r).status == "awaiting" for r in long_runs)  # still running: nothing waited for them

    kube = _wire(k8s_grove)
    for node in long_nodes:
        kube.run_job(node.current_job_id)
    for run in long_runs:
        wait_for(lambda run=run: PipelineRun.objects.get(pk=run.pk).status == "succeeded", what="a long run")
        assert PipelineNodeEvent.objects.filter(node=_node(run), to_status="succeeded").count() == 1
    wait_for(lambda: broker.llen(f"{celery_queue}.runner") == 0, what="the queued waits to drain")
    assert selectors.runner_status()["waiting_in_place"] == 0
