"""What upper apps do when a Grove's reported capacity moves, registered at start-up (``AppConfig.ready``).

Groves never import the apps above them. A heartbeat whose free counts changed (or whose capacity shape
was rewritten) calls every ``on_capacity_moved`` handler with the Groves' ids after the write (a batch of
heartbeats passes every Grove it moved in one call); the admission queue (apps.pipelines) uses it to wake
work waiting for those Groves. Handlers must be cheap (the
heartbeat path is hot) and must not raise: a lost wake-up is the queue's periodic sweep's to repair.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

CapacityMovedHandler = Callable[[list[str]], None]
_capacity_moved: list[CapacityMovedHandler] = []


def on_capacity_moved(handler: CapacityMovedHandler) -> None:
    if handler not in _capacity_moved:
        _capacity_moved.append(handler)


def capacity_moved(grove_ids: Iterable) -> None:
    ids = [str(grove_id) for grove_id in grove_ids]
    for handler in _capacity_moved if ids else ():
        try:
            handler(ids)
        except Exception as exc:  # a heartbeat is never refused because a wake-up failed
            log.warning("capacity-moved handler failed", extra={"groves": ids[:10], "error": repr(exc)})


def subscribers() -> dict[str, list[Callable]]:
    """What is registered, for docs/architecture.md's table and its test."""
    return {"capacity_moved": list(_capacity_moved)}
