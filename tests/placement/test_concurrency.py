"""Concurrent placement of one subject on real PostgreSQL: exactly one row, one Grove for every caller."""
from __future__ import annotations

import threading

import pytest
from django.db import connection

from apps.pipelines.rules import node_requirement
from apps.placement import selectors, services
from apps.placement.models import ExecutionPlacement
from tests.placement.conftest import grove_make


def _requirement():
    return node_requirement({"id": "n", "kind": "exec", "image": "r@sha256:" + "1" * 64},
                                           run_kind="build")


def _race(requirement, callers: int):
    barrier = threading.Barrier(callers)
    results, errors = [], []

    def call():
        try:
            barrier.wait(timeout=10)
            results.append(services.place_execution(subject_type="pipeline_node", subject_id="42",
                                                    requirement=requirement))
        except Exception as exc:  # surfaced below; a thread must not swallow a failure
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=call) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results, errors


@pytest.mark.django_db(transaction=True)
def test_concurrent_calls_for_one_subject_write_one_placement():
    for name in ("a", "b", "c"):
        grove_make(name)
    results, errors = _race(_requirement(), 6)
    assert not errors and len(results) == 6
    assert ExecutionPlacement.objects.filter(subject_type="pipeline_node", subject_id="42").count() == 1
    row = ExecutionPlacement.objects.get()
    assert {r.grove.pk for r in results} == {row.grove_id}
    assert sum(not r.reused for r in results) >= 1
    assert all(r.placement.pk == row.pk for r in results)


@pytest.mark.django_db(transaction=True)
def test_every_caller_passing_the_read_still_yields_one_row(monkeypatch):
    """Force the worst interleaving: every caller misses the stored row, decides, and INSERTs at once.
    The unique constraint lets one win; the others re-read the winner's row as a retry would."""
    for name in ("a", "b"):
        grove_make(name)
    real = selectors.placement_for_subject
    seen: set[int] = set()

    def miss_first_read(**kwargs):
        ident = threading.get_ident()
        if ident not in seen:
            seen.add(ident)
            return None
        return real(**kwargs)

    monkeypatch.setattr(selectors, "placement_for_subject", miss_first_read)
    results, errors = _race(_requirement(), 4)
    assert not errors and len(results) == 4
    assert ExecutionPlacement.objects.count() == 1
    assert sorted(r.reused for r in results) == [False, True, True, True]
    assert len({r.grove.pk for r in results}) == 1
