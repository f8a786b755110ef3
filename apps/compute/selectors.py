"""Reads for compute jobs, and the feature gate every compute surface goes through."""
from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from apps.accounts.selectors import visible
from apps.artifacts.selectors import run_lineage
from apps.compute.models import ComputeJob
from apps.core.errors import Forbidden, NotFound
from apps.dispatch.models import GroveJob
from apps.dispatch.selectors import job_signal
from apps.flags.registry import COMPUTE_JOBS
from apps.flags.selectors import is_enabled
from apps.pipelines.models import PipelineNode
from apps.pipelines.selectors import node_refusal, queue_positions, run_warnings, runner_status, stored_decisions

FLAG = COMPUTE_JOBS


def compute_enabled_or_refuse(*, environment: str | None = None) -> None:
    if not is_enabled(FLAG, environment=environment or None):
        raise Forbidden("compute_jobs_disabled", f"Compute jobs are off here; an operator can turn on {FLAG}.")


def compute_job_list() -> QuerySet[ComputeJob]:
    return ComputeJob.objects.select_related("run").order_by("-created_at")


def compute_jobs_visible(user) -> QuerySet[ComputeJob]:
    """The compute jobs ``user`` may see (their teams' unless the role spans every team), newest first: the
    API list and the staff page read this one."""
    return visible(compute_job_list(), user)


def compute_job_get(*, job_id) -> ComputeJob:
    try:
        job = compute_job_list().filter(pk=job_id).first()
    except (ValueError, TypeError, ValidationError):
        job = None
    if job is None:
        raise NotFound("compute_job_not_found", f"No compute job '{job_id}'.")
    return job


def _step_view(node: PipelineNode, queue: dict, decisions: dict, outputs: dict | None = None) -> dict:
    job = node.current_job if node.current_job_id else None
    return {"name": node.node_id, "status": node.status, "grove": node.grove.slug if node.grove_id else None,
            "job_id": str(node.current_job_id) if job else None, "exit_code": node.exit_code,
            "reason": node.reason, "detail": node.detail, "refusal": node_refusal(node),
            "wait_mode": node.wait_mode or None, "attempt": node.attempt, "retries": node.spec.get("retries", 0),
            "retry_at": node.retry_at.isoformat() if node.retry_at else None,
            "queue": queue.get(node.pk), "decision": decisions.get(node.pk),
            "log_tail": job.log_tail[-20:] if job else [],
            "inputs": [{key: item.get(key) for key in ("name", "artifact_id", "digest", "path")}
                       for item in node.spec.get("inputs", [])],
            "outputs": (outputs or {}).get(node.node_id, []),
            # assigned and not claimed within GROVE_JOB_UNCLAIMED_AFTER_S: {"code": "unclaimed", ...}
            "signal": job_signal(job)}


def compute_job_view(job: ComputeJob, *, runner: dict | None = None) -> dict:
    """The compute response shape: ``{"id", "run_id", "status", "steps": [...]}`` plus name/environment, the
    runner pool, and ``warnings`` (what enforcement would have refused). A waiting step carries ``queue``
    (its position, what it waits on, its deadline); a refused or waiting one its stored ``decision``."""
    nodes = list(job.run.nodes.select_related("grove", "current_job", "current_job__grove").order_by("position"))
    queue, decisions = queue_positions(nodes), stored_decisions(nodes)
    outputs: dict[str, list] = {}
    if any(node.spec.get("outputs") for node in nodes):
        for use in run_lineage(run_id=job.run_id)["outputs"]:
            outputs.setdefault(use["node"], []).append(
                {"name": use["name"], "artifact_id": use["artifact"]["id"], "digest": use["artifact"]["digest"],
                 "size": use["artifact"]["size"]})
    return {
        "id": str(job.id), "run_id": str(job.run_id), "name": job.name, "environment": job.environment or None,
        "team": job.team,
        "status": job.run.status, "reason": job.run.reason, "created_at": job.created_at.isoformat(),
        "warnings": [{"step": w.pop("node"), **w} for w in run_warnings(nodes)],
        "runner": runner or runner_status(),
        "steps": [_step_view(node, queue, decisions, outputs) for node in nodes],
    }


def compute_job_logs(job: ComputeJob) -> list[dict]:
    """Every Grove job of the compute job's run, step by step and attempt by attempt, with the full log
    tail its Grove reported (``GET compute/jobs/{id}/logs``, ``forest compute logs``)."""
    nodes = {node.pk: node for node in job.run.nodes.only("pk", "node_id", "position")}
    grove_jobs = GroveJob.objects.filter(run_id=job.run_id).select_related("grove")
    return [
        {"step": nodes[grove_job.node_id].node_id, "job_id": str(grove_job.id), "attempt": grove_job.attempt,
         "grove": grove_job.grove.slug, "status": grove_job.status, "exit_code": grove_job.exit_code,
         "log_tail": list(grove_job.log_tail or [])}
        for grove_job in sorted(grove_jobs, key=lambda j: (nodes[j.node_id].position, j.attempt))
    ]
