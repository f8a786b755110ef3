"""The pipelines' raw SQL (docs/architecture.md "Fast paths") answers what its ORM form answers, on real
PostgreSQL: the inline tail's lock and its read of the run's nodes (apps/pipelines/services/resume.py), and
the coalesced wake-up request (apps/pipelines/services/admission_queue.py ``request_wake``)."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from apps.core.db import db_params, instance_from_row
from apps.pipelines import services
from apps.pipelines.models import PipelineAdmissionWake, PipelineNode, PipelineRun
from apps.pipelines.services import admission_queue, resume
from apps.pipelines.vocabulary import NodeStatus
from tests.pipelines.conftest import execute_queued
from tests.pipelines.graphs import exec_node, graph

pytestmark = pytest.mark.django_db


def _fields(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


def _awaiting_run():
    run = services.pipeline_run_create(graph=graph(exec_node("a", reuse="never"), exec_node("b", reuse="never"),
                                                   exec_node("c", needs=["a"], reuse="never")),
                                       kind="compute", environment="prod")
    execute_queued(run)
    return run, PipelineNode.objects.get(run=run, node_id="a")


def test_the_tail_lock_finds_the_row_the_orm_finds(k8s_grove, detached):
    run, node = _awaiting_run()
    assert node.status == NodeStatus.AWAITING
    cases = [(node.pk, NodeStatus.AWAITING, node.current_job_id), (node.pk, NodeStatus.QUEUED, node.current_job_id),
             (node.pk, NodeStatus.AWAITING, uuid.uuid4()), (node.pk + 10_000, NodeStatus.AWAITING, node.current_job_id)]
    answers = []
    for node_id, status, job_id in cases:
        with connection.cursor() as cursor:
            cursor.execute(resume._lock_sql(connection.vendor),
                           db_params(PipelineNode, id=node_id, status=status, current_job_id=job_id))
            raw = [row[0] for row in cursor.fetchall()]
        orm = list(PipelineNode.objects.filter(pk=node_id, status=status, current_job_id=job_id)
                   .select_related("run").values_list("run_id", flat=True))
        assert raw == orm, (node_id, status)
        answers.append(raw)
    assert answers == [[run.pk], [], [], []]
    assert resume._lock_sql(connection.vendor).endswith("SKIP LOCKED")


def test_the_run_nodes_read_loads_what_the_orm_loads(k8s_grove, detached):
    run, _ = _awaiting_run()
    for limit in (1, 2, 3, 10):
        raw = list(PipelineNode.objects.raw(resume._run_nodes_sql(), [run.pk, limit]))
        orm = list(PipelineNode.objects.filter(run=run).order_by("position")[:limit])
        assert [_fields(node) for node in raw] == [_fields(node) for node in orm]
        loaded = instance_from_row(PipelineRun, raw[0], prefix="r_")
        assert _fields(loaded) == _fields(PipelineRun.objects.get(pk=run.pk))


def _wake_orm(grove_id, now) -> bool:
    """``request_wake``'s statement through the ORM: create, or move a request older than the resend age."""
    row = PipelineAdmissionWake.objects.filter(grove_id=grove_id).first()
    if row is None:
        PipelineAdmissionWake.objects.create(grove_id=grove_id, requested_at=now)
        return True
    if row.requested_at < now - timedelta(seconds=admission_queue.WAKE_RESEND_AFTER_S):
        PipelineAdmissionWake.objects.filter(grove_id=grove_id).update(requested_at=now)
        return True
    return False


def test_a_wake_request_coalesces_as_its_orm_form_does():
    raw_grove, orm_grove = uuid.uuid4(), uuid.uuid4()
    answers = []
    for step in ("first", "again at once", "lost long ago", "again at once"):
        if step == "lost long ago":
            PipelineAdmissionWake.objects.update(requested_at=timezone.now() - timedelta(minutes=5))
        sent_raw = admission_queue.request_wake(raw_grove)
        sent_orm = _wake_orm(orm_grove, timezone.now())
        answers.append((sent_raw, sent_orm))
        assert PipelineAdmissionWake.objects.count() == 2
    assert answers == [(True, True), (False, False), (True, True), (False, False)]
    moved = dict(PipelineAdmissionWake.objects.values_list("grove_id", "requested_at"))
    assert all(timezone.now() - at < timedelta(minutes=1) for at in moved.values())
