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

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.dispatch import hooks
from apps.dispatch.hooks import JobEnded
from apps.dispatch.models import GroveJob
from apps.dispatch.states import JOB_TERMINAL
from apps.pipelines.models import PipelineNode, PipelineOutbox, PipelineRun
from apps.pipelines.services.outbox import resume_resend_after_s, send_after_commit
from apps.pipelines.services.runs import run_advance
from apps.pipelines.services.transitions import node_transition
from apps.pipelines.states import node_outcome_for_job
from apps.pipelines.vocabulary import NodeStatus, OutboxKind


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
    send_after_commit("node_resume", job.node_id)
    return row


def _tail_inline(job: GroveJob) -> bool:
    """Run the node's tail now if its run and node locks are free and the run is small; True when it ran."""
    # The node and its run locked in one statement; SKIP LOCKED on both, so it never waits.
    node = (PipelineNode.objects.select_for_update(no_key=True, skip_locked=True, of=("self", "run"))
            .select_related("run").filter(pk=job.node_id, status=NodeStatus.AWAITING, current_job_id=job.id).first())
    if node is None:
        return False
    run = node.run
    nodes = list(run.nodes.order_by("position"))
    if len(nodes) > settings.PIPELINE_INLINE_TAIL_MAX_NODES:
        return False
    _tail(node, job)
    run_advance(run, [node if n.pk == node.pk else n for n in nodes])
    return True


def _tail(node: PipelineNode, job: GroveJob) -> None:
    """The node's success/failure transition from its ended job, in one UPDATE (callers hold the locks)."""
    node_transition(node=node, to=node_outcome_for_job(job.status), reason=job.reason or f"job_{job.status}",
                    changes={"exit_code": job.exit_code, "outputs": job.outputs})


def on_job_ended(event: JobEnded) -> None:
    """``dispatch.hooks`` handler (registered in ``PipelinesConfig.ready``)."""
    write_resume(event.job, now=event.at)


def pipeline_node_resume(*, node_id: int) -> bool:
    """The node's ordinary success/failure tail, from the persisted job outcome; then its successors.

    Idempotent: under the run and node row locks it acts only on a node still awaiting a terminal job,
    and marks its outbox rows done in the same transaction. True when this call ran the tail.
    """
    with transaction.atomic():
        run_id = PipelineNode.objects.filter(pk=node_id).values_list("run_id", flat=True).first()
        if run_id is None:
            return False
        run = PipelineRun.objects.select_for_update(no_key=True).get(pk=run_id)
        node = PipelineNode.objects.select_for_update(no_key=True).get(pk=node_id)
        pending = PipelineOutbox.objects.filter(node=node, done_at__isnull=True)
        if node.status != NodeStatus.AWAITING:
            pending.update(done_at=timezone.now())
            return False
        job = GroveJob.objects.filter(pk=node.current_job_id).first()
        if job is None or job.status not in JOB_TERMINAL:
            return False
        _tail(node, job)
        pending.update(done_at=timezone.now())
        run_advance(run)
    return True


hooks.on_job_ended(on_job_ended)
