"""The Grove job's lifecycle: one table. Pure: no Django.

``claimed_at`` is stamped on the claim, ``finished_at`` on any terminal state. A job ends once; a report
that arrives afterwards is stored (``late_report``) and never changes it.
"""
from __future__ import annotations

from apps.core.lifecycle import Lifecycle
from apps.dispatch.vocabulary import JobStatus as S

JOB = Lifecycle.of("Grove job", {
    S.ASSIGNED: {S.CLAIMED, S.CANCELLED, S.TIMED_OUT},
    S.CLAIMED: {S.RUNNING, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.TIMED_OUT},
    S.RUNNING: {S.SUCCEEDED, S.FAILED, S.CANCELLED, S.TIMED_OUT},
    S.SUCCEEDED: set(), S.FAILED: set(), S.CANCELLED: set(), S.TIMED_OUT: set(),
}, stamps={S.CLAIMED: "claimed_at"}, terminal_stamp="finished_at")

JOB_LIVE = JOB.live
JOB_TERMINAL = JOB.terminal
