"""Writes for Grove jobs: create, claim, report, Host-side cancellation and time-out.

Every status change goes through ``job_transition`` (the ``states.JOB`` lifecycle). A job that ends runs
the registered ``hooks.JobEnded`` handlers in the same transaction. Row locks are ``FOR NO KEY UPDATE``:
plain ``FOR UPDATE`` would also block the foreign-key checks other rows' commits run against the job.
"""
from __future__ import annotations

import functools
import logging
import uuid
from datetime import UTC, datetime, timedelta
from functools import partial

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from apps.core.datatoken import data_token_sign
from apps.core.db import db_params, lock_clause, select_columns, sql_from_meta
from apps.core.errors import Conflict, NotFound
from apps.dispatch import hooks, rules, wakeups
from apps.dispatch.models import GroveJob
from apps.dispatch.states import JOB, JOB_LIVE, JOB_TERMINAL
from apps.dispatch.vocabulary import DEFAULT_TIMEOUT_S, JobStatus
from apps.groves import services as grove_services
from apps.groves.models import Grove

log = logging.getLogger(__name__)


def scheduling_grace_s() -> float:
    """How long a job may sit unclaimed/unreported beyond its own timeout before the sweep times it out."""
    return getattr(settings, "PIPELINE_SCHEDULING_GRACE_S", 300)


def job_deadline(*, timeout_s: float, now: datetime) -> datetime:
    """The one deadline rule: the step's own timeout plus the scheduling grace, counted from ``now`` (the
    job's creation, then again from its claim)."""
    return now + timedelta(seconds=timeout_s + scheduling_grace_s())


def wake_after_commit(grove_id) -> None:
    transaction.on_commit(partial(wakeups.grove_wake, grove_id))


def job_transition(*, job: GroveJob, to: str, reason: str = "", by_host: bool = False,
                   now: datetime | None = None, changes: dict | None = None) -> GroveJob:
    """The only way a Grove job changes status (with ``changes`` saved in the same UPDATE); a terminal
    state runs the ``JobEnded`` hooks."""
    now = now or timezone.now()
    changes = dict(changes or {})
    if reason:
        changes["reason"] = reason
    if to == JobStatus.CLAIMED:
        # The step's own timeout counts from the claim; before it, only the scheduling grace applies.
        changes["deadline_at"] = job_deadline(timeout_s=job.payload.get("timeout_s", DEFAULT_TIMEOUT_S), now=now)
    JOB.apply(job, to, reason=reason, now=now, changes=changes)
    if to in JOB_TERMINAL:
        hooks.job_ended(hooks.JobEnded(job=job, status=to, reason=reason, by_host=by_host, at=now))
    return job


def grove_job_create(*, grove: Grove, run_id, node_id: int, change_kind: str, payload: dict, idempotency_key: str,
                     attempt: int, build_id: str | None = None, job_id: uuid.UUID | None = None) -> GroveJob:
    """Assign a job to ``grove``; its long-poll is woken after commit. ``job_id`` may be chosen by the caller
    (it is the accelerator claim's ``job_ref``, made before the row)."""
    now = timezone.now()
    job = GroveJob.objects.create(
        id=job_id or uuid.uuid4(), run_id=run_id, node_id=node_id, grove=grove, build_id=build_id,
        change_kind=change_kind, payload=payload, idempotency_key=idempotency_key, attempt=attempt,
        deadline_at=job_deadline(timeout_s=payload.get("timeout_s", DEFAULT_TIMEOUT_S), now=now),
    )
    wake_after_commit(grove.pk)
    return job


def _grove_job(grove: Grove, job_id, *, lock: bool) -> GroveJob:
    try:
        job_uuid = uuid.UUID(str(job_id))
    except ValueError:
        job = None
    else:
        params = db_params(GroveJob, id=job_uuid, grove_id=grove.pk)
        job = next(iter(GroveJob.objects.raw(_job_sql(lock, connection.vendor), params)), None)
    if job is None:
        raise NotFound("job_not_found", f"Grove {grove.slug} has no job '{job_id}'.")
    return job


@functools.cache
def _job_sql(lock: bool, vendor: str) -> str:
    # Every claim and report reads this row: SQL from the model's metadata (apps.core.db.select_columns).
    return sql_from_meta(f"SELECT {select_columns(GroveJob, alias='j')} FROM {{j}} j "
                         "WHERE j.{j.id} = %s AND j.{j.grove} = %s", j=GroveJob) + (lock_clause() if lock else "")


def grove_job_claim(*, grove: Grove, job_id) -> GroveJob:
    """Exactly one claimer wins: the row lock serialises claimers and only ``assigned`` can be claimed.
    Any claim, won or lost, shows the Grove's executor at work: it keeps the Grove ready (coarsely, before
    the claim's own transaction, so the Grove row is never locked while the job's is)."""
    grove_services.grove_poll_record(grove=grove)
    return _claim(grove, job_id)


@transaction.atomic
def _claim(grove: Grove, job_id) -> GroveJob:
    job = _grove_job(grove, job_id, lock=True)
    if job.status in (JobStatus.CANCELLED, JobStatus.TIMED_OUT):
        raise Conflict("job_cancelled", f"Job {job.id} was {job.status.replace('_', ' ')} by Host; do not run it.")
    if job.status != JobStatus.ASSIGNED:
        raise Conflict("already_claimed", f"Job {job.id} was already claimed.")
    return job_transition(job=job, to=JobStatus.CLAIMED)


DATA_TOKEN_GRACE_S = 300  # past the job's deadline: its outputs upload after the command ends


def grove_job_data_token(*, grove: Grove, job_id) -> dict:
    """A short-lived job data token (``apps.core.datatoken``) for a job this Grove has claimed: it reads the
    job's blob inputs and writes under its run's node, until the job's deadline (plus a grace for the
    upload). A job not claimed, or already ended, gets none."""
    job = _grove_job(grove, job_id, lock=False)
    if job.status not in (JobStatus.CLAIMED, JobStatus.RUNNING):
        raise Conflict("job_not_live", f"Job {job.id} is {job.status}; data tokens are for claimed, live jobs.")
    payload = job.payload or {}
    expires_at = job.deadline_at.timestamp() + DATA_TOKEN_GRACE_S
    token = data_token_sign(grove_id=str(grove.pk), job_id=str(job.id), run_id=str(job.run_id),
                            node=str(payload.get("node", "")),
                            inputs=[item["digest"] for item in payload.get("inputs", [])
                                    if item.get("storage_kind") == "cas"],
                            expires_at=expires_at)
    return {"token": token, "expires_at": datetime.fromtimestamp(expires_at, tz=UTC).isoformat()}


def grove_job_report(*, grove: Grove, job_id, body: dict) -> dict:
    """Progress and terminal reports. A repeated terminal report is a no-op; a report for a job Host
    already ended (cancelled, timed out) is stored as ``late_report`` and never revives the node."""
    data = rules.job_report(body)
    now = timezone.now()
    with transaction.atomic():
        job = _grove_job(grove, job_id, lock=True)
        fields: list[str] = []
        if job.cancel_requested_at and not job.cancel_acked_at:
            job.cancel_acked_at = now  # any report after a cancellation acknowledges it
            fields.append("cancel_acked_at")
        if job.status in JOB_TERMINAL:
            if job.cancel_requested_at and job.late_report is None:
                job.late_report = {**data, "received_at": now.isoformat()}
                fields.append("late_report")
            if fields:
                job.save(update_fields=fields)
            return {"job_id": str(job.id), "status": job.status, "accepted": False}
        if job.status == JobStatus.ASSIGNED:
            raise Conflict("job_not_claimed", f"Claim job {job.id} before reporting on it.")
        if data["log_tail"]:
            job.log_tail = data["log_tail"][-settings.GROVE_LOG_TAIL_LINES:]
            fields.append("log_tail")
        if data["state"] == "running":
            if fields:
                job.save(update_fields=fields)
            if job.status == JobStatus.CLAIMED:
                job_transition(job=job, to=JobStatus.RUNNING, now=now)
            return {"job_id": str(job.id), "status": job.status, "accepted": True}
        changes = {name: getattr(job, name) for name in fields}
        changes.update(exit_code=data.get("exit_code"), outputs=data["outputs"])
        job_transition(job=job, to=data["state"], reason=data.get("reason", ""), now=now, changes=changes)
    return {"job_id": str(job.id), "status": job.status, "accepted": True}


def job_end_by_host(*, job: GroveJob, to: str, reason: str, now: datetime) -> None:
    """Host ends a live job (the caller holds its row lock): the Grove is told through ``changes.cancel``
    unless it never claimed it."""
    changes = {"cancel_requested_at": now}
    if job.claimed_at is None:
        changes["cancel_acked_at"] = now  # never handed out: nothing for the Grove to stop
    job_transition(job=job, to=to, reason=reason, by_host=True, now=now, changes=changes)
    wake_after_commit(job.grove_id)


def grove_job_time_out(*, job_id, now: datetime | None = None) -> bool:
    """Time out one live job past its deadline (step timeout + scheduling grace). A later report from the
    Grove is stored and ignored."""
    now = now or timezone.now()
    with transaction.atomic():
        job = GroveJob.objects.select_for_update(skip_locked=True, no_key=True).filter(pk=job_id).first()
        if job is None or job.status not in JOB_LIVE or job.deadline_at > now:
            return False
        job_end_by_host(job=job, to=JobStatus.TIMED_OUT, reason="deadline_exceeded", now=now)
    log.warning("grove job timed out", extra={"job": str(job.id), "key": job.idempotency_key})
    return True


def grove_jobs_time_out_overdue(*, now: datetime, limit: int) -> int:
    """The sweep's part for jobs: time out live jobs past their deadline (through a partial index)."""
    overdue = GroveJob.objects.filter(status__in=JOB_LIVE, deadline_at__lte=now).values_list("pk", flat=True)
    return sum(grove_job_time_out(job_id=job_id, now=now) for job_id in list(overdue[:limit]))


def grove_job_end_unclaimed(*, job_id, now: datetime | None = None) -> bool:
    """The unclaimed policy (docs/decisions.md "Unclaimed jobs"): a job still ``assigned`` past
    ``GROVE_JOB_UNCLAIMED_AFTER_S`` on a Grove that is not ready (no poll or claim within
    ``GROVE_READY_WITHIN_S``) ends ``timed_out`` with the reason ``unclaimed`` at once, instead of waiting out
    its deadline: nothing there would run it. The owner's hooks end (or retry) its node as for any timeout."""
    now = now or timezone.now()
    with transaction.atomic():
        job = (GroveJob.objects.select_for_update(skip_locked=True, no_key=True).select_related("grove")
               .filter(pk=job_id).first())
        if job is None or job.status != JobStatus.ASSIGNED or not _unclaimed_and_unready(job, now):
            return False
        signal = rules.unclaimed_signal(status=job.status, created_at=job.created_at, grove_slug=job.grove.slug,
                                        grove_last_polled_at=job.grove.last_polled_at, now=now,
                                        after_s=settings.GROVE_JOB_UNCLAIMED_AFTER_S)
        job_end_by_host(job=job, to=JobStatus.TIMED_OUT, reason=rules.UNCLAIMED, now=now)
    log.warning("grove job unclaimed; ended", extra={"job": str(job.id), "key": job.idempotency_key,
                                                     "grove": job.grove.slug, "detail": signal["detail"]})
    return True


def _unclaimed_and_unready(job: GroveJob, now: datetime) -> bool:
    polled = job.grove.last_polled_at
    return (now - job.created_at >= timedelta(seconds=settings.GROVE_JOB_UNCLAIMED_AFTER_S)
            and (polled is None or now - polled > timedelta(seconds=settings.GROVE_READY_WITHIN_S)))


def grove_jobs_end_unclaimed(*, now: datetime, limit: int) -> int:
    """The sweep's part for the unclaimed policy: assigned jobs past the threshold whose Grove is not ready
    (through the partial index of assigned jobs)."""
    due = (GroveJob.objects.filter(status=JobStatus.ASSIGNED,
                                   created_at__lte=now - timedelta(seconds=settings.GROVE_JOB_UNCLAIMED_AFTER_S))
           .filter(Q(grove__last_polled_at__isnull=True)
                   | Q(grove__last_polled_at__lt=now - timedelta(seconds=settings.GROVE_READY_WITHIN_S)))
           .values_list("pk", flat=True))
    return sum(grove_job_end_unclaimed(job_id=job_id, now=now) for job_id in list(due[:limit]))


def grove_job_cancel(*, job_id, reason: str = "cancelled") -> bool:
    """Cancel one live job (e.g. the accelerator budget task); its owner hears of it through the hooks, and
    the Grove on its next poll."""
    now = timezone.now()
    with transaction.atomic():
        try:
            job = GroveJob.objects.select_for_update(no_key=True).filter(pk=job_id).first()
        except (ValueError, TypeError, ValidationError):
            job = None
        if job is None or job.status not in JOB_LIVE:
            return False
        job_end_by_host(job=job, to=JobStatus.CANCELLED, reason=reason, now=now)
    return True
