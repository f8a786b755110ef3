"""The Grove job's vocabulary and the wire's limits: one value each. Pure: stdlib only."""
from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    ASSIGNED = "assigned"  # on a Grove, not yet claimed
    CLAIMED = "claimed"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


# What a Grove may report about a job (``running`` is progress, the rest end it).
REPORT_STATES = ("running", "succeeded", "failed", "cancelled", "timed_out")
MAX_OUTPUTS_BYTES = 64 * 1024
DEFAULT_TIMEOUT_S = 3600
# ``changes``: the long-poll's bounds, and how much one answer carries.
CHANGES_WAIT_DEFAULT_S = 20
CHANGES_WAIT_MAX_S = 30
CHANGES_MAX_JOBS = 100
CHANGES_MAX_CANCELS = 1000
