"""Native job lifecycle (one transition table; `Lifecycle.transition` enforces it).

received -> claimed -> running -> succeeded | failed | timed_out | cancelled
received -> claim_lost                  (Host gave it to someone else: 409 already_claimed)
received -> abandoned                   (claim failed because Host is unreachable; re-offered later)
claimed  -> failed | cancelled          (refused or could not spawn; cancelled before start)
"""

from __future__ import annotations

from enum import Enum


class JobState(Enum):
    RECEIVED = "received"
    CLAIMED = "claimed"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    CLAIM_LOST = "claim_lost"
    ABANDONED = "abandoned"


TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.TIMED_OUT, JobState.CANCELLED})

ALLOWED: dict[JobState, frozenset[JobState]] = {
    JobState.RECEIVED: frozenset({JobState.CLAIMED, JobState.CLAIM_LOST, JobState.ABANDONED}),
    JobState.CLAIMED: frozenset({JobState.RUNNING, JobState.FAILED, JobState.CANCELLED}),
    JobState.RUNNING: TERMINAL,
}
