"""Writes for compute jobs: submit (validate, plan, pin, run) and cancel. Both ride on apps.pipelines."""
from __future__ import annotations

from django.db import transaction

from apps.accounts.selectors import authorize
from apps.compute import bodies
from apps.compute.models import ComputeJob
from apps.compute.selectors import compute_enabled_or_refuse, compute_job_get
from apps.pipelines import services as pipelines


@transaction.atomic
def compute_job_submit(*, body: dict, created_by=None) -> ComputeJob:
    """A graph of exec steps through the normal planner, as a run of kind ``compute``. An explicit Grove
    pin is validated and stored as each step's placement before the run starts (a bad pin refuses the
    whole job, nothing is created)."""
    environment = body.get("environment") if isinstance(body, dict) else None
    compute_enabled_or_refuse(environment=environment if isinstance(environment, str) else None)
    data = bodies.compute_request(body)
    run = pipelines.pipeline_run_create(canonical=data["canonical"], kind="compute", environment=data["environment"],
                                        team=data["team"], created_by=created_by, node_fields=data["step_fields"])
    return ComputeJob.objects.create(name=data["name"], environment=data["environment"], team=data["team"],
                                     grove_pin=data["grove"] or "", request=body, run=run,
                                     created_by=created_by if getattr(created_by, "pk", None) else None)


def compute_job_cancel(*, job: ComputeJob) -> ComputeJob:
    pipelines.pipeline_run_cancel(run_id=job.run_id, reason="cancelled")
    job.run.refresh_from_db()
    return job


def compute_job_cancel_as(*, actor, job_id) -> ComputeJob:
    """``compute_job_cancel`` for a person, from any door: 404 ``compute_job_not_found`` first, then
    ``compute.change_computejob`` and the job's team (403 ``permission_required`` / ``team_forbidden``)."""
    job = compute_job_get(job_id=job_id)
    authorize(actor, "compute.change_computejob", team=job.team, what="this compute job")
    return compute_job_cancel(job=job)
