"""Supervised process lifecycle (supervisord's states, plus crash_loop instead of giving up).

stopped  -> starting
starting -> running      (stayed up for `startsecs`)
starting -> backoff      (exited or failed to spawn too early)
starting -> crash_loop   (that was the `crash_loop_after`-th failure in a row)
running  -> exited       (ended on its own, or killed for failing liveness)
exited   -> backoff | crash_loop
backoff  -> starting     (after the delay)
crash_loop -> starting   (keeps trying at the maximum backoff, like Kubernetes)
any live state -> stopping -> stopped
"""

from __future__ import annotations

from enum import Enum


class ProcessState(Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    BACKOFF = "backoff"
    EXITED = "exited"
    CRASH_LOOP = "crash_loop"
    STOPPING = "stopping"


ALLOWED: dict[ProcessState, frozenset[ProcessState]] = {
    ProcessState.STOPPED: frozenset({ProcessState.STARTING}),
    ProcessState.STARTING: frozenset(
        {ProcessState.RUNNING, ProcessState.BACKOFF, ProcessState.CRASH_LOOP, ProcessState.STOPPING}
    ),
    ProcessState.RUNNING: frozenset({ProcessState.EXITED, ProcessState.STOPPING}),
    ProcessState.EXITED: frozenset({ProcessState.BACKOFF, ProcessState.CRASH_LOOP, ProcessState.STOPPING}),
    ProcessState.BACKOFF: frozenset({ProcessState.STARTING, ProcessState.STOPPING}),
    ProcessState.CRASH_LOOP: frozenset({ProcessState.STARTING, ProcessState.STOPPING}),
    ProcessState.STOPPING: frozenset({ProcessState.STOPPED}),
}
