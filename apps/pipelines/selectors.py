"""Reads for pipelines: runs with nodes, and what one Grove should see in ``changes``."""
from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from apps.core.errors import NotFound
from apps.pipelines.choices import JobStatus
from apps.pipelines.models import GroveJob, PipelineNode, PipelineRun

CHANGES_MAX_JOBS = 100


def run_list() -> QuerySet[PipelineRun]:
    return PipelineRun.objects.select_related("graph").order_by("-created_at")


def run_get(*, run_id) -> PipelineRun:
    try:
        run = run_list().filter(pk=run_id).first()
    except (ValueError, TypeError, ValidationError):  # a malformed id is a 404, not a 500
        run = None
    if run is None:
        raise NotFound("run_not_found", f"No pipeline run '{run_id}'.")
    return run


def run_nodes(*, run: PipelineRun) -> QuerySet[PipelineNode]:
    return run.nodes.select_related("grove", "current_job").order_by("position")


def job_wire(job: GroveJob) -> dict:
    """A job as the wire contract spells it (docs/wire.md, ``Job``)."""
    return {"job_id": str(job.id), "run_id": str(job.run_id), "node": job.payload.get("node", ""),
            "change_kind": job.change_kind, "idempotency_key": job.idempotency_key, "payload": job.payload}


def _workload_generations_for(grove) -> tuple[list[dict], bool]:
    """Native workload generations for ``changes.workloads`` (apps/workloads owns them).

    Returns the Grove's whole desired workload state (level-triggered: the agent reconciles it every
    time) and whether any generation is new to the agent (not yet reported on), which is what ends a
    long-poll early; a desired state already acted on must not turn the long-poll into a busy loop.
    """
    from apps.workloads.selectors import grove_workloads

    return grove_workloads(grove)


def grove_changes(*, grove) -> tuple[dict, bool]:
    """The Grove's assigned, unclaimed jobs (oldest first), the job ids whose cancellation it has not
    acknowledged, and its desired workload generations; plus whether any of it is news that should end
    a long-poll now. Job reads go through partial indexes on live rows only."""
    jobs = list(GroveJob.objects.filter(grove=grove, status=JobStatus.ASSIGNED).order_by("created_at")
                [:CHANGES_MAX_JOBS])
    cancel = list(GroveJob.objects.filter(grove=grove, cancel_requested_at__isnull=False,
                                          cancel_acked_at__isnull=True).values_list("pk", flat=True)[:1000])
    workloads, workloads_new = _workload_generations_for(grove)
    body = {"jobs": [job_wire(job) for job in jobs], "workloads": workloads, "cancel": [str(pk) for pk in cancel]}
    return body, bool(jobs or cancel or workloads_new)
