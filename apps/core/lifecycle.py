"""Host lifecycles in one dialect: a table of allowed transitions per state machine, and one function
that applies a change. Pure: no Django.

Each app declares its machines in its own ``states.py`` (Grove job, pipeline node and run, workload
generation, accelerator claim) and changes a state column only through ``Lifecycle.apply``: it checks the
from-state, sets the entry timestamp the machine names, saves exactly the fields that changed
(``update_fields``) and emits one ``TransitionEvent`` to the machine's listeners. The agent's
``forest_agent.lifecycle`` is the same shape for in-memory subjects.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from apps.core.errors import Conflict

log = logging.getLogger(__name__)


class IllegalTransition(Conflict):
    def __init__(self, machine: str, current: str, target: str, *, code: str = "illegal_transition",
                 detail: str | None = None):
        super().__init__(code, detail or f"A {machine} cannot go from {current} to {target}.")


@dataclass(frozen=True)
class TransitionEvent:
    machine: str
    subject: Any
    old: str
    new: str
    reason: str


@dataclass(frozen=True)
class Lifecycle:
    """One state machine: ``transitions[state]`` lists where ``state`` may go; states with no exits are
    terminal. ``stamps[state]`` names a timestamp attribute set when a subject enters ``state``;
    ``terminal_stamp`` one set on entering any terminal state."""

    machine: str
    transitions: Mapping[str, frozenset[str]]
    column: str = "status"
    stamps: Mapping[str, str] = field(default_factory=dict)
    terminal_stamp: str = ""
    # The code an illegal move is refused with, and a from-state whose refusal has its own code and
    # sentence (e.g. a superseded generation).
    code: str = "illegal_transition"
    refusals: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    listeners: list[Callable[[TransitionEvent], None]] = field(default_factory=list, compare=False)

    @classmethod
    def of(cls, machine: str, transitions: Mapping[str, Iterable[str]], **options: Any) -> Lifecycle:
        return cls(machine, {str(state): frozenset(str(t) for t in to) for state, to in transitions.items()},
                   **options)

    @property
    def states(self) -> frozenset[str]:
        return frozenset(self.transitions)

    @property
    def terminal(self) -> frozenset[str]:
        return frozenset(state for state, exits in self.transitions.items() if not exits)

    @property
    def live(self) -> frozenset[str]:
        return self.states - self.terminal

    def sources(self, target: str) -> frozenset[str]:
        """The states that may move to ``target`` (for a bulk change: ``filter(state__in=...)``)."""
        return frozenset(state for state, exits in self.transitions.items() if target in exits)

    def allows(self, current: str, target: str) -> bool:
        return target in self.transitions.get(current, frozenset())

    def check(self, current: str, target: str) -> str:
        """``target`` if the move is allowed, else raise ``IllegalTransition`` (409, a stable code)."""
        if not self.allows(current, target):
            if current in self.refusals:
                code, detail = self.refusals[current]
                raise IllegalTransition(self.machine, current, target, code=code, detail=detail)
            raise IllegalTransition(self.machine, current, target, code=self.code)
        return target

    def apply(self, subject: Any, to: str, *, reason: str = "", now: datetime | None = None,
              changes: Mapping[str, Any] | None = None, save: bool = True) -> TransitionEvent:
        """The one way a subject's state changes: check, stamp, set ``changes`` too, save only the fields
        touched, then tell the listeners (inside the caller's transaction: a listener's writes commit or
        roll back with the change)."""
        old = str(getattr(subject, self.column))
        self.check(old, to)
        now = now or datetime.now(UTC)
        values: dict[str, Any] = {self.column: to, **(changes or {})}
        if to in self.stamps:
            values[self.stamps[to]] = now
        if self.terminal_stamp and to in self.terminal:
            values[self.terminal_stamp] = now
        for name, value in values.items():
            setattr(subject, name, value)
        if save:
            subject.save(update_fields=list(values))
        event = TransitionEvent(self.machine, subject, old, to, reason)
        for listener in self.listeners:
            listener(event)
        return event

    def listen(self, listener: Callable[[TransitionEvent], None]) -> None:
        """Register a listener once (apps register theirs at start-up; a reload must not double them)."""
        if listener not in self.listeners:
            self.listeners.append(listener)
