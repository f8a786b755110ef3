"""The admission queue: nodes that could fit an eligible Grove, not now, wait here (Kueue's admission,
Nomad's blocked evaluations) and are admitted when capacity frees. docs/decisions.md "Admission queue".

* **Enter** — ``pipeline_node_execute`` gets ``WaitingForCapacity`` from placement: the node goes
  ``queued -> waiting`` (reason ``waiting_for_capacity``, the verdicts kept) and is filed under each Grove it
  could fit (``PipelineNodeWaitGrove``, ordered by the wait's id: submission order). Its wait is bounded by
  its timeout (``node_wait_expire``, a Celery countdown, with the sweep as the safety net).
* **Wake** — a freed unit on Grove G (a job ended there, so its accelerator claim was released; a heartbeat
  whose free counts moved) sends ``pipelines.admission_wake(G)`` after commit, only when something waits
  for G. ``admission_wake`` reads G's capacity now and walks G's line oldest first, at most
  ``WAKE_LOOKAHEAD`` entries through the ``(grove_id, seq)`` index, admitting every entry that fits what is
  left (``admission.consume``): its cost follows what it admits, never the length of the queue.
* **Admit** — ``waiting -> queued`` and ``node_execute`` after commit: dispatch places it for real. A node
  that loses the unit to a race waits again *in its old place* (its wait row, and so its id, is kept until
  it is dispatched or ends). Wake-ups of one Grove are serialised, and an admitted node not yet dispatched
  still counts against the Grove, so one freed unit is never handed out twice.
"""
from __future__ import annotations

import logging
import zlib
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from apps.core.db import sql_from_meta
from apps.core.errors import ForestError
from apps.dispatch import hooks as dispatch_hooks
from apps.pipelines.models import PipelineAdmissionWake, PipelineNode, PipelineNodeWait, PipelineNodeWaitGrove
from apps.pipelines.services.outbox import resume_resend_after_s, send_after_commit
from apps.pipelines.services.runs import run_advance, run_and_node_locked
from apps.pipelines.services.transitions import node_transition
from apps.pipelines.vocabulary import NodeStatus, Task
from apps.placement import admission
from apps.placement.decide import policy_for
from apps.placement.requirements import ExecutionRequirement
from apps.placement.services import placement_capacity
from apps.placement.vocabulary import WAITING_FOR_CAPACITY

log = logging.getLogger(__name__)

# Entries of one Grove's line a wake-up looks at (oldest first); the rest wait for the next event or sweep.
WAKE_LOOKAHEAD = 32
# A wait's expiry is a Celery countdown; past the Redis visibility timeout (1 h) the sweep expires it.
MAX_EXPIRY_COUNTDOWN_S = 3000
WAIT_TIMED_OUT = "waiting_for_capacity_timeout"
# A requested wake-up not started this long after is taken as lost, and sent again.
WAKE_RESEND_AFTER_S = 10

_WAKE_SQL = ("INSERT INTO {w} ({w.grove_id}, {w.requested_at}) VALUES (%s, %s) ON CONFLICT ({w.grove_id}) "
             "DO UPDATE SET {w.requested_at} = excluded.{w.requested_at} WHERE {w}.{w.requested_at} < %s")


def request_wake(grove_id) -> bool:
    """Ask for a wake-up of this Grove's line after commit, coalesced with one already requested and not
    yet started (many events, one wake-up). True when this call sent it."""
    now = timezone.now()
    field = PipelineAdmissionWake._meta.get_field("grove_id")
    with connection.cursor() as cursor:
        cursor.execute(sql_from_meta(_WAKE_SQL, w=PipelineAdmissionWake),
                       [field.get_db_prep_value(str(grove_id), connection), now,
                        now - timedelta(seconds=WAKE_RESEND_AFTER_S)])
        sent = cursor.rowcount == 1
    if sent:
        send_after_commit(Task.ADMISSION_WAKE, str(grove_id))
    return sent


def _waiting_code(verdicts: list[dict]) -> str:
    """What the node waits on: the first candidate's "later" code (resources or accelerators)."""
    for verdict in verdicts:
        fit = verdict.get("fit") or {}
        if fit.get("state") == admission.FitState.LATER:
            return fit["code"]
    return WAITING_FOR_CAPACITY


def _compact(verdicts: list[dict]) -> list[dict]:
    return [{"grove_id": v.get("grove_id"), "grove_slug": v.get("grove_slug"), **(v.get("fit") or {})}
            for v in verdicts if v.get("fit")]


def node_wait(*, node: PipelineNode, error: ForestError) -> PipelineNodeWait:
    """File a queued node in the admission queue (callers hold its run and node locks)."""
    groves = sorted({str(grove_id) for grove_id in error.extra.get("groves", [])})
    verdicts = _compact(error.extra.get("candidates", []))
    wait = PipelineNodeWait.objects.filter(node=node).first()
    fields = {"code": _waiting_code(error.extra.get("candidates", [])), "detail": error.detail[:2000],
              "verdicts": verdicts, "admitted_grove_id": None, "admitted_at": None}
    new = wait is None
    if not new:
        handed_back(wait)
    if new:
        wait = PipelineNodeWait.objects.create(
            node=node, deadline_at=timezone.now() + timedelta(seconds=node.timeout_s), **fields)
        send_after_commit(Task.NODE_WAIT_EXPIRE, node.pk, countdown=min(node.timeout_s, MAX_EXPIRY_COUNTDOWN_S))
    else:
        for key, value in fields.items():
            setattr(wait, key, value)
        wait.save(update_fields=list(fields))
    filed = {str(grove_id) for grove_id in wait.groves.values_list("grove_id", flat=True)}
    if filed - set(groves):
        wait.groves.exclude(grove_id__in=groves).delete()
    PipelineNodeWaitGrove.objects.bulk_create([PipelineNodeWaitGrove(wait=wait, grove_id=grove_id, seq=wait.pk)
                                               for grove_id in groves if grove_id not in filed])
    node_transition(node=node, to=NodeStatus.WAITING, reason=WAITING_FOR_CAPACITY, detail=error.detail)
    # Capacity freed between the decision and this commit woke nobody (the wait was not visible yet, or this
    # node was admitted and so passed over): look once more after commit. Requests coalesce, and a wake-up
    # that admits this node again means the unit is free, so this cannot spin.
    for grove_id in groves:
        request_wake(grove_id)
    log.info("node waiting for capacity", extra={"node": str(node), "code": wait.code, "groves": len(groves)})
    return wait


def handed_back(wait: PipelineNodeWait | None, *, used: str | None = None) -> None:
    """An admitted node that did not take the unit it was admitted for (placed on another Grove, waiting
    again, failed) hands it back: that Grove's line is woken, else the freed unit would wake nobody."""
    if wait is not None and wait.admitted_grove_id is not None and str(wait.admitted_grove_id) != str(used):
        request_wake(wait.admitted_grove_id)


def _serialise(grove_id: str) -> None:
    """One wake-up of a Grove at a time (PostgreSQL transaction advisory lock; SQLite has one writer)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [0x0F0E, zlib.crc32(grove_id.encode()) - 2**31])


def admission_wake(*, grove_id: str) -> list[int]:
    """Admit waiting nodes that fit Grove ``grove_id`` now, in submission order; returns their node ids."""
    grove_id = str(grove_id)
    admitted: list[int] = []
    # Started: an event committed from here on asks for a new wake-up (this one may read capacity too early).
    PipelineAdmissionWake.objects.filter(grove_id=grove_id).delete()
    with transaction.atomic():
        _serialise(grove_id)
        capacity = placement_capacity(grove_id=grove_id)
        if capacity is None:
            return admitted
        facts, units, claimed = capacity
        devices = list(facts.devices)

        def verdict(requirement: dict) -> tuple[admission.Needs, admission.Fit]:
            parsed = ExecutionRequirement.from_stored(requirement)
            needs = admission.Needs.of(parsed)
            # The unit the decision would take (the policy's), so the simulated admissions consume what
            # dispatch will.
            return needs, admission.fit(needs, units=units, devices=devices, claimed=claimed, grove=facts.slug,
                                        spread=policy_for(parsed).spreads_units)

        now = timezone.now()
        # Admitted here, not yet dispatched: what they will take is not free (their claims do not exist yet).
        pending = (PipelineNodeWait.objects.filter(admitted_grove_id=grove_id,
                                                   admitted_at__gte=now - timedelta(seconds=resume_resend_after_s()))
                   .values_list("node__requirement", flat=True))
        for requirement in pending:
            needs, fit = verdict(requirement)
            if fit.now:
                units = admission.consume(units, claimed, needs, fit)
        line = list(PipelineNodeWaitGrove.objects.filter(grove_id=grove_id, wait__admitted_grove_id__isnull=True)
                    .order_by("seq").values_list("wait__node_id", flat=True)[:WAKE_LOOKAHEAD])
        for node_id in line:
            # Lock order: run, then node (SKIP LOCKED: a node being cancelled or expired is passed over).
            node = (PipelineNode.objects.select_for_update(no_key=True, skip_locked=True, of=("self", "run"))
                    .select_related("run").filter(pk=node_id, status=NodeStatus.WAITING).first())
            if node is None:
                continue
            needs, fit = verdict(node.requirement)
            if fit.state == admission.FitState.LATER:
                continue
            if fit.now:
                units = admission.consume(units, claimed, needs, fit)
            # Fits now; or never fits here any more (the Grove shrank): dispatch decides it afresh either way.
            PipelineNodeWait.objects.filter(node=node).update(admitted_grove_id=grove_id, admitted_at=now)
            node_transition(node=node, to=NodeStatus.QUEUED, reason="admitted",
                            detail=f"Capacity on Grove {facts.slug}: admitted from the queue.")
            send_after_commit(Task.NODE_EXECUTE, node.pk)
            admitted.append(node.pk)
    if admitted:
        log.info("admitted from the queue", extra={"grove": facts.slug, "nodes": len(admitted)})
    return admitted


def node_wait_expire(*, node_id: int, now: datetime | None = None) -> bool:
    """The bounded wait: a node still waiting at its deadline ends ``timed_out``. True when it did."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = run_and_node_locked(node_id)
        if locked is None:
            return False
        run, node = locked
        wait = PipelineNodeWait.objects.filter(node=node).first()
        if node.status != NodeStatus.WAITING or wait is None:
            return False
        early_s = (wait.deadline_at - now).total_seconds()
        if early_s > 0:  # a countdown capped below the deadline, or a re-send: come back then
            send_after_commit(Task.NODE_WAIT_EXPIRE, node.pk, countdown=min(early_s, MAX_EXPIRY_COUNTDOWN_S))
            return False
        node_transition(node=node, to=NodeStatus.TIMED_OUT, reason=WAIT_TIMED_OUT,
                        detail=f"Waited {node.timeout_s} s for capacity without being admitted: {wait.detail}")
        run_advance(run)
    return True


def admission_sweep(*, now: datetime, limit: int) -> dict:
    """The safety net (beat): expire overdue waits, and wake every Grove something waits for (a lost
    wake-up message, a capacity change no event announced)."""
    overdue = list(PipelineNodeWait.objects.filter(deadline_at__lte=now, node__status=NodeStatus.WAITING)
                   .order_by("deadline_at").values_list("node_id", flat=True)[:limit])
    expired = sum(node_wait_expire(node_id=node_id, now=now) for node_id in overdue)
    groves = list(PipelineNodeWaitGrove.objects.order_by().values_list("grove_id", flat=True).distinct()[:limit])
    for grove_id in groves:
        request_wake(grove_id)
    return {"wait_expired": expired, "groves_woken": len(groves)}


def wake_any_waiting(grove_ids: list) -> int:
    """Request a wake-up for each of these Groves that anything waits for (one indexed query for the
    batch); the number requested."""
    waited = set(PipelineNodeWaitGrove.objects.filter(grove_id__in=[g for g in grove_ids if g is not None])
                 .order_by().values_list("grove_id", flat=True).distinct())
    return sum(bool(request_wake(grove_id)) for grove_id in waited)


def wake_on_job_ended(event: dispatch_hooks.JobEnded) -> None:
    """A job ended (in its transaction): its Grove's unit, and its accelerator claim, are freed."""
    wake_any_waiting([event.job.grove_id])
