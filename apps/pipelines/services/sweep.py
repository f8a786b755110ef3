"""The recurring sweep: recover what the broker or a dead worker lost."""
from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from apps.dispatch.models import GroveJob
from apps.dispatch.services import grove_jobs_end_unclaimed, grove_jobs_time_out_overdue
from apps.dispatch.states import JOB_TERMINAL
from apps.pipelines.models import PipelineNode, PipelineOutbox
from apps.pipelines.services.admission_queue import admission_sweep
from apps.pipelines.services.outbox import resume_resend_after_s, send_after_commit
from apps.pipelines.services.resume import write_resume
from apps.pipelines.vocabulary import NodeStatus, Task

log = logging.getLogger(__name__)


def pipeline_sweep(*, now: datetime | None = None, limit: int = 500) -> dict:
    """Touches only due rows, each through a partial index: undone outbox rows past ``next_send_at``;
    awaiting nodes whose job is terminal with no resume pending; live jobs past their deadline; assigned jobs
    nobody claims on a Grove that is not ready (the unclaimed policy, ``grove_jobs_end_unclaimed``); queued
    nodes whose execute message is overdue; then the admission queue's safety net (overdue waits expire,
    every Grove something waits for is woken)."""
    now = now or timezone.now()
    counts = {"resent": 0, "orphans": 0, "timed_out": 0, "unclaimed": 0, "requeued": 0}
    with transaction.atomic():
        due = list(PipelineOutbox.objects.select_for_update(skip_locked=True, no_key=True)
                   .filter(done_at__isnull=True, next_send_at__lte=now).order_by("next_send_at")[:limit])
        for row in due:
            # Back off so a node that keeps failing to resume does not flood the broker.
            row.next_send_at = now + timedelta(seconds=resume_resend_after_s() * min(2 ** row.sends, 32))
            row.sends += 1
            row.save(update_fields=["next_send_at", "sends"])
            send_after_commit(Task.NODE_RESUME, row.node_id)
        counts["resent"] = len(due)

    pending_resume = PipelineOutbox.objects.filter(node=OuterRef("pk"), done_at__isnull=True)
    orphans = list(PipelineNode.objects.filter(status=NodeStatus.AWAITING, current_job__status__in=JOB_TERMINAL)
                   .exclude(Exists(pending_resume)).values_list("current_job_id", flat=True)[:limit])
    for job_id in orphans:
        with transaction.atomic():
            job = GroveJob.objects.select_for_update(no_key=True).get(pk=job_id)
            if write_resume(job, now=now) is not None:
                counts["orphans"] += 1

    counts["timed_out"] = grove_jobs_time_out_overdue(now=now, limit=limit)
    counts["unclaimed"] = grove_jobs_end_unclaimed(now=now, limit=limit)

    stale_before = now - timedelta(seconds=resume_resend_after_s())
    with transaction.atomic():
        stuck = list(PipelineNode.objects.select_for_update(skip_locked=True, no_key=True)
                     .filter(status=NodeStatus.QUEUED, queued_at__lte=stale_before)
                     # a retry waiting out its backoff is not overdue until its backoff is over
                     .filter(Q(retry_at__isnull=True) | Q(retry_at__lte=stale_before))[:limit])
        for node in stuck:
            node.queued_at = now
            node.save(update_fields=["queued_at"])
            send_after_commit(Task.NODE_EXECUTE, node.pk)
        counts["requeued"] = len(stuck)
    counts.update(admission_sweep(now=now, limit=limit))
    if any(counts.values()):
        log.info("pipeline sweep", extra=counts)
    return counts
