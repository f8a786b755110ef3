"""Writes for pipelines: runs, the planner, GRAPH_DEDUP seeding, the exec driver, Grove job claim/report,
detached and in-place waiting, the ``pipeline.node_resume`` outbox, the recurring sweep and cancellation.

Lock order, everywhere a node changes: the run row first, then node rows, then job rows. The report
handler locks only its job row and writes an outbox row, so it never waits on a run. Row locks are
``FOR NO KEY UPDATE`` (we never change a key): plain ``FOR UPDATE`` would also block the foreign-key
checks (``FOR KEY SHARE``) that PostgreSQL runs at COMMIT for rows referencing the locked one, which
makes a report's commit wait on a run lock and can deadlock against cancellation.
"""
from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from apps.artifacts import services as artifact_services
from apps.artifacts.choices import CheckVerdict
from apps.core.errors import Conflict, ForestError, NotFound, ValidationFailed
from apps.flags.selectors import is_enabled
from apps.pipelines import rules, wakeups
from apps.pipelines.choices import JobStatus, NodeKind, NodeStatus, OutboxKind, RunStatus, WaitMode
from apps.pipelines.models import (
    GroveJob,
    PipelineGraph,
    PipelineNode,
    PipelineNodeEvent,
    PipelineOutbox,
    PipelineRun,
)

log = logging.getLogger(__name__)

DETACHED_WAIT_FLAG = "host.pipeline_detached_wait"
ACCELERATOR_BUDGET_EXHAUSTED = "accelerator_budget_exhausted"


def _setting(name: str, default: float) -> float:
    return getattr(settings, name, default)


def scheduling_grace_s() -> float:
    """How long a job may sit unclaimed/unreported beyond its own timeout before the sweep times it out."""
    return _setting("PIPELINE_SCHEDULING_GRACE_S", 300)


def resume_resend_after_s() -> float:
    """How long an outbox row may stay undone before the sweep re-sends it (the broker may have lost it)."""
    return _setting("PIPELINE_RESUME_RESEND_AFTER_S", 30)


# --- sending after commit -------------------------------------------------------------------------

def _send(task_name: str, *args) -> None:
    """Hand a task to the broker; a failure is logged and left to the sweep (the database holds the truth)."""
    from apps.pipelines import tasks

    try:
        getattr(tasks, task_name).delay(*args)
    except Exception as exc:
        log.warning("task not sent; the sweep will re-send it", extra={"task": task_name, "error": str(exc)})


def _after_commit(task_name: str, *args) -> None:
    transaction.on_commit(partial(_send, task_name, *args))


def _wake_after_commit(grove_id) -> None:
    transaction.on_commit(partial(wakeups.grove_wake, grove_id))


# --- transitions (one function per state machine) -------------------------------------------------

def node_transition(*, node: PipelineNode, to: str, reason: str = "", detail: str = "") -> PipelineNode:
    """The only way a node changes status: checks the allowed from-states and records an event."""
    rules.check_transition("pipeline node", rules.NODE_TRANSITIONS, node.status, to)
    previous = node.status
    node.status = to
    fields = ["status"]
    if reason:
        node.reason, node.detail = reason, detail[:2000]
        fields += ["reason", "detail"]
    if to == NodeStatus.QUEUED:
        node.queued_at = timezone.now()
        fields.append("queued_at")
    if to in rules.NODE_TERMINAL:
        node.finished_at = timezone.now()
        node.awaiting_job_id = None
        fields += ["finished_at", "awaiting_job_id"]
    node.save(update_fields=fields)
    PipelineNodeEvent.objects.create(node=node, from_status=previous, to_status=to, reason=reason)
    return node


def job_transition(*, job: GroveJob, to: str, reason: str = "") -> GroveJob:
    """The only way a Grove job changes status. Terminal states release its accelerator claim."""
    rules.check_transition("Grove job", rules.JOB_TRANSITIONS, job.status, to)
    now = timezone.now()
    job.status = to
    fields = ["status"]
    if reason:
        job.reason = reason
        fields.append("reason")
    if to == JobStatus.CLAIMED:
        job.claimed_at = now
        # The step's own timeout counts from the claim; before it, only the scheduling grace applies.
        job.deadline_at = now + timedelta(seconds=job.payload.get("timeout_s", rules.DEFAULT_TIMEOUT_S)
                                          + scheduling_grace_s())
        fields += ["claimed_at", "deadline_at"]
    if to in rules.JOB_TERMINAL:
        job.finished_at = now
        fields.append("finished_at")
        # The budget task revokes (and accrues) the claim itself when it cancels a job; releasing here too
        # would accrue the same seconds twice.
        if job.payload.get("accelerators") and reason != ACCELERATOR_BUDGET_EXHAUSTED:
            from apps.accelerators.services import accelerator_release

            accelerator_release(job_ref=str(job.id))
    job.save(update_fields=fields)
    return job


def run_transition(*, run: PipelineRun, to: str, reason: str = "") -> PipelineRun:
    rules.check_transition("pipeline run", rules.RUN_TRANSITIONS, run.status, to)
    run.status = to
    fields = ["status"]
    if reason:
        run.reason = reason
        fields.append("reason")
    if to in rules.RUN_TERMINAL:
        run.finished_at = timezone.now()
        fields.append("finished_at")
    run.save(update_fields=fields)
    log.info("pipeline run %s", to, extra={"run": str(run.id), "reason": reason})
    return run


# --- planning -------------------------------------------------------------------------------------

@dataclass
class PlannedNode:
    node: dict
    position: int
    digest: str
    requirement: dict
    warnings: list = field(default_factory=list)


def pipeline_plan(*, canonical: dict, run_kind: str, environment: str = "", team: str = "") -> list[PlannedNode]:
    """Order the nodes and derive each one's requirement through placement, with the plan-time
    never-placeable check: with ``host.deploy.forest_compatibility`` on it raises ``never_placeable``;
    off, the reasons are kept on the node and logged as *would refuse*."""
    from apps.placement.derivation import requirement_for_node
    from apps.placement.services import placement_plan_check

    if run_kind not in rules.RUN_KINDS:
        raise ValidationFailed("invalid_choice", f"Run kind must be one of: {', '.join(rules.RUN_KINDS)}.",
                               field="kind")
    by_id = {n["id"]: n for n in canonical["nodes"]}
    digests = rules.node_digests(canonical)
    planned = []
    for position, node_id in enumerate(rules.topological_order(canonical)):
        node = by_id[node_id]
        try:
            requirement = requirement_for_node(node, run_kind=run_kind)
        except ValidationFailed as exc:
            exc.field = f"graph.nodes[{node_id}].{exc.field}" if exc.field else f"graph.nodes[{node_id}]"
            raise
        check = placement_plan_check(requirement=requirement, environment=environment or None, team=team or None)
        warnings = list(check.reasons) if check.never_placeable else []
        if warnings:
            log.warning("node would be refused at plan time: never placeable",
                        extra={"node": node_id, "reasons": warnings})
        planned.append(PlannedNode(node=node, position=position, digest=digests[node_id],
                                   requirement=requirement.to_json(), warnings=warnings))
    return planned


def _dedup_source(node: dict, digest: str) -> tuple[PipelineNode | None, str]:
    """GRAPH_DEDUP, decided once at seed time: the earlier successful node to inherit from, and why."""
    exclusion = rules.dedup_exclusion(node)
    if exclusion:
        return None, f"excluded:{exclusion}"
    source = (PipelineNode.objects.filter(node_digest=digest, status=NodeStatus.SUCCEEDED)
              .select_related("run").order_by("-finished_at").first())
    if source is None:
        return None, "no_earlier_success"
    return source, "seeded"


@transaction.atomic
def pipeline_run_create(*, graph: dict, kind: str, environment: str = "", team: str = "",
                        build_id: str | None = None, created_by=None) -> PipelineRun:
    """Validate, plan and seed a run; nodes whose needs are met are queued for the exec driver."""
    canonical = rules.graph_validate(graph)
    planned = pipeline_plan(canonical=canonical, run_kind=kind, environment=environment, team=team)
    digest = rules.graph_digest(canonical)
    graph_row, _ = PipelineGraph.objects.get_or_create(digest=digest, defaults={"canonical": canonical})
    run = PipelineRun.objects.create(graph=graph_row, kind=kind, environment=environment, team=team,
                                     build_id=build_id or None,
                                     created_by=created_by if getattr(created_by, "pk", None) else None)
    now = timezone.now()
    for item in planned:
        node = item.node
        source, decision = _dedup_source(node, item.digest)
        row = PipelineNode.objects.create(
            run=run, node_id=node["id"], kind=node["kind"], runtime=node.get("runtime", ""), spec=node,
            node_digest=item.digest, position=item.position, needs=node["needs"], reuse=node["reuse"],
            trust=node["trust"], timeout_s=node["timeout_s"], requirement=item.requirement,
            plan_warnings=item.warnings, dedup_decision=decision,
        )
        if source is not None:
            row.status = NodeStatus.SUCCEEDED
            row.seeded_from_run_id = source.seeded_from_run_id or source.run_id
            row.exit_code, row.outputs, row.finished_at = source.exit_code, source.outputs, now
            row.reason = "graph_dedup"
            row.save(update_fields=["status", "seeded_from_run", "exit_code", "outputs", "finished_at", "reason"])
            PipelineNodeEvent.objects.create(node=row, from_status="", to_status=NodeStatus.SUCCEEDED,
                                             reason="graph_dedup")
        elif node.get("grove"):
            _pin(row)
    run_transition(run=run, to=RunStatus.RUNNING)
    _advance(run)
    return run


def _pin(node: PipelineNode) -> None:
    """An explicit Grove pin is validated and stored as the node's placement before the run starts."""
    from apps.placement.requirements import ExecutionRequirement
    from apps.placement.services import placement_pin

    placement_pin(subject_type="pipeline_node", subject_id=str(node.pk),
                  requirement=ExecutionRequirement.from_json(node.requirement), grove=node.spec["grove"])


def _advance(run: PipelineRun) -> list[str]:
    """Queue nodes whose needs succeeded, skip those whose needs cannot, and finish the run when all
    nodes are terminal. Callers hold the run's row lock."""
    if run.status in rules.RUN_TERMINAL:
        return []
    nodes = list(run.nodes.order_by("position"))
    status = {n.node_id: n.status for n in nodes}
    queued = []
    for node in nodes:  # planner order: a skip cascades in one pass
        if node.status != NodeStatus.PENDING:
            continue
        needs = [status[n] for n in node.needs]
        if any(s in rules.NODE_TERMINAL and s != NodeStatus.SUCCEEDED for s in needs):
            node_transition(node=node, to=NodeStatus.SKIPPED, reason="need_not_succeeded")
        elif all(s == NodeStatus.SUCCEEDED for s in needs):
            node_transition(node=node, to=NodeStatus.QUEUED)
            queued.append(node.node_id)
            _after_commit("node_execute", node.pk)
        status[node.node_id] = node.status
    outcome = rules.run_outcome(list(status.values()))
    if outcome is not None:
        run_transition(run=run, to=outcome)
    return queued


# --- the exec driver ------------------------------------------------------------------------------

def _wait_mode(node: PipelineNode, run: PipelineRun) -> tuple[str, str]:
    """(mode, why): detached only with the flag on for the run's environment, the environment listed in
    PIPELINE_DETACHED_WAIT_ENVIRONMENT_IDS, and an eligible step."""
    if not is_enabled(DETACHED_WAIT_FLAG, environment=run.environment or None, team=run.team or None):
        return WaitMode.IN_PLACE, "flag_off"
    if run.environment not in settings.PIPELINE_DETACHED_WAIT_ENVIRONMENT_IDS:
        return WaitMode.IN_PLACE, "environment_not_listed"
    exclusion = rules.detached_wait_exclusion(node.spec)
    if exclusion:
        return WaitMode.IN_PLACE, exclusion
    return WaitMode.DETACHED, "eligible"


def _payload(node: PipelineNode, run: PipelineRun, selected_platform: str) -> dict:
    spec = node.spec
    payload = {"command": spec.get("command", []), "env": spec.get("env", {}), "timeout_s": spec["timeout_s"],
               "run_id": str(run.id), "node": node.node_id, "kind": node.kind,
               "resources": spec["resources"], "platform": selected_platform}
    if spec.get("image"):
        payload["image"] = spec["image"]
    if spec.get("accelerators"):
        payload["accelerators"] = spec["accelerators"]
    return payload


def pipeline_node_execute(*, node_id: int) -> str | None:
    """Place one queued node and create its Grove job on the placed Grove. Returns the wait mode, or None
    when there was nothing to do (already dispatched, cancelled, or refused). Safe to run twice."""
    from apps.placement.requirements import ExecutionRequirement
    from apps.placement.services import place_execution

    with transaction.atomic():
        run_id = PipelineNode.objects.filter(pk=node_id).values_list("run_id", flat=True).first()
        if run_id is None:
            return None
        run = PipelineRun.objects.select_for_update(no_key=True).get(pk=run_id)
        node = PipelineNode.objects.select_for_update(no_key=True).get(pk=node_id)
        if node.status != NodeStatus.QUEUED or run.status in rules.RUN_TERMINAL:
            return None
        requirement = ExecutionRequirement.from_json(node.requirement)
        key = f"{run.id}:{node.node_id}:{node.attempt}"
        job_id = uuid.uuid4()  # known before the job row exists: it is the accelerator claim's job_ref
        try:
            with transaction.atomic():
                placed = place_execution(subject_type="pipeline_node", subject_id=str(node.pk),
                                         requirement=requirement, target=node.spec.get("grove"),
                                         team=run.team or None, environment=run.environment or None)
                if requirement.accelerators:
                    from apps.accelerators.services import accelerator_claim

                    accelerator_claim(grove=placed.grove, requirement=requirement, job_ref=str(job_id),
                                      team=run.team or None)
        except ForestError as exc:
            log.warning("node not dispatched", extra={"node": str(node), "code": exc.code})
            node_transition(node=node, to=NodeStatus.FAILED, reason=exc.code, detail=exc.detail)
            _advance(run)
            return None
        payload = _payload(node, run, placed.selected_platform)
        deadline = timezone.now() + timedelta(seconds=node.timeout_s + scheduling_grace_s())
        job = GroveJob.objects.create(
            id=job_id, run=run, node=node, grove=placed.grove, build_id=run.build_id,
            change_kind=requirement.compatibility.change_kind, payload=payload, idempotency_key=key,
            attempt=node.attempt, deadline_at=deadline,
        )
        mode, why = _wait_mode(node, run)
        node.current_job, node.grove, node.wait_mode = job, placed.grove, mode
        node.awaiting_job_id = job.id if mode == WaitMode.DETACHED else None
        node.save(update_fields=["current_job", "grove", "wait_mode", "awaiting_job_id"])
        node_transition(node=node, to=NodeStatus.AWAITING, reason=f"wait_{mode}:{why}")
        _wake_after_commit(placed.grove.pk)
    return mode


def pipeline_node_wait_in_place(*, node_id: int, poll_s: float | None = None, max_wait_s: float | None = None) -> bool:
    """Hold the runner while the node's job runs, then run the same tail a resume would.

    The terminal report also writes a resume outbox row, so if this waiter dies the node still finishes;
    whichever arrives first runs the tail, the other finds nothing to do. True when this call ran it.
    """
    poll_s = poll_s if poll_s is not None else _setting("PIPELINE_IN_PLACE_POLL_S", 0.5)
    started = time.monotonic()
    while True:
        row = (PipelineNode.objects.filter(pk=node_id)
               .values("status", "current_job__status", "current_job__deadline_at", "current_job_id").first())
        if row is None or row["status"] != NodeStatus.AWAITING:
            return False
        if row["current_job__status"] in rules.JOB_TERMINAL:
            return pipeline_node_resume(node_id=node_id)
        if row["current_job__deadline_at"] and row["current_job__deadline_at"] <= timezone.now():
            grove_job_time_out(job_id=row["current_job_id"])
            continue
        if max_wait_s is not None and time.monotonic() - started > max_wait_s:
            return False
        time.sleep(poll_s)


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
        if job is None or job.status not in rules.JOB_TERMINAL:
            return False
        node.exit_code, node.outputs = job.exit_code, job.outputs
        node.save(update_fields=["exit_code", "outputs"])
        outcome, reason, detail = rules.node_outcome_for_job(job.status), job.reason or f"job_{job.status}", ""
        if node.kind == NodeKind.BUILD_IMAGE and outcome == NodeStatus.SUCCEEDED:
            # The pushed image becomes an oci_registry artifact with its config platform; under
            # host.deploy.forest_compatibility a platform that disagrees with the node's target fails it.
            check = artifact_services.build_image_output_record(
                outputs=job.outputs, run_id=str(run.id), node_id=node.node_id,
                target_platforms=node.requirement["compatibility"]["platform"]["allowed"]
                or [job.payload.get("platform")], environment=run.environment or None, team=run.team or None)
            if check is not None and check.verdict == CheckVerdict.REFUSED:
                outcome, reason, detail = NodeStatus.FAILED, check.code, check.detail
        node_transition(node=node, to=outcome, reason=reason, detail=detail)
        pending.update(done_at=timezone.now())
        _advance(run)
    return True


# --- Grove wire: claim and report ----------------------------------------------------------------

def _grove_job(grove, job_id, *, lock: bool) -> GroveJob:
    qs = GroveJob.objects.filter(grove=grove)
    if lock:
        qs = qs.select_for_update(no_key=True)
    try:
        job = qs.filter(pk=job_id).first()
    except (ValueError, TypeError, ValidationError):
        job = None
    if job is None:
        raise NotFound("job_not_found", f"Grove {grove.slug} has no job '{job_id}'.")
    return job


@transaction.atomic
def grove_job_claim(*, grove, job_id) -> GroveJob:
    """Exactly one claimer wins: the row lock serialises claimers and only ``assigned`` can be claimed."""
    job = _grove_job(grove, job_id, lock=True)
    if job.status in (JobStatus.CANCELLED, JobStatus.TIMED_OUT):
        raise Conflict("job_cancelled", f"Job {job.id} was {job.status.replace('_', ' ')} by Host; do not run it.")
    if job.status != JobStatus.ASSIGNED:
        raise Conflict("already_claimed", f"Job {job.id} was already claimed.")
    return job_transition(job=job, to=JobStatus.CLAIMED)


def _write_resume(job: GroveJob, *, now: datetime) -> PipelineOutbox | None:
    """In the transaction that makes the job terminal: a resume row for the node awaiting it, if any."""
    awaited = PipelineNode.objects.filter(pk=job.node_id, status=NodeStatus.AWAITING, current_job_id=job.id).exists()
    if not awaited:
        return None
    row = PipelineOutbox.objects.create(kind=OutboxKind.NODE_RESUME, node_id=job.node_id, job=job,
                                        next_send_at=now + timedelta(seconds=resume_resend_after_s()), sends=1)
    _after_commit("node_resume", job.node_id)
    return row


def grove_job_report(*, grove, job_id, body: dict) -> dict:
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
        if job.status in rules.JOB_TERMINAL:
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
        if fields:
            job.save(update_fields=fields)
        if data["state"] == "running":
            if job.status == JobStatus.CLAIMED:
                job_transition(job=job, to=JobStatus.RUNNING)
            return {"job_id": str(job.id), "status": job.status, "accepted": True}
        job.exit_code = data.get("exit_code")
        job.outputs = data["outputs"]
        job.save(update_fields=["exit_code", "outputs"])
        job_transition(job=job, to=data["state"], reason=data.get("reason", ""))
        _write_resume(job, now=now)
    return {"job_id": str(job.id), "status": job.status, "accepted": True}


def _job_end_by_host(job: GroveJob, *, to: str, reason: str, now: datetime) -> None:
    """Host ends a live job: the Grove is told through ``changes.cancel`` unless it never claimed it."""
    job_transition(job=job, to=to, reason=reason)
    job.cancel_requested_at = now
    fields = ["cancel_requested_at"]
    if job.claimed_at is None:
        job.cancel_acked_at = now  # never handed out: nothing for the Grove to stop
        fields.append("cancel_acked_at")
    job.save(update_fields=fields)
    _wake_after_commit(job.grove_id)


def grove_job_time_out(*, job_id, now: datetime | None = None) -> bool:
    """Time out one live job past its deadline (step timeout + scheduling grace); the node resumes as
    timed out. A later report from the Grove is stored and ignored."""
    now = now or timezone.now()
    with transaction.atomic():
        job = GroveJob.objects.select_for_update(skip_locked=True, no_key=True).filter(pk=job_id).first()
        if job is None or job.status not in rules.JOB_LIVE or job.deadline_at > now:
            return False
        _job_end_by_host(job, to=JobStatus.TIMED_OUT, reason="deadline_exceeded", now=now)
        _write_resume(job, now=now)
    log.warning("grove job timed out", extra={"job": str(job.id), "key": job.idempotency_key})
    return True


def grove_job_cancel(*, job_id, reason: str = "cancelled") -> bool:
    """Cancel one live job (e.g. the accelerator budget task). Its node ends cancelled through the normal
    tail and the run then fails; the Grove sees the cancellation on its next poll."""
    now = timezone.now()
    with transaction.atomic():
        try:
            job = GroveJob.objects.select_for_update(no_key=True).filter(pk=job_id).first()
        except (ValueError, TypeError, ValidationError):
            job = None
        if job is None or job.status not in rules.JOB_LIVE:
            return False
        _job_end_by_host(job, to=JobStatus.CANCELLED, reason=reason, now=now)
        _write_resume(job, now=now)
    return True


def pipeline_run_cancel(*, run_id, reason: str = "cancelled") -> PipelineRun:
    """Cancel a run: its own live Grove jobs are cancelled, waits are cleared, nodes end cancelled.
    Idempotent; a finished run is returned unchanged."""
    now = timezone.now()
    with transaction.atomic():
        run = PipelineRun.objects.select_for_update(no_key=True).filter(pk=run_id).first()
        if run is None:
            raise NotFound("run_not_found", f"No pipeline run '{run_id}'.")
        if run.status in rules.RUN_TERMINAL:
            return run
        nodes = list(PipelineNode.objects.select_for_update(no_key=True).filter(run=run)
                     .exclude(status__in=rules.NODE_TERMINAL))
        jobs = GroveJob.objects.select_for_update(no_key=True).filter(run=run, status__in=rules.JOB_LIVE)
        for job in jobs:
            _job_end_by_host(job, to=JobStatus.CANCELLED, reason=reason, now=now)
        for node in nodes:
            node_transition(node=node, to=NodeStatus.CANCELLED, reason=reason)
        PipelineOutbox.objects.filter(node__run=run, done_at__isnull=True).update(done_at=now)
        run_transition(run=run, to=RunStatus.CANCELLED, reason=reason)
    return run


# --- the recurring sweep --------------------------------------------------------------------------

def pipeline_sweep(*, now: datetime | None = None, limit: int = 500) -> dict:
    """Recover what the broker or a dead worker lost. Touches only due rows, each through a partial index:
    undone outbox rows past ``next_send_at``; awaiting nodes whose job is terminal with no resume pending;
    live jobs past their deadline; queued nodes whose execute message is overdue."""
    now = now or timezone.now()
    counts = {"resent": 0, "orphans": 0, "timed_out": 0, "requeued": 0}
    with transaction.atomic():
        due = list(PipelineOutbox.objects.select_for_update(skip_locked=True, no_key=True)
                   .filter(done_at__isnull=True, next_send_at__lte=now).order_by("next_send_at")[:limit])
        for row in due:
            # Back off so a node that keeps failing to resume does not flood the broker.
            row.next_send_at = now + timedelta(seconds=resume_resend_after_s() * min(2 ** row.sends, 32))
            row.sends += 1
            row.save(update_fields=["next_send_at", "sends"])
            _after_commit("node_resume", row.node_id)
        counts["resent"] = len(due)

    pending_resume = PipelineOutbox.objects.filter(node=OuterRef("pk"), done_at__isnull=True)
    orphans = list(PipelineNode.objects.filter(status=NodeStatus.AWAITING, current_job__status__in=rules.JOB_TERMINAL)
                   .exclude(Exists(pending_resume)).values_list("current_job_id", flat=True)[:limit])
    for job_id in orphans:
        with transaction.atomic():
            job = GroveJob.objects.select_for_update(no_key=True).get(pk=job_id)
            if _write_resume(job, now=now) is not None:
                counts["orphans"] += 1

    overdue = GroveJob.objects.filter(status__in=rules.JOB_LIVE, deadline_at__lte=now).values_list("pk", flat=True)
    for job_id in list(overdue[:limit]):
        counts["timed_out"] += int(grove_job_time_out(job_id=job_id, now=now))

    stale_before = now - timedelta(seconds=resume_resend_after_s())
    with transaction.atomic():
        stuck = list(PipelineNode.objects.select_for_update(skip_locked=True, no_key=True)
                     .filter(status=NodeStatus.QUEUED, queued_at__lte=stale_before)[:limit])
        for node in stuck:
            node.queued_at = now
            node.save(update_fields=["queued_at"])
            _after_commit("node_execute", node.pk)
        counts["requeued"] = len(stuck)
    if any(counts.values()):
        log.info("pipeline sweep", extra=counts)
    return counts
