"""Pure rules of the wire's job half: the report body (declared in ``apps.dispatch.bodies``) and the long-poll's
``wait``. No Django."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from apps.core import bodies
from apps.core.errors import ValidationFailed
from apps.dispatch.bodies import JobReport
from apps.dispatch.vocabulary import CHANGES_WAIT_DEFAULT_S, CHANGES_WAIT_MAX_S


def job_report(body: Any) -> dict[str, Any]:
    """Validate a job report (its one declaration: ``apps.dispatch.bodies.JobReport``); the keys it left out
    stay out, as before (``exit_code``, ``reason``)."""
    report = bodies.parse(JobReport, body)
    out: dict[str, Any] = {"state": report.state, "log_tail": list(report.log_tail), "outputs": report.outputs}
    if report.exit_code is not None:
        out["exit_code"] = report.exit_code
    if report.reason is not None:
        out["reason"] = report.reason
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
            "grove_last_poll_age_s": age, "ended_at": None,
            "detail": f"Assigned to Grove {grove_slug} {int((now - created_at).total_seconds())} s ago and not "
                      f"claimed; the Grove {polled}."}


def unclaimed_ended_signal(*, status: str, reason: str, created_at: datetime, finished_at: datetime | None,
                           grove_slug: str, grove_last_polled_at: datetime | None,
                           ready_within_s: float) -> dict[str, Any] | None:
    """The same signal for a job the unclaimed policy ended (``timed_out``, reason ``unclaimed``), told as of
    its end, so the explanation outlives the job; None for any other job. The Grove's poll age is the one it
    had when the job ended (a Grove that has polled since says only that it had not polled within
    ``GROVE_READY_WITHIN_S``: the policy's own condition)."""
    if status != "timed_out" or reason != UNCLAIMED or finished_at is None:
        return None
    waited = max(0, int((finished_at - created_at).total_seconds()))
    if grove_last_polled_at is None:
        age, polled = None, "had never polled for work"
    elif grove_last_polled_at <= finished_at:
        age = int((finished_at - grove_last_polled_at).total_seconds())
        polled = f"had last polled for work {age} s before"
    else:
        age, polled = None, f"had not polled for work within {int(ready_within_s)} s"
    return {"code": UNCLAIMED, "grove": grove_slug, "assigned_for_s": waited, "grove_last_poll_age_s": age,
            "ended_at": finished_at.isoformat(),
            "detail": f"Assigned to Grove {grove_slug} and not claimed for {waited} s; Host ended it at "
                      f"{finished_at:%Y-%m-%d %H:%M:%S} UTC because the Grove {polled} (not ready: nothing there "
                      "would run it)."}
