"""The ``POST plan`` body, declared once: a compute request or a run request, each its own declaration
(``apps.compute.bodies``, ``apps.pipelines.bodies``). Pure: no Django. Which one a body is, is the key it
carries: ``steps`` makes it a compute request (``apps.staff.api.plan.plan_preview``)."""
from __future__ import annotations

from pydantic import RootModel

from apps.compute.bodies import ComputeJobRequest
from apps.pipelines.bodies import RunRequest


class PlanRequest(RootModel[ComputeJobRequest | RunRequest]):
    """``POST plan``: the body a submit would take, compute (``steps``) or pipeline run (``graph``)."""
