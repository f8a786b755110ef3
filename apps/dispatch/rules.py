"""Pure rules of the wire's job half: the report body and the long-poll's ``wait``. No Django."""
from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from apps.core import validation as v
from apps.core.errors import ValidationFailed
from apps.dispatch.vocabulary import (
    CHANGES_WAIT_DEFAULT_S,
    CHANGES_WAIT_MAX_S,
    MAX_OUTPUTS_BYTES,
    REPORT_STATES,
)
from apps.groves.vocabulary import MAX_LOG_LINE, MAX_LOG_LINES

REASON = re.compile(r"^[a-z][a-z0-9_]*$")


def job_report(body: Any) -> dict[str, Any]:
    body = v.obj(body, "", allowed={"state", "exit_code", "log_tail", "outputs", "reason"}, required={"state"})
    out: dict[str, Any] = {"state": v.choice(body["state"], "state", choices=REPORT_STATES)}
    if body.get("exit_code") is not None:
        out["exit_code"] = v.integer(body["exit_code"], "exit_code", minimum=-255, maximum=255)
    out["log_tail"] = v.lines(body.get("log_tail", []), "log_tail", max_items=MAX_LOG_LINES, max_length=MAX_LOG_LINE)
    outputs = body.get("outputs", {})
    if not isinstance(outputs, dict):
        raise v.fail("invalid_type", "outputs must be a JSON object.", "outputs")
    if len(json.dumps(outputs, sort_keys=True, separators=(",", ":"), ensure_ascii=False)) > MAX_OUTPUTS_BYTES:
        raise v.fail("too_large", f"outputs is larger than {MAX_OUTPUTS_BYTES} bytes.", "outputs")
    out["outputs"] = outputs
    if body.get("reason") is not None:
        reason = v.string(body["reason"], "reason", max_length=64)
        if not REASON.match(reason):
            raise v.fail("invalid_reason", "reason must be a stable snake_case code.", "reason")
        out["reason"] = reason
    return out


def changes_wait(raw: str | None, *, default: int = CHANGES_WAIT_DEFAULT_S, maximum: int = CHANGES_WAIT_MAX_S) -> int:
    """The ``wait`` query parameter of ``changes``: 0..30 seconds."""
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationFailed("invalid_wait", f"wait must be a whole number of seconds 0..{maximum}.",
                               field="wait") from None
    if not 0 <= value <= maximum:
        raise ValidationFailed("invalid_wait", f"wait must be between 0 and {maximum} seconds.", field="wait")
    return value


UNCLAIMED = "unclaimed"


def unclaimed_signal(*, status: str, created_at: datetime, grove_slug: str, grove_last_polled_at: datetime | None,
                     now: datetime, after_s: float) -> dict[str, Any] | None:
    """The coded signal of a job assigned to a Grove that has not claimed it within ``after_s``
    (``GROVE_JOB_UNCLAIMED_AFTER_S``), with the Grove's last poll age; None for any other job. One
    definition for the API status, the CLI, the staff pages and ``/metrics`` (docs/decisions.md
    "Unclaimed jobs")."""
    if status != "assigned" or (now - created_at).total_seconds() < after_s:
        return None
    age = None if grove_last_polled_at is None else max(0, int((now - grove_last_polled_at).total_seconds()))
    polled = "has never polled for work" if age is None else f"last polled for work {age} s ago"
    return {"code": UNCLAIMED, "grove": grove_slug, "assigned_for_s": int((now - created_at).total_seconds()),
            "grove_last_poll_age_s": age,
            "detail": f"Assigned to Grove {grove_slug} {int((now - created_at).total_seconds())} s ago and not "
                      f"claimed; the Grove {polled}."}
