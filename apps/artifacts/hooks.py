"""How apps above artifacts (pipelines, workloads) tell it what their work references, without
artifacts importing them (imports run one way: they register here, in their ``AppConfig.ready``).

- a **reader** answers: does work assigned to this Grove reference this blob right now?
  (a workload generation's bundle, a live job's inputs) — a Grove may download only then;
- a **writer** answers: may this Grove write outputs for this run's node? (it holds the node's claimed
  job) — with the team of the run (the outputs' owner), or None when it may not;
- a **referencer** answers, for a set of digests, which ones something still needs (GC keeps those).
"""
from __future__ import annotations

from collections.abc import Callable

GroveReader = Callable[[object, str], bool]  # (grove_id, digest) -> referenced by its assigned work
GroveWriter = Callable[[object, str, str], str | None]  # (grove_id, run_id, node_id) -> the run's team, or None
Referencer = Callable[[set[str]], set[str]]  # digests -> the subset still referenced
JobLive = Callable[[object, str], bool]  # (grove_id, job_id) -> the job is claimed or running on that Grove

_readers: list[GroveReader] = []
_writers: list[GroveWriter] = []
_referencers: list[Referencer] = []
_job_checks: list[JobLive] = []


def _add(registry: list, fn) -> None:
    if fn not in registry:  # ready() may run more than once (tests, autoreload)
        registry.append(fn)


def register_grove_reader(fn: GroveReader) -> None:
    _add(_readers, fn)


def register_grove_writer(fn: GroveWriter) -> None:
    _add(_writers, fn)


def register_referencer(fn: Referencer) -> None:
    _add(_referencers, fn)


def register_job_check(fn: JobLive) -> None:
    _add(_job_checks, fn)


def job_is_live(grove_id, job_id: str) -> bool:
    """Whether a job data token's job is still live on its Grove (no check registered: never)."""
    return any(check(grove_id, job_id) for check in _job_checks)


def grove_may_read(grove_id, digest: str) -> bool:
    return any(reader(grove_id, digest) for reader in _readers)


def grove_write_scope(grove_id, run_id: str, node_id: str) -> str | None:
    """The team owning the run's outputs when this Grove may write them, else None."""
    for writer in _writers:
        team = writer(grove_id, run_id, node_id)
        if team is not None:
            return team
    return None


def referenced(digests: set[str]) -> set[str]:
    found: set[str] = set()
    for referencer in _referencers:
        if digests - found:
            found |= referencer(digests - found)
    return found


def subscribers() -> dict[str, list[Callable]]:
    """What is registered, for docs/architecture.md's table and its test."""
    return {"grove_reader": list(_readers), "grove_writer": list(_writers), "referencer": list(_referencers),
            "job_check": list(_job_checks)}
