"""The observed lifecycle of a workload generation, as one transition table. Pure: no Django.

The agent reports states; Host accepts only transitions this table allows. ``superseded`` is final:
a newer generation of the same workload went live (or an operator replaced it).
"""
from __future__ import annotations

from apps.core.errors import Conflict

PENDING, STARTING, LIVE, CRASH_LOOP, FAILED, STOPPED, SUPERSEDED = (
    "pending", "starting", "live", "crash_loop", "failed", "stopped", "superseded",
)
_RUNNING_STATES = {STARTING, LIVE, CRASH_LOOP, FAILED, STOPPED, SUPERSEDED}
ALLOWED: dict[str, set[str]] = {
    PENDING: _RUNNING_STATES,
    STARTING: _RUNNING_STATES,
    LIVE: _RUNNING_STATES,
    CRASH_LOOP: _RUNNING_STATES,
    FAILED: _RUNNING_STATES,
    STOPPED: {STARTING, STOPPED, SUPERSEDED},
    SUPERSEDED: set(),
}


def transition(current: str, new: str) -> str:
    """Return ``new`` if the move is allowed, else raise ``Conflict`` with a stable code."""
    if new not in ALLOWED.get(current, set()):
        if current == SUPERSEDED:
            raise Conflict("generation_superseded",
                           "This generation was superseded by a newer one; stop it and report the live one.")
        raise Conflict("illegal_transition", f"A generation cannot go from {current} to {new}.")
    return new
