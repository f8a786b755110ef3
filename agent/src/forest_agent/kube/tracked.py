"""The jobs forest-controller is responsible for, each with its `Lifecycle` (kube/job_states.py).

The table is the only writer of a tracked job's state: every move goes through `advance` or `decide`
under one lock, so the poll thread (a cancellation) and a worker (a reconcile) never both move the same
job, and a move the table does not allow is refused rather than half made. A job in a final state is
forgotten. Nothing here is persisted: the cluster is the journal (`Reconciler.recover` rebuilds it).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from forest_agent.backoff import Backoff
from forest_agent.kube.job_states import ALLOWED, FINAL, TrackedState
from forest_agent.kube.spec import JobSpec
from forest_agent.lifecycle import Lifecycle, TransitionEvent

log = logging.getLogger(__name__)


@dataclass
class Tracked:
    """What the controller remembers of one job between reconciles (rebuilt from the cluster on restart)."""

    job_id: str
    kind: str  # "Job" | "Deployment"
    name: str  # "" for a cancellation of a job this process never saw
    namespace: str
    lifecycle: Lifecycle[TrackedState]
    objects: list[dict[str, Any]] = field(default_factory=list)  # to apply (a Deployment's: after the claim)
    spec: JobSpec | None = None  # kept while its data token is still to be written
    problem_since: float | None = None
    outcome: dict[str, Any] | None = None  # the terminal report, set with the move to `reporting`
    backoff: Backoff = field(default_factory=lambda: Backoff(0.5, 30.0))

    @property
    def state(self) -> TrackedState:
        return self.lifecycle.state


def _log_transition(event: TransitionEvent[TrackedState]) -> None:
    detail = f" ({event.detail})" if event.detail else ""
    log.debug("%s: %s -> %s%s", event.subject, event.old.value, event.new.value, detail)


class TrackedJobs:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, Tracked] = {}

    @staticmethod
    def new(job_id: str, kind: str, name: str, namespace: str, state: TrackedState) -> Tracked:
        return Tracked(
            job_id=job_id,
            kind=kind,
            name=name,
            namespace=namespace,
            lifecycle=Lifecycle(f"job {job_id}", state, ALLOWED, _log_transition),
        )

    def add(self, tracked: Tracked) -> bool:
        """Track it; False (and nothing changes) when this job id is tracked already."""
        with self._lock:
            if tracked.job_id in self._jobs:
                return False
            self._jobs[tracked.job_id] = tracked
            return True

    def get(self, job_id: str) -> Tracked | None:
        with self._lock:
            return self._jobs.get(job_id)

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._jobs)

    def __contains__(self, job_id: object) -> bool:
        with self._lock:
            return job_id in self._jobs

    def __len__(self) -> int:
        with self._lock:
            return len(self._jobs)

    def advance(self, tracked: Tracked, new: TrackedState, detail: str = "") -> bool:
        """Move it to `new` if the table allows that from where it is now; a final state forgets it.
        False: it moved elsewhere meanwhile (a cancellation decided it), and nothing changed."""
        with self._lock:
            if not tracked.lifecycle.can(new):
                return False
            tracked.lifecycle.transition(new, detail)
            if new in FINAL:
                self._jobs.pop(tracked.job_id, None)
            return True

    def decide(self, tracked: Tracked, body: dict[str, Any]) -> bool:
        """Fix the terminal report, once: the first outcome decided wins (a cancellation decided before
        its delete beats the DELETED event the delete causes). False when it was decided already."""
        with self._lock:
            return self._decide(tracked, body)

    @staticmethod
    def _decide(tracked: Tracked, body: dict[str, Any]) -> bool:
        if not tracked.lifecycle.can(TrackedState.REPORTING):
            return False
        tracked.outcome = body
        tracked.lifecycle.transition(TrackedState.REPORTING, str(body.get("state", "")))
        return True

    def decide_cancelled(self, job_id: str, body: dict[str, Any]) -> Tracked:
        """Host cancelled `job_id`: decide `body` unless an outcome came first; a job this process does
        not track (never seen, or seen by a controller before a restart) is tracked for the report."""
        with self._lock:
            tracked = self._jobs.get(job_id)
            if tracked is None:
                tracked = self.new(job_id, "Job", "", "", TrackedState.REPORTING)
                tracked.outcome = body
                self._jobs[job_id] = tracked
            else:
                self._decide(tracked, body)
            return tracked
