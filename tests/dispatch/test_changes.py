"""``GET groves/{id}/changes``: the async long-poll, through Django's async test client against real
PostgreSQL and real Redis pub/sub (and the database-polling fallback without Redis)."""
from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test import AsyncClient

from apps.dispatch import services
from apps.dispatch.api.wire import changes_view
from apps.dispatch.models import GroveJob

V1 = "/api/forest/v1"


def _poll(grove, credential, query="wait=0"):
    client = AsyncClient()
    started = time.monotonic()
    response = async_to_sync(client.get)(f"{V1}/groves/{grove.id}/changes?{query}",
                                         headers={"Authorization": f"Bearer {credential}"})
    return response, time.monotonic() - started


def _assign(grove) -> GroveJob:
    """A job assigned to ``grove`` by dispatch's own service (its long-poll woken after commit)."""
    run_id = uuid.uuid4()
    return services.grove_job_create(grove=grove, run_id=run_id, node_id=1, change_kind="k8s.job",
                                     payload={"node": "a", "timeout_s": 60}, idempotency_key=f"{run_id}:a:1",
                                     attempt=1)


def test_the_view_is_a_coroutine():
    assert asyncio.iscoroutinefunction(changes_view)


@pytest.mark.django_db
def test_returns_at_once_with_only_this_groves_unclaimed_jobs(k8s_grove, fresh_grove):
    other = fresh_grove(name="other", substrate="native")
    job = _assign(k8s_grove[0])
    response, elapsed = _poll(*k8s_grove, "wait=10")
    assert response.status_code == 200 and elapsed < 3
    body = response.json()
    assert body["workloads"] == [] and body["cancel"] == []
    assert body["jobs"] == [{"job_id": str(job.id), "run_id": str(job.run_id), "node": "a", "change_kind": "k8s.job",
                             "idempotency_key": f"{job.run_id}:a:1", "payload": job.payload}]
    assert _poll(*other)[0].json()["jobs"] == []


@pytest.mark.django_db
def test_wait_is_bounded_when_there_is_no_work(k8s_grove):
    response, elapsed = _poll(*k8s_grove, "wait=1")
    assert response.status_code == 200 and response.json() == {"jobs": [], "workloads": [], "cancel": []}
    assert 0.9 <= elapsed < 4


@pytest.mark.django_db
@pytest.mark.parametrize(("query", "header", "status", "code"), [
    ("wait=31", "good", 400, "invalid_wait"),
    ("wait=soon", "good", 400, "invalid_wait"),
    ("wait=0", None, 401, "not_authenticated"),
    ("wait=0", "Bearer fgc_nope.nope", 401, "credential_unknown"),
    ("wait=0", "other", 403, "grove_mismatch"),
])
def test_errors_use_the_forest_shape(k8s_grove, fresh_grove, query, header, status, code):
    grove, credential = k8s_grove
    headers = {}
    if header == "good":
        headers["Authorization"] = f"Bearer {credential}"
    elif header == "other":
        headers["Authorization"] = f"Bearer {fresh_grove(name='other')[1]}"
    elif header:
        headers["Authorization"] = header
    response = async_to_sync(AsyncClient().get)(f"{V1}/groves/{grove.id}/changes?{query}", headers=headers)
    assert response.status_code == status and response.json()["code"] == code


def _assign_later(grove, delay: float):
    def work():
        try:
            time.sleep(delay)
            _assign(grove)
        finally:
            connection.close()

    thread = threading.Thread(target=work)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_a_waiting_poll_is_woken_by_redis_when_work_is_assigned(k8s_grove, settings):
    settings.PIPELINE_CHANGES_RECHECK_S = 25  # so only a pub/sub wake can answer early
    thread = _assign_later(k8s_grove[0], 1.0)
    response, elapsed = _poll(*k8s_grove, "wait=20")
    thread.join()
    assert len(response.json()["jobs"]) == 1
    assert elapsed < 5, f"woken after {elapsed:.1f}s: the pub/sub wake-up did not arrive"


@pytest.mark.django_db(transaction=True)
def test_without_redis_the_poll_falls_back_to_short_database_polling(k8s_grove, settings):
    settings.REDIS_URL = ""
    settings.PIPELINE_CHANGES_DB_POLL_S = 0.2
    thread = _assign_later(k8s_grove[0], 1.0)
    response, elapsed = _poll(*k8s_grove, "wait=20")
    thread.join()
    assert len(response.json()["jobs"]) == 1 and elapsed < 4


@pytest.mark.django_db
def test_schema_lists_the_long_poll_and_the_job_endpoints(anon_client):
    paths = anon_client.get("/api/schema/?format=json").json()["paths"]
    changes = paths["/api/forest/v1/groves/{grove_id}/changes"]["get"]
    assert {p["name"] for p in changes["parameters"]} >= {"grove_id", "wait"}
    assert "200" in changes["responses"]
    assert "post" in paths["/api/forest/v1/groves/{grove_id}/jobs/{job_id}/claim"]
    assert "post" in paths["/api/forest/v1/groves/{grove_id}/jobs/{job_id}/report"]
