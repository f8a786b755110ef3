"""The two loops every Grove runner keeps with Host: the heartbeat and the `changes` long-poll.

`forest-agent` and `forest-controller` differ only in what they report and what they do with a
change, so both inherit these loops and fill in the hooks (the supervisord habit: one event loop,
subclassed behaviour). Both loops back off with jitter when Host is down and never spin: a poll that
comes back early is padded to a minimum interval. A permanent refusal from Host (revoked credential,
wrong Grove) stops the runner with a clear message instead of retrying forever.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from typing import Any, Protocol

from forest_agent.backoff import Backoff
from forest_agent.wire.client import WireClient, WireError
from forest_agent.wire.messages import Changes, MessageInvalid, parse_changes

log = logging.getLogger(__name__)

# Host answers these when the credential itself is wrong; retrying cannot help.
FATAL_STATUSES = (401, 403, 404)
MIN_POLL_INTERVAL_S = 1.0


class LoopTiming(Protocol):
    """What the loops read from a runner's configuration (read-only: the configs are frozen dataclasses)."""

    @property
    def heartbeat_interval_s(self) -> float: ...
    @property
    def poll_wait_s(self) -> int: ...
    @property
    def backoff_initial_s(self) -> float: ...
    @property
    def backoff_max_s(self) -> float: ...


def next_heartbeat_delay(answer: dict[str, Any], interval_s: float) -> float:
    """The configured interval, shortened to three beats per Host's staleness window so one lost beat
    never makes the Grove look stale."""
    stale = answer.get("stale_after_s")
    if isinstance(stale, int | float) and stale > 0:
        return min(interval_s, max(1.0, stale / 3))
    return interval_s


class HostLoops(ABC):
    """Heartbeat and poll loops; a subclass sets ``wire``, ``config``, ``stop_event`` and implements
    ``heartbeat_body`` and ``apply_changes`` (abstract: a runner missing either cannot be built)."""

    runner_name = "runner"  # how the fatal message names the process ("agent", "controller")
    wire: WireClient
    config: LoopTiming
    stop_event: threading.Event
    fatal: str | None = None
    last_error: str | None = None
    last_heartbeat_at: float | None = None

    @abstractmethod
    def heartbeat_body(self) -> dict[str, Any]:
        """What this runner reports to Host on each beat (version, change kinds, capacity, log tail)."""

    @abstractmethod
    def apply_changes(self, changes: Changes) -> None:
        """Act on one ``changes`` answer: cancellations, new jobs, workload generations."""

    def after_heartbeat(self) -> None:
        """Called after every heartbeat attempt, delivered or not. Optional: nothing by default."""
        return

    def before_polling(self) -> None:
        """Called once before the first poll (e.g. wait until recovery has re-listed what is running).
        Optional: nothing by default."""
        return

    def _fatal_check(self, exc: WireError) -> bool:
        if not exc.retryable and exc.status in FATAL_STATUSES:
            self.fatal = (f"Host refused this {self.runner_name}'s credential ({exc.code}: {exc.detail}); "
                          "re-enroll it")
            self.stop_event.set()
            return True
        return False

    def _heartbeat_loop(self) -> None:
        backoff = Backoff(self.config.backoff_initial_s, self.config.backoff_max_s)
        while not self.stop_event.is_set():
            try:
                answer = self.wire.heartbeat(self.heartbeat_body())
            except WireError as exc:
                if self._fatal_check(exc):
                    return
                delay = backoff.next_delay(exc.retry_after_s)
                self.last_error = exc.code
                log.warning("heartbeat failed (%s); next try in %.1fs", exc.code, delay)
            else:
                if backoff.failures:
                    log.info("heartbeat delivered again after %d failures", backoff.failures)
                backoff.reset()
                self.last_heartbeat_at = time.time()
                self.last_error = None
                delay = next_heartbeat_delay(answer, self.config.heartbeat_interval_s)
            self.after_heartbeat()
            self.stop_event.wait(delay)

    def _poll_loop(self) -> None:
        backoff = Backoff(self.config.backoff_initial_s, self.config.backoff_max_s)
        self.before_polling()
        while not self.stop_event.is_set():
            started = time.monotonic()
            try:
                changes = parse_changes(self.wire.changes(wait_s=self.config.poll_wait_s))
            except WireError as exc:
                if self._fatal_check(exc):
                    return
                delay = backoff.next_delay(exc.retry_after_s)
                log.warning("poll failed (%s); next try in %.1fs", exc.code, delay)
                self.stop_event.wait(delay)
                continue
            except MessageInvalid as exc:
                delay = backoff.next_delay()
                log.error("Host sent an unreadable changes answer (%s); next try in %.1fs",
                          exc.message, delay)
                self.stop_event.wait(delay)
                continue
            backoff.reset()
            if self.stop_event.is_set():
                return
            self.apply_changes(changes)
            elapsed = time.monotonic() - started
            if elapsed < MIN_POLL_INTERVAL_S:
                self.stop_event.wait(MIN_POLL_INTERVAL_S - elapsed)
