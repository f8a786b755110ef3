"""Reads for pipelines: runs with their nodes."""
from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from apps.core.errors import NotFound
from apps.pipelines.models import PipelineNode, PipelineRun


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
