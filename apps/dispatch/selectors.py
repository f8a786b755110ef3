"""Reads for dispatch: a job as the wire spells it, and what one Grove should see in ``changes``."""
from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from apps.dispatch import hooks, rules
from apps.dispatch.models import GroveJob
from apps.dispatch.vocabulary import CHANGES_MAX_CANCELS, CHANGES_MAX_JOBS, JobStatus
from apps.groves.models import Grove


def job_wire(job: GroveJob) -> dict:
    """A job as the wire contract spells it (docs/wire.md, ``Job``)."""
    return {"job_id": str(job.id), "run_id": str(job.run_id), "node": job.payload.get("node", ""),
            "change_kind": job.change_kind, "idempotency_key": job.idempotency_key, "payload": job.payload}


def grove_changes(*, grove: Grove) -> tuple[dict, bool]:
    """The Grove's assigned, unclaimed jobs (oldest first), the job ids whose cancellation it has not
    acknowledged, and what each registered source adds (workload generations); plus whether any of it is
    news that should end a long-poll now. Job reads go through partial indexes on live rows only."""
    jobs = list(GroveJob.objects.filter(grove=grove, status=JobStatus.ASSIGNED).order_by("created_at")
                [:CHANGES_MAX_JOBS])
    cancel = list(GroveJob.objects.filter(grove=grove, cancel_requested_at__isnull=False,
                                          cancel_acked_at__isnull=True).values_list("pk", flat=True)
                  [:CHANGES_MAX_CANCELS])
    body: dict = {"jobs": [job_wire(job) for job in jobs]}
    news = bool(jobs or cancel)
    for key, source in hooks.changes_sources().items():
        body[key], fresh = source(grove)
        news = news or fresh
    body["cancel"] = [str(pk) for pk in cancel]
    return body, news


def job_signal(job: GroveJob | None, *, now=None) -> dict | None:
    """The job's coded signal (``rules.unclaimed_signal``: assigned, not claimed within
    ``GROVE_JOB_UNCLAIMED_AFTER_S``, with its Grove's last poll age; or, once the unclaimed policy ended it,
    ``rules.unclaimed_ended_signal``), or None. Reads ``job.grove`` (select it related)."""
    if job is not None and job.status == JobStatus.TIMED_OUT:
        return rules.unclaimed_ended_signal(status=job.status, reason=job.reason, created_at=job.created_at,
                                            finished_at=job.finished_at, grove_slug=job.grove.slug,
                                            grove_last_polled_at=job.grove.last_polled_at,
                                            ready_within_s=settings.GROVE_READY_WITHIN_S)
    if job is None or job.status != JobStatus.ASSIGNED:
        return None
    return rules.unclaimed_signal(status=job.status, created_at=job.created_at, grove_slug=job.grove.slug,
                                  grove_last_polled_at=job.grove.last_polled_at, now=now or timezone.now(),
                                  after_s=settings.GROVE_JOB_UNCLAIMED_AFTER_S)


def unclaimed_count(*, now=None) -> int:
    """Assigned jobs past ``GROVE_JOB_UNCLAIMED_AFTER_S`` (the ``/metrics`` gauge), through the partial index of
    assigned jobs."""
    now = now or timezone.now()
    return GroveJob.objects.filter(
        status=JobStatus.ASSIGNED,
        created_at__lte=now - timedelta(seconds=settings.GROVE_JOB_UNCLAIMED_AFTER_S)).count()
