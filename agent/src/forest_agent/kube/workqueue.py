"""The controller's work queue: job ids to reconcile, each at a due time (client-go's workqueue rules).

One entry per id: adding an id already queued keeps the earlier due time. An id a worker holds (`get`
until `done`) is handed to no other worker; queued again meanwhile, it waits until `done`. So watch
events, the resync and retries may queue a job as often as they like and it is reconciled by one worker
at a time.
"""

from __future__ import annotations

import heapq
import threading
import time

# A waiting worker looks at the stop event at least this often, even when nothing wakes it.
_MAX_WAIT_S = 1.0


class WorkQueue:
    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop
        self._wake = threading.Condition()
        self._due: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []  # (due, id); entries not matching _due are stale
        self._busy: set[str] = set()

    def add(self, key: str, delay_s: float = 0.0) -> None:
        """Queue `key` `delay_s` from now (coalesced: the earliest due time wins)."""
        with self._wake:
            due = time.monotonic() + delay_s
            if key not in self._due or due < self._due[key]:
                self._due[key] = due
                heapq.heappush(self._heap, (due, key))
            self._wake.notify_all()

    def get(self) -> str | None:
        """Block until an id is due and no worker holds it; hold it and return it. None once stopped."""
        with self._wake:
            while not self._stop.is_set():
                held: list[tuple[float, str]] = []
                candidate: tuple[float, str] | None = None
                while self._heap:
                    due, key = self._heap[0]
                    if self._due.get(key) != due:
                        heapq.heappop(self._heap)  # superseded by an earlier entry, or already taken
                    elif key in self._busy:
                        held.append(heapq.heappop(self._heap))  # a worker has it; look past it
                    else:
                        candidate = self._heap[0]
                        break
                now = time.monotonic()
                taken: str | None = None
                if candidate is not None and candidate[0] <= now:
                    heapq.heappop(self._heap)
                    taken = candidate[1]
                    del self._due[taken]
                    self._busy.add(taken)
                for entry in held:
                    heapq.heappush(self._heap, entry)
                if taken is not None:
                    return taken
                self._wake.wait(_MAX_WAIT_S if candidate is None else min(candidate[0] - now, _MAX_WAIT_S))
        return None

    def done(self, key: str) -> None:
        """The worker holding `key` is finished with it."""
        with self._wake:
            self._busy.discard(key)
            self._wake.notify_all()  # it may have been queued again while held

    def wake_all(self) -> None:
        """Wake every waiting worker (after the stop event is set, so they return at once)."""
        with self._wake:
            self._wake.notify_all()
