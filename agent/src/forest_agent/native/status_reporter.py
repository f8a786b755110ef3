"""Delivers workload status reports to Host from one background thread.

Only the latest body per generation matters, so a newer report replaces an unsent older one; sends
that fail because Host is down are retried with jittered backoff, never in a busy loop.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from forest_agent.backoff import Backoff
from forest_agent.wire.client import WireClient, WireError

log = logging.getLogger(__name__)


class StatusReporter:
    def __init__(self, wire: WireClient) -> None:
        self.wire = wire
        self._pending: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._loop, name="workload-status", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, generation_id: str, body: dict[str, Any]) -> None:
        with self._lock:
            self._pending[generation_id] = body
            self._idle.clear()
        self._wake.set()

    def flush(self, timeout_s: float) -> bool:
        """Wait until everything submitted so far was delivered (or given up); True if so."""
        return self._idle.wait(timeout_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        self.flush(timeout_s)
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _loop(self) -> None:
        backoff = Backoff(0.5, 30.0)
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            while True:
                with self._lock:
                    if not self._pending:
                        self._idle.set()
                        break
                    generation_id, body = next(iter(self._pending.items()))
                try:
                    self.wire.workload_status(generation_id, body)
                except WireError as exc:
                    if exc.retryable:
                        delay = backoff.next_delay(exc.retry_after_s)
                        log.warning(
                            "workload status for %s not delivered (%s); retrying in %.1fs",
                            generation_id,
                            exc.code,
                            delay,
                        )
                        if self._stop.wait(delay):
                            return
                        continue
                    log.error("Host refused workload status for %s: %s", generation_id, exc)
                backoff.reset()
                with self._lock:
                    # Drop it only if no newer body arrived while this one was in flight.
                    if self._pending.get(generation_id) is body:
                        del self._pending[generation_id]
