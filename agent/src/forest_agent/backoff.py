"""Jittered exponential backoff for talking to a Host that may be down.

"Full jitter" (a random delay between half and all of the exponential step) keeps a fleet of agents
from reconnecting in lockstep after a Host restart.
"""

from __future__ import annotations

import random


class Backoff:
    def __init__(self, initial_s: float = 1.0, max_s: float = 60.0, rng: random.Random | None = None) -> None:
        if initial_s <= 0 or max_s < initial_s:
            raise ValueError("backoff needs 0 < initial_s <= max_s")
        self.initial_s = initial_s
        self.max_s = max_s
        self.failures = 0
        self._rng = rng or random.Random()

    def next_delay(self, at_least: float | None = None) -> float:
        """Record one more failure and return how long to wait before the next try; ``at_least`` is the
        server's ``Retry-After`` when it sent one (never waited longer than ``max_s``)."""
        step = min(self.max_s, self.initial_s * (2 ** min(self.failures, 30)))
        self.failures += 1
        delay = self._rng.uniform(step / 2, step)
        return min(self.max_s, max(delay, at_least)) if at_least else delay

    def reset(self) -> None:
        self.failures = 0
