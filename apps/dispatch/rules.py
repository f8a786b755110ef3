"""Pure rules of the wire's job half: the report body and the long-poll's ``wait``. No Django."""
from __future__ import annotations

import json
import re
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


def job_report(body: Any) -> dict:
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
