"""Reads for compute jobs, and the feature gate every compute surface goes through."""
from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from apps.compute.models import ComputeJob
from apps.core.errors import Forbidden, NotFound
from apps.flags.selectors import is_enabled

FLAG = "host.deploy.forest_compute_jobs"


def compute_enabled_or_refuse(*, environment: str | None = None) -> None:
    if not is_enabled(FLAG, environment=environment or None):
        raise Forbidden("compute_jobs_disabled", f"Compute jobs are off here; an operator can turn on {FLAG}.")


def compute_job_list() -> QuerySet[ComputeJob]:
    return ComputeJob.objects.select_related("run").order_by("-created_at")


def compute_job_get(*, job_id) -> ComputeJob:
    try:
        job = compute_job_list().filter(pk=job_id).first()
    except (ValueError, TypeError, ValidationError):
        job = None
    if job is None:
        raise NotFound("compute_job_not_found", f"No compute job '{job_id}'.")
    return job


def compute_job_view(job: ComputeJob) -> dict:
    """The compute response shape: ``{"id", "run_id", "status", "steps": [...]}`` (plus name/environment)."""
    nodes = job.run.nodes.select_related("grove", "current_job").order_by("position")
    return {
        "id": str(job.id), "run_id": str(job.run_id), "name": job.name, "environment": job.environment,
        "status": job.run.status, "reason": job.run.reason, "created_at": job.created_at.isoformat(),
        "steps": [{"name": n.node_id, "status": n.status, "grove": n.grove.slug if n.grove_id else None,
                   "job_id": str(n.current_job_id) if n.current_job_id else None, "exit_code": n.exit_code,
                   "reason": n.reason, "attempt": n.attempt, "retries": n.spec.get("retries", 0),
                   "retry_at": n.retry_at.isoformat() if n.retry_at else None,
                   "log_tail": n.current_job.log_tail[-20:] if n.current_job_id else []}
                  for n in nodes],
    }
