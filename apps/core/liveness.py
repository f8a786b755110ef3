"""The roles of Host's background processes and what makes one live: no Django (the staff page, /healthz and
the metrics read it through apps.core.selectors)."""
from __future__ import annotations

from enum import StrEnum


class ProcessRole(StrEnum):
    WORKER = "worker"  # consumes the default queue (dispatch, resumes, sweeps' work)
    RUNNER = "runner"  # consumes PIPELINE_RUNNER_QUEUE (steps that wait in place)
    BEAT = "beat"  # schedules the sweeps and the liveness probe


def verdict(age_s: float | None, *, within_s: float) -> str:
    """``live`` when the newest sign of life is at most ``within_s`` old, ``stale`` when older, ``unknown``
    when there was never one."""
    if age_s is None:
        return "unknown"
    return "live" if age_s <= within_s else "stale"
