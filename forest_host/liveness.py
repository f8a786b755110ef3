"""Process liveness by heartbeat file: worker, runner and beat each touch a file while they can do their work,
and the container's health check (docker/host-healthcheck.py) fails when the file is older than a bound.

* worker and runner: a consumer bootstep touches ``<FOREST_VAR_DIR>/liveness/<node name>`` every
  ``TOUCH_EVERY_S`` from the worker's own event loop, only while the consumer is started: connected to the
  broker and consuming. While Celery reconnects to a lost broker, or if its loop stops turning, the file ages.
* beat: its scheduler touches ``beat@<host>`` after each successful publish (forest_host/beat.py); the
  liveness probe task is scheduled every ``FOREST_LIVENESS_PROBE_S``, so beat publishes at least that often.

No Django here: the health check imports this module without settings. What staff and ``/healthz`` see
(which queues were consumed from, when) is the database's record of the probe task (apps.core).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from celery import bootsteps

TOUCH_EVERY_S = 5.0
#: A heartbeat file older than this fails the health check: several touches missed, not one slow tick.
STALE_AFTER_S = float(os.environ.get("FOREST_LIVENESS_STALE_S", "60"))


def liveness_dir() -> Path:
    # settings.VAR_DIR's rule, without importing settings.
    var = os.environ.get("FOREST_VAR_DIR") or str(Path(__file__).resolve().parent.parent / "var")
    return Path(var) / "liveness"


def touch(node: str) -> None:
    path = liveness_dir() / node
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError:
        pass  # a read-only or full disk must not stop the process; the health check then says unhealthy


def age_s(node: str, *, now: float | None = None) -> float | None:
    """Seconds since ``node`` last touched its file; None when it never did."""
    try:
        mtime = (liveness_dir() / node).stat().st_mtime
    except OSError:
        return None
    return max(0.0, (time.time() if now is None else now) - mtime)


def is_live(node: str) -> bool:
    age = age_s(node)
    return age is not None and age <= STALE_AFTER_S


class HeartbeatStep(bootsteps.StartStopStep):
    """Consumer bootstep: started after the task consumer (so only once connected and consuming), stopped
    when the connection is lost and the consumer restarts."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.timer_entry: Any = None

    def start(self, parent: Any) -> None:
        touch(parent.hostname)
        self.timer_entry = parent.timer.call_repeatedly(TOUCH_EVERY_S, touch, (parent.hostname,), priority=10)

    def stop(self, parent: Any) -> None:
        if self.timer_entry is not None:
            self.timer_entry.cancel()
            self.timer_entry = None

    def shutdown(self, parent: Any) -> None:
        self.stop(parent)
