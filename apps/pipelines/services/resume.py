"""Resuming a node when its Grove job ends, in the job's terminal transaction (a ``dispatch.hooks`` handler).

The tail (the node's success/failure transition and ``run_advance``, whose successor dispatch stays
asynchronous: ``node_execute`` tasks after commit) runs *inline*, committed with the terminal report, when
it is cheap: the run and node row locks are free right now (taken with SKIP LOCKED, so a report never
waits on, or deadlocks with, a run cancellation that holds them) and the run has at most
``PIPELINE_INLINE_TAIL_MAX_NODES`` nodes. Otherwise the report writes the resume outbox row and sends
``pipeline.node_resume`` after commit, as before; the sweep re-sends it if the broker loses it. Either
way the outcome commits with the job's end or is recorded for a later tail: nothing is lost, and the
tail runs once (a node no longer awaiting its job is never tailed again). ``PIPELINE_INLINE_TAIL=0``
sends every tail through Celery."""
from __future__ import annotations

import functools
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from apps.artifacts import services as artifact_services
from apps.artifacts.vocabulary import CheckVerdict
from apps.core.db import db_params, instance_from_row, lock_clause, select_columns, sql_from_meta
from apps.dispatch.hooks import JobEnded
from apps.dispatch.models import GroveJob
from apps.dispatch.states import JOB_TERMINAL
from apps.pipelines import rules
from apps.pipelines.models import PipelineNode, PipelineOutbox, PipelineRun
from apps.pipelines.services.outbox import resume_resend_after_s, send_after_commit
from apps.pipelines.services.runs import run_advance, run_and_node_locked
from apps.pipelines.services.transitions import node_transition
from apps.pipelines.states import node_outcome_for_job
from apps.pipelines.vocabulary import NodeKind, NodeStatus, OutboxKind, Task


def write_resume(job: GroveJob, *, now: datetime) -> PipelineOutbox | None:
    """In the transaction that makes the job terminal: the node's tail inline when cheap, else a resume
    row for the node awaiting the job, if any (returned)."""
    if settings.PIPELINE_INLINE_TAIL and _tail_inline(job):
        return None
    awaited = PipelineNode.objects.filter(pk=job.node_id, status=NodeStatus.AWAITING, current_job_id=job.id).exists()
    if not awaited:
        return None
    row = PipelineOutbox.objects.create(kind=OutboxKind.NODE_RESUME, node_id=job.node_id, job=job,
                                        next_send_at=now + timedelta(seconds=resume_resend_after_s()), sends=1)
    send_after_commit(Task.NODE_RESUME, job.node_id)
    return row


def _tail_inline(job: GroveJob) -> bool:
    """Run the node's tail now if its run and node locks are free and the run is small; True when it ran."""
    # The node and its run locked in one statement; SKIP LOCKED on both, so it never waits. Then the run's
    # nodes (and the run, in the same rows) read after the locks, as SQL from the models' metadata: this
    # runs in every terminal report (apps.core.db.select_columns says why).
    with connection.cursor() as cursor:
        cursor.execute(_lock_sql(connection.vendor), db_params(PipelineNode, id=job.node_id, status=NodeStatus.AWAITING,
                                                                 current_job_id=job.id))
        locked = cursor.fetchone()
    if locked is None:
        return False
    nodes = list(PipelineNode.objects.raw(_run_nodes_sql(), [locked[0], settings.PIPELINE_INLINE_TAIL_MAX_NODES + 1]))
    node = next((n for n in nodes if n.pk == job.node_id), None)
    if len(nodes) > settings.PIPELINE_INLINE_TAIL_MAX_NODES or node is None:
        return False
    if node.kind == NodeKind.BUILD_IMAGE:  # reading the pushed image's registry is not cheap
        return False
    run = instance_from_row(PipelineRun, node, prefix="r_")
    for each in nodes:
        each.run = run
    _tail(node, job, run)
    run_advance(run, nodes)
    return True


@functools.cache
def _lock_sql(vendor: str) -> str:
    return (sql_from_meta("SELECT n.{n.run} FROM {n} n JOIN {r} r ON r.{r.id} = n.{n.run} WHERE n.{n.id} = %s "
                          "AND n.{n.status} = %s AND n.{n.current_job_id} = %s", n=PipelineNode, r=PipelineRun)
            + lock_clause(of=("n", "r"), skip_locked=True))


@functools.cache
def _run_nodes_sql() -> str:
    return sql_from_meta(f"SELECT {select_columns(PipelineNode, alias='n')}, "
                         f"{select_columns(PipelineRun, alias='r', prefix='r_')} FROM {{n}} n JOIN {{r}} r "
                         "ON r.{r.id} = n.{n.run} WHERE n.{n.run} = %s ORDER BY n.{n.position} LIMIT %s",
                         n=PipelineNode, r=PipelineRun)


def _tail(node: PipelineNode, job: GroveJob, run: PipelineRun) -> None:
    """The node's outcome from its ended job (callers hold the locks): a build_image node's pushed image is
    recorded and checked against its target platform first; a failed or timed-out attempt with retries
    left is queued again; otherwise the node ends, its exit code and outputs in the same UPDATE."""
    outcome, reason, detail = node_outcome_for_job(job.status), job.reason or f"job_{job.status}", ""
    if node.kind == NodeKind.BUILD_IMAGE and outcome == NodeStatus.SUCCEEDED:
        # The pushed image becomes an oci_registry artifact with its config platform; under
        # host.deploy.forest_compatibility a platform that disagrees with the node's target fails it.
        check = artifact_services.build_image_output_record(
            outputs=job.outputs, run_id=str(run.id), node_id=node.node_id,
            target_platforms=node.requirement["compatibility"]["platform"]["allowed"]
            or [job.payload.get("platform")], environment=run.environment or None, team=run.team or None)
        if check is not None and check.verdict == CheckVerdict.REFUSED:
            outcome, reason, detail = NodeStatus.FAILED, check.code, check.detail
    outcome_fields = {"exit_code": job.exit_code, "outputs": job.outputs}
    delay = rules.retry_after(node.spec, attempt=node.attempt, outcome=outcome)
    if delay is None:
        node_transition(node=node, to=outcome, reason=reason, detail=detail, changes=outcome_fields)
    else:
        node.exit_code, node.outputs = job.exit_code, job.outputs
        node.save(update_fields=list(outcome_fields))
        node_retry(node=node, job=job, outcome=outcome, delay_s=delay)


def on_job_ended(event: JobEnded) -> None:
    """``dispatch.hooks`` handler (registered in ``PipelinesConfig.ready``)."""
    write_resume(event.job, now=event.at)


def pipeline_node_resume(*, node_id: int) -> bool:
    """The node's ordinary success/failure tail, from the persisted job outcome; then its successors.

    Idempotent: under the run and node row locks it acts only on a node still awaiting a terminal job,
    and marks its outbox rows done in the same transaction. True when this call ran the tail.
    """
    with transaction.atomic():
        locked = run_and_node_locked(node_id)
        if locked is None:
            return False
        run, node = locked
        pending = PipelineOutbox.objects.filter(node=node, done_at__isnull=True)
        if node.status != NodeStatus.AWAITING:
            pending.update(done_at=timezone.now())
            return False
        job = GroveJob.objects.filter(pk=node.current_job_id).first()
        if job is None or job.status not in JOB_TERMINAL:
            return False
        _tail(node, job, run)
        pending.update(done_at=timezone.now())
        run_advance(run)
    return True


def node_retry(*, node: PipelineNode, job: GroveJob, outcome: str, delay_s: int) -> PipelineNode:
    """Queue the node's next attempt after its backoff. The attempt number moves on (a new idempotency key
    ``run:node:attempt``); its placement is the stored one, re-read by the exec driver."""
    now = timezone.now()
    attempt = node.attempt + 1
    why = job.reason or f"job_{job.status}"
    node_transition(
        node=node, to=NodeStatus.QUEUED, reason="retrying",
        detail=f"Attempt {node.attempt} {outcome.replace('_', ' ')} ({why}); attempt {attempt} of "
               f"{1 + node.spec.get('retries', 0)} starts in {delay_s} s.",
        changes={"attempt": attempt, "retry_at": now + timedelta(seconds=delay_s), "awaiting_job_id": None})
    send_after_commit(Task.NODE_EXECUTE, node.pk, countdown=delay_s)
    return node

