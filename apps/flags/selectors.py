"""Reading flags. ``is_enabled`` is the one function every caller uses.

Overrides are read as one snapshot per process, refreshed after ``FLAGS_CACHE_TTL_S`` (1 s by default)
so a change made in admin reaches every web and worker process within a second. A web request (and a
Celery task) pins one snapshot for its whole duration, so a flag cannot flip halfway through one.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar
from threading import Lock

from django.conf import settings

from apps.flags.choices import FlagScope
from apps.flags.registry import FLAGS, definition

Snapshot = dict[tuple[str, str, str], bool]

_process_snapshot: tuple[float, Snapshot] | None = None
_lock = Lock()
_pinned: ContextVar = ContextVar("forest_flag_snapshot", default=None)


def _load() -> Snapshot:
    from apps.flags.models import FlagOverride

    return {
        (name, scope, value): enabled
        for name, scope, value, enabled in FlagOverride.objects.values_list(
            "flag_id", "scope", "scope_value", "enabled"
        )
    }


class _Deferred:
    """A pin whose snapshot is read on first use, so a request that reads no flag costs no query."""

    __slots__ = ("snapshot",)

    def __init__(self) -> None:
        self.snapshot: Snapshot | None = None


def current_snapshot() -> Snapshot:
    pinned = _pinned.get()
    if isinstance(pinned, _Deferred):
        if pinned.snapshot is None:
            pinned.snapshot = _process_or_load()
        return pinned.snapshot
    if pinned is not None:
        return pinned
    return _process_or_load()


def _process_or_load() -> Snapshot:
    global _process_snapshot
    now = time.monotonic()
    cached = _process_snapshot
    if cached is not None and now - cached[0] < settings.FLAGS_CACHE_TTL_S:
        return cached[1]
    with _lock:
        snapshot = _load()
        _process_snapshot = (now, snapshot)
    return snapshot


def invalidate() -> None:
    """Forget this process's snapshot (called after a write so the writer sees it at once)."""
    global _process_snapshot
    _process_snapshot = None


@contextmanager
def pinned_snapshot(snapshot: Snapshot | None = None, *, deferred: bool = False):
    """Hold one snapshot for the duration of a request or task: the given one, the current one, or
    (``deferred``) the one read by the first flag lookup."""
    token = _pinned.set(None)
    if deferred:
        _pinned.set(_Deferred())
    else:
        _pinned.set(current_snapshot() if snapshot is None else snapshot)
    try:
        yield
    finally:
        _pinned.reset(token)


def fresh_snapshot() -> Snapshot:
    """The process snapshot, ignoring any pin (what a new request or task should pin)."""
    return _process_or_load()


def resolve(name: str, *, environment: str | None = None, team: str | None = None) -> tuple[bool, str]:
    """The effective value and where it came from (``team=x``, ``environment=y``, ``global``, ``default``)."""
    flag = definition(name)
    snapshot = current_snapshot()
    candidates = (
        (FlagScope.TEAM, team),
        (FlagScope.ENVIRONMENT, environment),
        (FlagScope.GLOBAL, ""),
    )
    for scope, value in candidates:
        if value is None:
            continue
        key = (name, str(scope), str(value))
        if key in snapshot:
            return snapshot[key], str(scope) if scope == FlagScope.GLOBAL else f"{scope}={value}"
    return flag.default, "default"


def is_enabled(name: str, *, environment: str | None = None, team: str | None = None) -> bool:
    """Whether a declared flag is on. Unknown names raise ``UnknownFlag``."""
    return resolve(name, environment=environment, team=team)[0]


def flag_rows() -> list[dict]:
    """Every declared flag with its default, global effective value and source (for lists and the CLI)."""
    rows = []
    for name, flag in sorted(FLAGS.items()):
        value, source = resolve(name)
        scoped = sorted(
            f"{scope}={scope_value}:{'on' if enabled else 'off'}"
            for (flag_name, scope, scope_value), enabled in current_snapshot().items()
            if flag_name == name and scope != FlagScope.GLOBAL
        )
        rows.append(
            {"name": name, "default": flag.default, "effective": value, "source": source,
             "stage": flag.stage, "scoped": scoped, "description": flag.description}
        )
    return rows
