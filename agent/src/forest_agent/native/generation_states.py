"""Workload generation lifecycle, in the wire's own words (docs/wire.md workload status `state`).

pending    -> starting | failed | superseded
starting   -> live | crash_loop | stopped | superseded
live       -> starting (restarting) | stopped | superseded
crash_loop -> starting | stopped | superseded
stopped    -> starting          (re-activated, e.g. a rollback to it)
superseded -> starting          (rollback: Host sent the previous generation again)
failed     is final
"""

from __future__ import annotations

from enum import Enum


class GenerationState(Enum):
    PENDING = "pending"
    STARTING = "starting"
    LIVE = "live"
    CRASH_LOOP = "crash_loop"
    FAILED = "failed"
    STOPPED = "stopped"
    SUPERSEDED = "superseded"


ALLOWED: dict[GenerationState, frozenset[GenerationState]] = {
    GenerationState.PENDING: frozenset(
        {GenerationState.STARTING, GenerationState.FAILED, GenerationState.SUPERSEDED}
    ),
    GenerationState.STARTING: frozenset(
        {
            GenerationState.LIVE,
            GenerationState.CRASH_LOOP,
            GenerationState.STOPPED,
            GenerationState.SUPERSEDED,
        }
    ),
    GenerationState.LIVE: frozenset(
        {GenerationState.STARTING, GenerationState.STOPPED, GenerationState.SUPERSEDED}
    ),
    GenerationState.CRASH_LOOP: frozenset(
        {GenerationState.STARTING, GenerationState.STOPPED, GenerationState.SUPERSEDED}
    ),
    GenerationState.STOPPED: frozenset({GenerationState.STARTING}),
    GenerationState.SUPERSEDED: frozenset({GenerationState.STARTING}),
}
