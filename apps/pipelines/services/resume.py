"""Resuming a node when its Grove job ends: the outbox row written in the job's terminal transaction (a
``dispatch.hooks`` handler), and the node's ordinary success/failure tail that consumes it."""
from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from apps.artifacts import services as artifact_services
from apps.artifacts.vocabulary import CheckVerdict
from apps.dispatch import hooks
from apps.dispatch.hooks import JobEnded
from apps.dispatch.models import GroveJob
from apps.dispatch.states import JOB_TERMINAL
from apps.pipelines import rules
from apps.pipelines.models import PipelineNode, PipelineOutbox
from apps.pipelines.services.outbox import resume_resend_after_s, send_after_commit
from apps.pipelines.services.runs import run_advance, run_and_node_locked
from apps.pipelines.services.transitions import node_transition
from apps.pipelines.states import node_outcome_for_job
from apps.pipelines.vocabulary import NodeKind, NodeStatus, OutboxKind


def write_resume(job: GroveJob, *, now: datetime) -> PipelineOutbox | None:
    """In the transaction that makes the job terminal: a resume row for the node awaiting it, if any."""
    awaited = PipelineNode.objects.filter(pk=job.node_id, status=NodeStatus.AWAITING, current_job_id=job.id).exists()
    if not awaited:
        return None
    row = PipelineOutbox.objects.create(kind=OutboxKind.NODE_RESUME, node_id=job.node_id, job=job,
                                        next_send_at=now + timedelta(seconds=resume_resend_after_s()), sends=1)
    send_after_commit("node_resume", job.node_id)
    return row


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
        node.exit_code, node.outputs = job.exit_code, job.outputs
        node.save(update_fields=["exit_code", "outputs"])
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
        delay = rules.retry_after(node.spec, attempt=node.attempt, outcome=outcome)
        if delay is None:
            node_transition(node=node, to=outcome, reason=reason, detail=detail)
        else:
            node_retry(node=node, job=job, outcome=outcome, delay_s=delay)
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
    send_after_commit("node_execute", node.pk, countdown=delay_s)
    return node


hooks.on_job_ended(on_job_ended)
