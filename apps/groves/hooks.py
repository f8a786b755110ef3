"""What upper apps do when a Grove's reported capacity moves, registered at start-up (``AppConfig.ready``).

Groves never import the apps above them. A heartbeat whose free counts changed (or whose capacity shape
was rewritten) calls every ``on_capacity_moved`` handler with the Grove's id after the write; the
admission queue (apps.pipelines) uses it to wake work waiting for that Grove. Handlers must be cheap (the
heartbeat path is hot) and must not raise: a lost wake-up is the queue's periodic sweep's to repair.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

CapacityMovedHandler = Callable[[str], None]
_capacity_moved: list[CapacityMovedHandler] = []


def on_capacity_moved(handler: CapacityMovedHandler) -> None:
    if handler not in _capacity_moved:
        _capacity_moved.append(handler)


def capacity_moved(grove_id) -> None:
    for handler in _capacity_moved:
        try:
            handler(str(grove_id))
        except Exception as exc:  # a heartbeat is never refused because a wake-up failed
            log.warning("capacity-moved handler failed", extra={"grove": str(grove_id), "error": repr(exc)})
