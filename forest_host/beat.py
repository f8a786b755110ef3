"""Celery beat's scheduler with a heartbeat: the persistent scheduler, touching beat's liveness file after
every publish that reached the broker (forest_host/liveness.py). ``Scheduler.apply_async`` raises when the
send fails, so an unreachable broker leaves the file to age and the health check to fail."""
from __future__ import annotations

import socket
from typing import Any

from celery.beat import PersistentScheduler

from forest_host import liveness


def beat_node() -> str:
    return f"beat@{socket.gethostname()}"


class Scheduler(PersistentScheduler):
    def apply_async(self, entry: Any, producer: Any = None, advance: bool = True, **kwargs: Any) -> Any:
        result = super().apply_async(entry, producer, advance, **kwargs)
        liveness.touch(beat_node())
        return result
