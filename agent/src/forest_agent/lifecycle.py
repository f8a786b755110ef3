"""A tiny explicit state machine: one transition function that checks allowed from-states.

Each lifecycle (native job, supervised process, workload generation) declares its states and its
allowed-transition table in a module of its own and drives a `Lifecycle` through `transition()`.
Illegal transitions raise `IllegalTransition`; every legal one emits an event to the listener.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

from forest_agent.errors import IllegalTransition

S = TypeVar("S", bound=Enum)


@dataclass(frozen=True)
class TransitionEvent(Generic[S]):
    subject: str
    old: S
    new: S
    detail: str


class Lifecycle(Generic[S]):
    """Holds one subject's state; `transition` is the only way to change it."""

    def __init__(
        self,
        subject: str,
        initial: S,
        allowed: Mapping[S, frozenset[S]],
        listener: Callable[[TransitionEvent[S]], None] | None = None,
    ) -> None:
        self.subject = subject
        self._state = initial
        self._allowed = allowed
        self._listener = listener
        self._lock = threading.Lock()

    @property
    def state(self) -> S:
        return self._state

    def can(self, new: S) -> bool:
        return new in self._allowed.get(self._state, frozenset())

    def transition(self, new: S, detail: str = "") -> TransitionEvent[S]:
        with self._lock:
            old = self._state
            if new not in self._allowed.get(old, frozenset()):
                raise IllegalTransition(f"{self.subject}: {old.value} -> {new.value} is not allowed")
            self._state = new
        event = TransitionEvent(self.subject, old, new, detail)
        if self._listener is not None:
            self._listener(event)
        return event
