"""What upper apps do inside dispatch's transactions, registered here at start-up (``AppConfig.ready``).

Dispatch never imports the apps above it. When a Grove job ends (a terminal report, Host's cancellation
or time-out) every ``JobEnded`` handler runs in the transaction that ended it, so its writes (pipelines'
resume outbox row, accelerators' claim release) commit or roll back with the job. ``changes`` asks every
registered ``ChangesSource`` for its part of a Grove's desired state (workloads' generations).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from apps.dispatch.models import GroveJob
from apps.groves.models import Grove


@dataclass(frozen=True)
class JobEnded:
    """A job reached a terminal state. ``by_host``: Host ended it (cancel, time-out), not the Grove."""

    job: GroveJob
    status: str
    reason: str
    by_host: bool
    at: datetime


JobEndedHandler = Callable[[JobEnded], None]
# (grove) -> (its entries for the ``changes`` answer, whether any of them is news that ends a long-poll)
ChangesSource = Callable[[Grove], tuple[list[dict[str, Any]], bool]]

_job_ended: list[JobEndedHandler] = []
_changes_sources: dict[str, ChangesSource] = {}


def on_job_ended(handler: JobEndedHandler) -> None:
    if handler not in _job_ended:
        _job_ended.append(handler)


def job_ended(event: JobEnded) -> None:
    for handler in _job_ended:
        handler(event)


def register_changes_source(key: str, source: ChangesSource) -> None:
    """``key`` is the field of the ``changes`` answer the source fills (e.g. ``workloads``)."""
    _changes_sources[key] = source


def changes_sources() -> dict[str, ChangesSource]:
    return dict(_changes_sources)


def subscribers() -> dict[str, list[Callable]]:
    """What is registered, for docs/architecture.md's table and its test."""
    return {"job_ended": list(_job_ended), "changes_source": list(_changes_sources.values())}
