"""The workload status report, declared once (``apps.core.bodies``): its validation and its OpenAPI schema
come from these classes. Pure: no Django."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from apps.core.bodies import Body, count, may_omit, text
from apps.groves.vocabulary import MAX_LOG_LINE, MAX_LOG_LINES
from apps.workloads.vocabulary import GenerationState, ProbeResult

GenerationStateName = Literal[tuple(m.value for m in GenerationState)]  # type: ignore[valid-type]
ProbeResultName = Literal[tuple(m.value for m in ProbeResult)]  # type: ignore[valid-type]
MAX_RESTARTS = 1_000_000


class ProbeResults(Body):
    """The latest result of each probe the generation has (a probe it lacks is left out)."""

    readiness: ProbeResultName = may_omit()  # type: ignore[valid-type]
    liveness: ProbeResultName = may_omit()  # type: ignore[valid-type]


class WorkloadStatus(Body):
    """``POST groves/{id}/generations/{generation_id}/status``: the observed state of a workload generation."""

    state: GenerationStateName  # type: ignore[valid-type]
    live: bool = Field(False, description="Whether its process is running now")
    restarts: count(0, MAX_RESTARTS, description="Restarts since it started") = 0  # type: ignore[valid-type]
    probes: ProbeResults = ProbeResults()
    reason: text(100, blank=True, description="A stable code for the state") = ""  # type: ignore[valid-type]
    message: text(2000, blank=True) = ""  # type: ignore[valid-type]
    log_tail: list[text(MAX_LOG_LINE, blank=True)] = Field(  # type: ignore[valid-type]
        [], max_length=MAX_LOG_LINES, description="The workload's latest log lines")
