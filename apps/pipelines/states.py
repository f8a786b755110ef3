"""The pipeline node and run lifecycles: one table each. Pure: no Django."""
from __future__ import annotations

from apps.core.lifecycle import Lifecycle
from apps.dispatch.vocabulary import JobStatus
from apps.pipelines.vocabulary import NodeStatus as N
from apps.pipelines.vocabulary import RunStatus as R

NODE = Lifecycle.of("pipeline node", {
    N.PENDING: {N.QUEUED, N.CANCELLED, N.SKIPPED},
    # queued -> waiting: no eligible Grove has room now; waiting -> queued: capacity freed and the queue
    # admitted it (dispatch then places it for real); a wait is bounded by the node's timeout.
    N.QUEUED: {N.AWAITING, N.FAILED, N.CANCELLED, N.WAITING},
    N.WAITING: {N.QUEUED, N.CANCELLED, N.TIMED_OUT, N.FAILED},
    # awaiting -> queued: the attempt failed or timed out and the node has retries left (rules.retry_after).
    N.AWAITING: {N.SUCCEEDED, N.FAILED, N.TIMED_OUT, N.CANCELLED, N.QUEUED},
    N.SUCCEEDED: set(), N.FAILED: set(), N.TIMED_OUT: set(), N.CANCELLED: set(), N.SKIPPED: set(),
}, stamps={N.QUEUED: "queued_at"}, terminal_stamp="finished_at")
NODE_TERMINAL = NODE.terminal

RUN = Lifecycle.of("pipeline run", {
    R.PENDING: {R.RUNNING, R.CANCELLED, R.FAILED, R.SUCCEEDED},
    R.RUNNING: {R.SUCCEEDED, R.FAILED, R.CANCELLED},
    R.SUCCEEDED: set(), R.FAILED: set(), R.CANCELLED: set(),
}, terminal_stamp="finished_at")
RUN_TERMINAL = RUN.terminal

# A terminal job ends its node the same way; a job cancelled by its Grove (or by budget policy) ends the
# node as cancelled, and the run then fails unless the run itself was cancelled.
_NODE_FOR_JOB = {JobStatus.SUCCEEDED: N.SUCCEEDED, JobStatus.FAILED: N.FAILED, JobStatus.TIMED_OUT: N.TIMED_OUT,
                 JobStatus.CANCELLED: N.CANCELLED}


def node_outcome_for_job(job_status: str) -> str:
    """The node status a terminal job leads to."""
    return _NODE_FOR_JOB[JobStatus(job_status)]


def run_outcome(node_statuses: list[str]) -> str | None:
    """The run's terminal status once every node is terminal, else None."""
    if any(s not in NODE_TERMINAL for s in node_statuses):
        return None
    return R.SUCCEEDED if all(s == N.SUCCEEDED for s in node_statuses) else R.FAILED
