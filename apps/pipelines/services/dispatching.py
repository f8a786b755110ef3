"""Dispatching a node: place it, claim its accelerators, create its Grove job on the placed Grove, and
choose how to wait (detached, or in place on the runner)."""
from __future__ import annotations

import logging
import time
import uuid

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.accelerators.services import accelerator_claim
from apps.core.errors import ForestError
from apps.dispatch.services import grove_job_create, grove_job_time_out
from apps.dispatch.states import JOB_TERMINAL
from apps.flags.selectors import is_enabled
from apps.groves.models import Grove
from apps.pipelines import rules
from apps.pipelines.models import PipelineNode, PipelineNodeWait, PipelineRun
from apps.pipelines.services.admission_queue import handed_back, node_wait
from apps.pipelines.services.outbox import send_after_commit
from apps.pipelines.services.resume import pipeline_node_resume
from apps.pipelines.services.runs import run_advance, run_and_node_locked
from apps.pipelines.services.transitions import node_transition
from apps.pipelines.states import RUN_TERMINAL
from apps.pipelines.vocabulary import DETACHED_WAIT_FLAG, NodeStatus, Task, WaitMode
from apps.placement.admission import LATER_CODES
from apps.placement.requirements import ExecutionRequirement
from apps.placement.services import WaitingForCapacity, place_execution, placement_record_unplaced
from apps.placement.vocabulary import WAITING_FOR_CAPACITY

log = logging.getLogger(__name__)

# A decision or claim that says "not now": the node waits for capacity instead of failing.
WAIT_CODES = frozenset({WAITING_FOR_CAPACITY, *LATER_CODES})


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
               "resources": spec["resources"], "platform": selected_platform, "trust": node.trust}
    if spec.get("image"):
        payload["image"] = spec["image"]
    if spec.get("accelerators"):
        payload["accelerators"] = spec["accelerators"]
    if spec.get("inputs"):  # resolved at submit: the executor fetches and verifies each by digest
        payload["inputs"] = [{key: item[key] for key in ("name", "digest", "size", "storage_kind", "reference", "path")
                              if key in item} for item in spec["inputs"]]
    if spec.get("outputs"):  # uploaded after a successful command, each attempt under its own keys
        payload["outputs"] = [{"name": out["name"], "path": out["path"],
                               "key": rules.output_key(attempt=node.attempt, name=out["name"])}
                              for out in spec["outputs"]]
    if node.needs:  # what the needed steps reported; executors export it as $FOREST_NEEDS_OUTPUTS
        payload["needs_outputs"] = dict(PipelineNode.objects.filter(run=run, node_id__in=node.needs)
                                        .values_list("node_id", "outputs"))
    return payload


def pipeline_node_execute(*, node_id: int) -> str | None:
    """Place one queued node and create its Grove job on the placed Grove. Returns the wait mode, or None
    when there was nothing to do (already dispatched, cancelled, or refused). Safe to run twice."""
    with transaction.atomic():
        locked = run_and_node_locked(node_id)
        if locked is None:
            return None
        run, node = locked
        if node.status != NodeStatus.QUEUED or run.status in RUN_TERMINAL:
            return None
        if node.retry_at is not None:
            wait_s = (node.retry_at - timezone.now()).total_seconds()
            if wait_s > 0:  # early (a re-send): come back when the backoff is over
                send_after_commit(Task.NODE_EXECUTE, node.pk, countdown=wait_s)
                return None
        requirement = ExecutionRequirement.from_stored(node.requirement)
        job_id = uuid.uuid4()  # known before the job row exists: it is the accelerator claim's job_ref
        try:
            with transaction.atomic():
                placed = place_execution(subject_type="pipeline_node", subject_id=str(node.pk),
                                         requirement=requirement, target=node.spec.get("grove"),
                                         team=run.team or None, environment=run.environment or None,
                                         group=f"run:{run.pk}")
                claim = None
                if requirement.accelerators:
                    claim = accelerator_claim(grove=placed.grove, requirement=requirement, job_ref=str(job_id),
                                              team=run.team or None)
        except ForestError as exc:
            _not_dispatched(node, run, requirement, exc)
            return None
        payload = _payload(node, run, placed.selected_platform)
        if claim is not None:  # the executor exposes exactly these devices (docs/wire.md, accelerator_claim)
            payload["accelerator_claim"] = {"unit_id": claim.unit_id, "devices": claim.allocations}
        job = grove_job_create(
            job_id=job_id, run_id=run.id, node_id=node.pk, grove=placed.grove, build_id=run.build_id,
            change_kind=requirement.compatibility.change_kind, payload=payload,
            idempotency_key=f"{run.id}:{node.node_id}:{node.attempt}", attempt=node.attempt,
        )
        handed_back(PipelineNodeWait.objects.filter(node=node).first(), used=placed.grove.pk)
        mode, why = _wait_mode(node, run)
        # A retry's attempt starts clean: the previous attempt's exit code and outputs stay on its job.
        node_transition(node=node, to=NodeStatus.AWAITING, reason=f"wait_{mode}:{why}", changes={
            "current_job": job, "grove": placed.grove, "wait_mode": mode, "retry_at": None,
            "exit_code": None, "outputs": {}, "awaiting_job_id": job.id if mode == WaitMode.DETACHED else None})
    return mode


def _not_dispatched(node: PipelineNode, run: PipelineRun, requirement: ExecutionRequirement,
                    exc: ForestError) -> None:
    """Placement or the claim said no: the decision is stored (refused or waiting, with its verdicts); work
    that could fit later waits in the admission queue, anything else fails the node with the code."""
    placement_record_unplaced(subject_type="pipeline_node", subject_id=str(node.pk), requirement=requirement,
                              error=exc, team=run.team or None, environment=run.environment or None)
    if exc.code in WAIT_CODES:
        if exc.code != WAITING_FOR_CAPACITY:  # the claim lost the last unit to a race: wait for that Grove
            exc = WaitingForCapacity(f"Waiting for capacity: {exc.detail}", groves=_grove_ids(exc, node),
                                     extra=exc.extra)
        node_wait(node=node, error=exc)
        return
    handed_back(PipelineNodeWait.objects.filter(node=node).first())
    log.warning("node not dispatched", extra={"node": str(node), "code": exc.code})
    node_transition(node=node, to=NodeStatus.FAILED, reason=exc.code, detail=exc.detail)
    run_advance(run)


def _grove_ids(exc: ForestError, node: PipelineNode) -> list[str]:
    """The Grove a lost claim was for (by slug in the claim's refusal; a pin's or retry's stored Grove)."""
    slug = exc.extra.get("grove")
    grove_id = (Grove.objects.filter(slug=slug).values_list("id", flat=True).first() if slug else None)
    return [str(grove_id)] if grove_id else ([str(node.grove_id)] if node.grove_id else [])


def pipeline_node_wait_in_place(*, node_id: int, poll_s: float | None = None, max_wait_s: float | None = None) -> bool:
    """Hold the runner while the node's job runs, then run the same tail a resume would.

    The terminal report also writes a resume outbox row, so if this waiter dies the node still finishes;
    whichever arrives first runs the tail, the other finds nothing to do. True when this call ran it.
    """
    poll_s = poll_s if poll_s is not None else getattr(settings, "PIPELINE_IN_PLACE_POLL_S", 0.5)
    started = time.monotonic()
    while True:
        row = (PipelineNode.objects.filter(pk=node_id)
               .values("status", "current_job__status", "current_job__deadline_at", "current_job_id").first())
        if row is None or row["status"] != NodeStatus.AWAITING:
            return False
        if row["current_job__status"] in JOB_TERMINAL:
            return pipeline_node_resume(node_id=node_id)
        if row["current_job__deadline_at"] and row["current_job__deadline_at"] <= timezone.now():
            grove_job_time_out(job_id=row["current_job_id"])
            continue
        if max_wait_s is not None and time.monotonic() - started > max_wait_s:
            return False
        time.sleep(poll_s)
