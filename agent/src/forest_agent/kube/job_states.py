"""forest-controller's tracked-job lifecycle (one transition table; `Lifecycle.transition` enforces it).

received  -> claimed     (Host handed it over; 409 already_claimed counts: only this Grove claims its jobs)
received  -> dropped     (Host cancelled or forgot it before the claim; what was applied is deleted)
claimed   -> released    (data token written; the Job unsuspended, or the Deployment applied)
released  -> running     (the running report was delivered)
received | claimed | released | running -> reporting
                         (the outcome is decided, once: Kubernetes' end, a problem past its grace,
                          the object deleted outside Forest, or Host's cancellation)
reporting -> reported    (Host answered the terminal report; the object is marked reported)
reported, dropped        final: the job is forgotten

A restart rebuilds the table from the cluster (`Reconciler.recover`): a suspended Job is `received`
again, any other unmarked object `released`; a marked one is not tracked at all.
"""

from __future__ import annotations

from enum import Enum


class TrackedState(Enum):
    RECEIVED = "received"
    CLAIMED = "claimed"
    RELEASED = "released"
    RUNNING = "running"
    REPORTING = "reporting"
    REPORTED = "reported"
    DROPPED = "dropped"


FINAL = frozenset({TrackedState.REPORTED, TrackedState.DROPPED})

ALLOWED: dict[TrackedState, frozenset[TrackedState]] = {
    TrackedState.RECEIVED: frozenset({TrackedState.CLAIMED, TrackedState.DROPPED, TrackedState.REPORTING}),
    TrackedState.CLAIMED: frozenset({TrackedState.RELEASED, TrackedState.REPORTING}),
    TrackedState.RELEASED: frozenset({TrackedState.RUNNING, TrackedState.REPORTING}),
    TrackedState.RUNNING: frozenset({TrackedState.REPORTING}),
    TrackedState.REPORTING: frozenset({TrackedState.REPORTED}),
}
