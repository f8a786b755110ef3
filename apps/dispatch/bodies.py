"""The job report body, declared once (``apps.core.bodies``): its validation and its OpenAPI schema come from
this class. Pure: no Django. (A claim has no body: the job is named by the path.)"""
from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from apps.core.bodies import Body, BodyError, count, text
from apps.dispatch.vocabulary import MAX_OUTPUTS_BYTES, REPORT_STATES
from apps.groves.vocabulary import MAX_LOG_LINE, MAX_LOG_LINES

ReportState = Literal[REPORT_STATES]  # type: ignore[valid-type]
REASON = re.compile(r"^[a-z][a-z0-9_]*$")


def _outputs_fit(outputs: dict[str, Any]) -> dict[str, Any]:
    if len(json.dumps(outputs, sort_keys=True, separators=(",", ":"), ensure_ascii=False)) > MAX_OUTPUTS_BYTES:
        raise BodyError("too_large", f"{{field}} is larger than {MAX_OUTPUTS_BYTES} bytes.")
    return outputs


def _reason_code(reason: str) -> str:
    if not REASON.match(reason):
        raise BodyError("invalid_reason", "{field} must be a stable snake_case code.")
    return reason


class JobReport(Body):
    """``POST groves/{id}/jobs/{job_id}/report``: where a claimed job is, and how it ended."""

    state: ReportState = Field(..., description="running, or how it ended")
    exit_code: count(-255, 255) | None = Field(None, description="The command's exit code")  # type: ignore[valid-type]
    log_tail: list[text(MAX_LOG_LINE, blank=True)] = Field(  # type: ignore[valid-type]
        [], max_length=MAX_LOG_LINES, description="The job's latest log lines")
    outputs: Annotated[dict[str, Any], AfterValidator(_outputs_fit)] = Field(
        {}, description=f"What the job made, as the executor names it (at most {MAX_OUTPUTS_BYTES} bytes of JSON)")
    reason: Annotated[text(64), AfterValidator(_reason_code)] | None = Field(  # type: ignore[valid-type]
        None, description="A stable snake_case code for why it ended so")
