"""The lean ASGI routes (apps/dispatch/api/lean.py) in front of Django, through the real ASGI application
(``forest_host.asgi.application``) over httpx's ASGI transport, on real PostgreSQL (and real Redis for the
long-poll's wake-ups). Transactional tests: the lean route writes on its own async pool, so the rows must
be committed for it to see them."""
from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from apps.core import db
from apps.dispatch.api import lean
from apps.groves import rules
from apps.groves import services as grove_services
from apps.groves.models import CapacityReport, Grove, PlacementUnit
from forest_host.asgi import application
from tests.factories import heartbeat_body

V1 = "/api/forest/v1"
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def loop():
    """One event loop for the module: the lean route keeps one async pool per loop, closed at the end."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.run_until_complete(_pool_close())
    loop.close()


async def _pool_close() -> None:
    """Close this event loop's lean-route pool (apps.core.db keeps one per loop while the loop lives)."""
    entry = db._async_pools.pop(asyncio.get_running_loop(), None)
    if entry is not None:
        await entry[0].close()


@pytest.fixture(autouse=True)
def _runner(loop, monkeypatch):
    monkeypatch.setattr(asyncio, "run", loop.run_until_complete)


def served(route: str, outcome: str) -> float:
    return lean.LEAN.labels(route, outcome)._value.get()


def post(path: str, *, credential: str | None, body=None, content: bytes | None = None,
         content_type: str = "application/json", host: str = "testserver") -> httpx.Response:
    async def go():
        headers = {"Host": host, "Content-Type": content_type}
        if credential is not None:
            headers["Authorization"] = f"Bearer {credential}"
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            data = content if content is not None else json.dumps(body).encode()
            return await client.post(path, content=data, headers=headers)

    return asyncio.run(go())


def get(path: str, *, credential: str | None) -> httpx.Response:
    async def go():
        headers = {"Authorization": f"Bearer {credential}"} if credential else {}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application),
                                     base_url="http://testserver") as client:
            return await client.get(path, headers=headers)

    return asyncio.run(go())


def test_an_unchanged_heartbeat_is_answered_by_the_lean_route(fresh_grove):
    grove, credential = fresh_grove(gpus=1)
    before = served("heartbeat", "served")
    response = post(f"{V1}/groves/{grove.id}/heartbeat", credential=credential,
                    body=heartbeat_body(gpus=1, log_tail=["lean"]))
    assert response.status_code == 200, response.text
    assert set(response.json()) == {"server_time", "stale_after_s"}
    assert response.json()["server_time"].endswith("Z")
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert served("heartbeat", "served") == before + 1
    grove.refresh_from_db()
    assert grove.log_tail == ["lean"] and not grove.stale


def test_a_free_count_change_is_one_small_write_without_history(fresh_grove):
    grove, credential = fresh_grove(gpus=2)
    reports = CapacityReport.objects.filter(grove=grove).count()
    busy = heartbeat_body(gpus=2)
    unit = busy["capacity"]["placement_units"][0]
    unit["cpu_milli"]["free"] -= 1000
    unit["accelerators"][1]["free"] = 0
    before = served("heartbeat", "served")
    stamped = Grove.objects.get(pk=grove.pk).updated_at
    response = post(f"{V1}/groves/{grove.id}/heartbeat", credential=credential, body=busy)
    assert response.status_code == 200
    assert served("heartbeat", "served") == before + 1
    row = PlacementUnit.objects.get(grove=grove)
    assert row.cpu_milli_free == unit["cpu_milli"]["free"]
    assert row.accelerators == unit["accelerators"]
    grove.refresh_from_db()
    assert grove.capacity["placement_units"][0]["cpu_milli"]["free"] == unit["cpu_milli"]["free"]
    assert grove.free_digest == rules.capacity_digests(grove.capacity, grove.change_kinds, grove.isolation_modes)[1]
    assert grove.updated_at > stamped  # the placement snapshot reloads this Grove's units
    assert CapacityReport.objects.filter(grove=grove).count() == reports


def test_a_changed_shape_goes_to_django_and_rewrites_inventory(fresh_grove):
    grove, credential = fresh_grove(gpus=1)
    reports = CapacityReport.objects.filter(grove=grove).count()
    before = served("heartbeat", "django")
    response = post(f"{V1}/groves/{grove.id}/heartbeat", credential=credential, body=heartbeat_body(gpus=3))
    assert response.status_code == 200 and set(response.json()) == {"server_time", "stale_after_s"}
    assert served("heartbeat", "django") == before + 1
    assert grove.accelerators.count() == 3
    assert CapacityReport.objects.filter(grove=grove).count() == reports + 1


def test_concurrent_heartbeats_share_one_statement_and_each_row_is_its_own(fresh_grove, monkeypatch):
    """Group commit: heartbeats that arrive while a statement is in flight go in the next one, each Grove's
    row with its own values; a refusal in the batch is Django's alone, and a Grove heartbeating twice at
    once waits for the following statement with its second beat. (Over the ASGI transport every request
    runs on this one event loop, so they queue while the first statement is in flight.)"""
    groves = [fresh_grove(name=f"b{i}") for i in range(8)]
    busy_grove, busy_credential = fresh_grove(name="busy", gpus=2)
    wrong = fresh_grove(name="wrong")[0]
    statements: list[list[str]] = []
    real_run = lean.HeartbeatBatch._run

    async def counted_run(rows):
        statements.append([row["grove"] for row in rows])
        return await real_run(rows)

    monkeypatch.setattr(lean.HeartbeatBatch, "_run", staticmethod(counted_run))
    busy = heartbeat_body(gpus=2)
    busy["capacity"]["placement_units"][0]["cpu_milli"]["free"] -= 2000
    first, *others = groves
    requests = [(first, heartbeat_body(log_tail=["first"]))]
    requests += [((grove, credential), heartbeat_body(log_tail=[f"beat {grove.name}"]))
                 for grove, credential in others]
    requests += [((busy_grove, busy_credential), busy), ((wrong, first[1]), heartbeat_body()),
                 (first, heartbeat_body(log_tail=["second"]))]
    before = served("heartbeat", "served"), served("heartbeat", "django")

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application),
                                     base_url="http://testserver") as client:
            return await asyncio.gather(*(client.post(
                f"{V1}/groves/{grove.id}/heartbeat", content=json.dumps(body).encode(),
                headers={"Authorization": f"Bearer {credential}", "Content-Type": "application/json"})
                for (grove, credential), body in requests))

    responses = asyncio.run(go())
    assert [r.status_code for r in responses] == [200] * (len(requests) - 2) + [403, 200]
    assert responses[-2].json()["code"] == "grove_mismatch"
    named = [grove for statement in statements for grove in statement]
    assert sorted(named) == sorted(str(grove.id) for (grove, _), _ in requests)  # each beat in one statement
    assert all(len(set(statement)) == len(statement) for statement in statements)
    assert len(statements) < len(requests) - 1 and max(map(len, statements)) > 1
    assert (served("heartbeat", "served"), served("heartbeat", "django")) == (before[0] + len(requests) - 1,
                                                                              before[1] + 1)
    for grove, _ in others:
        assert Grove.objects.get(pk=grove.pk).log_tail == [f"beat {grove.name}"]
    assert Grove.objects.get(pk=first[0].pk).log_tail == ["second"]
    assert PlacementUnit.objects.get(grove=busy_grove).cpu_milli_free == \
        busy["capacity"]["placement_units"][0]["cpu_milli"]["free"]


def test_a_failed_batch_is_answered_by_django(fresh_grove, monkeypatch):
    grove, credential = fresh_grove()

    async def broken(rows):
        raise OSError("connection lost")

    monkeypatch.setattr(lean.HeartbeatBatch, "_run", staticmethod(broken))
    before = served("heartbeat", "django")
    response = post(f"{V1}/groves/{grove.id}/heartbeat", credential=credential,
                    body=heartbeat_body(log_tail=["via django"]))
    assert response.status_code == 200
    assert served("heartbeat", "django") == before + 1
    assert Grove.objects.get(pk=grove.pk).log_tail == ["via django"]


def _job(grove, n: int):
    from apps.dispatch import services as dispatch

    return dispatch.grove_job_create(grove=grove, run_id=uuid.uuid4(), node_id=n, change_kind="native.job",
                                     payload={"node": f"n{n}", "timeout_s": 60}, idempotency_key=f"lean:{n}",
                                     attempt=1)


def test_claim_and_report_are_served_lean_with_the_bytes_django_sends(fresh_grove, settings):
    grove, credential = fresh_grove()
    lean_job, django_job = _job(grove, 1), _job(grove, 2)
    answers = {}
    for job, on in ((lean_job, True), (django_job, False)):
        settings.FOREST_LEAN_WIRE = on
        before = served("claim", "served"), served("report", "served")
        claim = post(f"{V1}/groves/{grove.id}/jobs/{job.id}/claim", credential=credential, body={})
        running = post(f"{V1}/groves/{grove.id}/jobs/{job.id}/report", credential=credential,
                       body={"state": "running", "log_tail": ["go"]})
        done = post(f"{V1}/groves/{grove.id}/jobs/{job.id}/report", credential=credential,
                    body={"state": "succeeded", "exit_code": 0, "outputs": {"digest": "sha256:" + "a" * 64}})
        again = post(f"{V1}/groves/{grove.id}/jobs/{job.id}/report", credential=credential,
                     body={"state": "succeeded", "exit_code": 0})
        assert [r.status_code for r in (claim, running, done, again)] == [200] * 4
        counted = 2 + 1 + 1 if on else 0  # claim, then three reports
        assert served("claim", "served") + served("report", "served") == sum(before) + counted
        answers[on] = [r.content.replace(str(job.id).encode(), b"JOB").replace(str(job.run_id).encode(), b"RUN")
                       for r in (claim, running, done, again)]
        job.refresh_from_db()
        assert job.status == "succeeded" and job.log_tail == ["go"] and job.exit_code == 0
    answers[False][0] = answers[False][0].replace(b'"node":"n2"', b'"node":"n1"').replace(b"lean:2", b"lean:1")
    settings.FOREST_LEAN_WIRE = True
    bodyless = _job(grove, 3)  # a claim takes no body: one sent without any is served too
    before = served("claim", "served")
    response = post(f"{V1}/groves/{grove.id}/jobs/{bodyless.id}/claim", credential=credential, content=b"",
                    content_type="")
    assert response.status_code == 200 and served("claim", "served") == before + 1
    assert answers[True] == answers[False]
    assert json.loads(answers[True][3]) == {"job_id": "JOB", "status": "succeeded", "accepted": False}


@pytest.mark.parametrize(("case", "status", "code"), [
    ("claimed twice", 409, "already_claimed"),
    ("report before claim", 409, "job_not_claimed"),
    ("unknown job", 404, "job_not_found"),
    ("other grove", 403, "grove_mismatch"),
    ("unknown credential", 401, "credential_unknown"),
    ("bad state", 400, "invalid_choice"),
])
def test_claim_and_report_refusals_write_nothing_and_answer_as_django_does(fresh_grove, settings, case, status,
                                                                            code):
    grove, credential = fresh_grove()
    job = _job(grove, 1)
    call, body, job_id = "report", {"state": "succeeded", "exit_code": 0}, job.id
    if case == "claimed twice":
        assert post(f"{V1}/groves/{grove.id}/jobs/{job.id}/claim", credential=credential, body={}).status_code == 200
        call, body = "claim", {}
    elif case == "unknown job":
        job_id = uuid.uuid4()
    elif case == "other grove":
        credential = fresh_grove(name="other")[1]
    elif case == "unknown credential":
        credential = "fgc_deadbeef.nope"
    elif case == "bad state":
        assert post(f"{V1}/groves/{grove.id}/jobs/{job.id}/claim", credential=credential, body={}).status_code == 200
        body = {"state": "exploded"}
    before = served(call, "django"), served(call, "refused")
    status_before = type(job).objects.get(pk=job.pk).status
    response = post(f"{V1}/groves/{grove.id}/jobs/{job_id}/{call}", credential=credential, body=body)
    assert response.status_code == status, response.text
    assert response.json()["code"] == code
    # A service's refusal is answered by the lean route; a refused credential is Django's.
    django_answers = case in {"other grove", "unknown credential"}
    assert (served(call, "django"), served(call, "refused")) == (before[0] + django_answers,
                                                                  before[1] + (not django_answers))
    assert type(job).objects.get(pk=job.pk).status == status_before
    # The same body and status as Django's own answer.
    settings.FOREST_LEAN_WIRE = False
    again = post(f"{V1}/groves/{grove.id}/jobs/{job_id}/{call}", credential=credential, body=body)
    assert (again.status_code, again.json()) == (response.status_code, response.json())


@pytest.mark.parametrize(("case", "status", "code"), [
    ("unknown", 401, "credential_unknown"),
    ("other", 403, "grove_mismatch"),
    ("malformed", 400, "malformed_json"),
    ("nan", 400, "malformed_json"),
    ("invalid", 400, "invalid_type"),
    ("missing", 401, "not_authenticated"),
])
def test_every_refusal_is_djangos(fresh_grove, case, status, code):
    grove, credential = fresh_grove()
    other = fresh_grove(name="other")[1]
    body, content = heartbeat_body(), None
    if case == "unknown":
        credential = "fgc_deadbeef.nope"
    elif case == "other":
        credential = other
    elif case == "malformed":
        content = b"{"
    elif case == "nan":
        content = json.dumps(heartbeat_body()).replace('"forest-agent 0.1.0"', "NaN").encode()
    elif case == "invalid":
        body["capacity"] = []
    elif case == "missing":
        credential = None
    response = post(f"{V1}/groves/{grove.id}/heartbeat", credential=credential, body=body, content=content)
    assert response.status_code == status, response.text
    assert response.json()["code"] == code


def test_an_oversized_body_and_an_unknown_host_are_djangos(fresh_grove, settings):
    grove, credential = fresh_grove()
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    response = post(f"{V1}/groves/{grove.id}/heartbeat", credential=credential,
                    body=heartbeat_body(log_tail=["x" * 3000] * 10))
    assert response.status_code == 413 and response.json()["code"] == "payload_too_large"
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024
    response = post(f"{V1}/groves/{grove.id}/heartbeat", credential=credential, body=heartbeat_body(),
                    host="evil.example")
    assert response.status_code == 400  # Django's DisallowedHost


def test_the_lean_routes_can_be_turned_off(fresh_grove, settings):
    settings.FOREST_LEAN_WIRE = False
    grove, credential = fresh_grove()
    before = served("heartbeat", "served"), served("heartbeat", "django")
    response = post(f"{V1}/groves/{grove.id}/heartbeat", credential=credential, body=heartbeat_body())
    assert response.status_code == 200
    assert (served("heartbeat", "served"), served("heartbeat", "django")) == before


def test_changes_is_served_lean_and_refusals_by_django(fresh_grove):
    grove, credential = fresh_grove()
    before = served("changes", "served")
    response = get(f"{V1}/groves/{grove.id}/changes?wait=0", credential=credential)
    assert response.status_code == 200 and response.json() == {"jobs": [], "workloads": [], "cancel": []}
    assert served("changes", "served") == before + 1
    assert get(f"{V1}/groves/{grove.id}/changes?wait=31", credential=credential).json()["code"] == "invalid_wait"
    other = fresh_grove(name="other")[1]
    assert get(f"{V1}/groves/{grove.id}/changes?wait=0", credential=other).json()["code"] == "grove_mismatch"
    assert get(f"{V1}/groves/{grove.id}/changes?wait=0", credential=None).status_code == 401


def test_liveness_writes_are_hot_and_keep_updated_at_within_the_touch_window(fresh_grove):
    """A liveness-only heartbeat touches no indexed column (HOT) and leaves ``updated_at`` alone while it is
    within the touch window of the last stamp; past the window, moving backwards, or with any other
    column changed, the row is stamped so placement's snapshot reloads it."""
    from django.db import connection

    grove, credential = fresh_grove()
    url = f"{V1}/groves/{grove.id}/heartbeat"

    def counters():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'groves_grove'")
            return cursor.fetchone()

    with connection.cursor() as cursor:
        cursor.execute("VACUUM groves_grove")
    stamped = Grove.objects.get(pk=grove.pk).updated_at
    upd, hot = counters()
    for _ in range(5):  # the statement the lean route runs, here on this test's connection to read its stats
        assert grove_services.grove_heartbeat_unchanged(grove_id=grove.pk, presented=credential, body=heartbeat_body())
    upd2, hot2 = counters()
    assert upd2 - upd == 5 and hot2 - hot == 5
    assert post(url, credential=credential, body=heartbeat_body()).status_code == 200
    assert Grove.objects.get(pk=grove.pk).updated_at == stamped

    # Past the window: the stamp moves, carrying the new heartbeat time. (Moving the heartbeat back a
    # minute is itself stamped, with that heartbeat time, so the next beat is past the window.)
    Grove.objects.filter(pk=grove.pk).update(last_heartbeat_at=timezone.now() - timedelta(minutes=1))
    stamped = Grove.objects.get(pk=grove.pk).updated_at
    assert post(url, credential=credential, body=heartbeat_body()).status_code == 200
    row = Grove.objects.get(pk=grove.pk)
    assert row.updated_at > stamped and row.liveness_stamped_at == row.last_heartbeat_at

    # A heartbeat moved backwards (an operator, a test) and any other column are stamped too.
    for change in ({"last_heartbeat_at": timezone.now() - timedelta(minutes=5)}, {"enabled": False}):
        before = Grove.objects.get(pk=grove.pk).updated_at
        Grove.objects.filter(pk=grove.pk).update(**change)
        assert Grove.objects.get(pk=grove.pk).updated_at > before


def test_the_trigger_names_every_grove_column():
    """The touch trigger keeps ``updated_at`` only when nothing outside liveness changed; a new Grove column
    must be added to its comparison (migration) or to liveness here, or the snapshot would miss its writes."""
    from importlib import import_module

    trigger = import_module("apps.groves.migrations.0006_grove_placement_preference").TRIGGER
    liveness = {"last_heartbeat_at", "stale_since", "log_tail", "updated_at", "liveness_stamped_at",
                "capacity",  # capacity only changes with its digests, which are compared
                # written with every heartbeat like liveness; read from the table by ingress, never by the
                # placement snapshot, so a move need not stamp updated_at
                "mesh_address", "mesh_proxy_port"}
    for field in Grove._meta.concrete_fields:
        if field.column not in liveness:
            assert f"NEW.{field.column}" in trigger and f"OLD.{field.column}" in trigger, field.column


def test_waiting_long_polls_hold_no_database_connection(fresh_grove):
    """40 Groves waiting in ``changes`` at once: the database sees only the pools' few connections (each
    read gives its connection back before the wait), not one per waiting Grove."""
    import psycopg
    from django.db import connection

    groves = [fresh_grove(name=f"g{i}") for i in range(40)]
    name = connection.settings_dict["NAME"]
    connection.close()
    seen = {}

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application),
                                     base_url="http://testserver", timeout=30) as client:
            async def poll(grove, credential):
                return await client.get(f"{V1}/groves/{grove.id}/changes?wait=3",
                                        headers={"Authorization": f"Bearer {credential}"})

            async def sample():
                await asyncio.sleep(1.5)  # every poll is in its wait by now
                async with await psycopg.AsyncConnection.connect(dbname="postgres", host="127.0.0.1",
                                                                 user="postgres", autocommit=True) as admin:
                    cursor = await admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [name])
                    seen["sessions"] = (await cursor.fetchone())[0]

            answers = await asyncio.gather(*(poll(g, c) for g, c in groves), sample())
            return answers[:-1]

    answers = asyncio.run(go())
    assert [a.status_code for a in answers] == [200] * 40
    assert seen["sessions"] < 20, seen


@pytest.mark.parametrize("lean_on", [True, False])
def test_a_poll_or_a_claim_makes_a_grove_ready_and_writes_at_most_once_per_window(fresh_grove, settings, lean_on):
    """Readiness comes from polling (lean route or Django alike), written coarsely: a second poll within
    GROVE_POLL_STAMP_S writes nothing; a claim stamps too."""
    settings.FOREST_LEAN_WIRE = lean_on
    grove, credential = fresh_grove(polled=False)
    assert Grove.objects.get(pk=grove.pk).ready is False  # heartbeats alone: live, not ready
    assert get(f"{V1}/groves/{grove.id}/changes?wait=0", credential=credential).status_code == 200
    first = Grove.objects.get(pk=grove.pk).last_polled_at
    assert first is not None and Grove.objects.get(pk=grove.pk).ready is True
    assert get(f"{V1}/groves/{grove.id}/changes?wait=0", credential=credential).status_code == 200
    assert Grove.objects.get(pk=grove.pk).last_polled_at == first  # within the window: no write
    Grove.objects.filter(pk=grove.pk).update(last_polled_at=None)
    job = _job(grove, 40 + lean_on)
    assert post(f"{V1}/groves/{grove.id}/jobs/{job.id}/claim", credential=credential, body={}).status_code == 200
    assert Grove.objects.get(pk=grove.pk).last_polled_at is not None


def test_the_first_poll_stamps_updated_at_and_a_steady_one_stays_hot(fresh_grove):
    """The trigger (groves migration 0005): a first poll (or one after a silence) moves ``updated_at`` so
    every fleet snapshot reloads the Grove as ready; a poll stamp close to the last one does not."""
    grove, _credential = fresh_grove(polled=False)
    before = Grove.objects.get(pk=grove.pk).updated_at
    grove_services.grove_poll_record(grove=Grove.objects.get(pk=grove.pk))
    stamped = Grove.objects.get(pk=grove.pk)
    assert stamped.updated_at > before
    first, first_updated = stamped.last_polled_at, stamped.updated_at
    assert grove_services.grove_poll_record(grove=stamped, now=first + timedelta(seconds=11))
    again = Grove.objects.get(pk=grove.pk)
    assert again.last_polled_at == first + timedelta(seconds=11) and again.updated_at == first_updated


def test_two_heartbeat_batches_fly_at_once_and_never_name_one_grove_twice(monkeypatch, settings):
    """With two statements allowed in flight per event loop, a second batch starts while the first waits on
    PostgreSQL, and a Grove's next beat waits for a batch after the one carrying its last (no two statements
    in flight name one Grove; its beats commit in order)."""
    settings.FOREST_HEARTBEAT_BATCHES_IN_FLIGHT = 2
    statements: list[list[str]] = []
    in_flight: list[set[str]] = []

    async def run():
        batch = lean.HeartbeatBatch()
        started, overlapped, release = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def held_run(rows):
            names = [row["grove"] for row in rows]
            statements.append(names)
            in_flight.append(set(names))
            started.set()
            if len(in_flight) == 2:
                overlapped.set()
            await release.wait()
            in_flight.remove(set(names))
            return dict.fromkeys(names, False)

        monkeypatch.setattr(batch, "_run", held_run)
        first = asyncio.ensure_future(batch.record({"grove": "a"}))
        await started.wait()  # the first statement is in flight with "a"
        rest = [asyncio.ensure_future(batch.record({"grove": g})) for g in ("b", "a", "c")]
        await overlapped.wait()  # a second statement started while the first still waits
        release.set()
        return await asyncio.gather(first, *rest)

    assert asyncio.run(run()) == [True, True, True, True]
    assert statements == [["a"], ["b", "c"], ["a"]]  # "a" again waited for the statement after its first


def test_a_steady_groves_repeated_body_skips_parsing_and_still_records_each_beat(fresh_grove, monkeypatch):
    """The same credential and body bytes give the same row (less its time): the second beat is not parsed
    or validated again, yet it is written (its time moves); other bytes are read afresh."""
    grove, credential = fresh_grove()
    built = []
    real_row = grove_services.heartbeat_fast_row

    def counted_row(**kwargs):
        built.append(kwargs["grove_id"])
        return real_row(**kwargs)

    monkeypatch.setattr(grove_services, "heartbeat_fast_row", counted_row)
    steady = json.dumps(heartbeat_body(log_tail=["steady"])).encode()
    assert post(f"{V1}/groves/{grove.id}/heartbeat", credential=credential, content=steady).status_code == 200
    first = Grove.objects.get(pk=grove.pk).last_heartbeat_at
    assert post(f"{V1}/groves/{grove.id}/heartbeat", credential=credential, content=steady).status_code == 200
    assert Grove.objects.get(pk=grove.pk).last_heartbeat_at > first
    assert built == [str(grove.id)]  # parsed and validated once
    moved = json.dumps(heartbeat_body(log_tail=["moved"])).encode()
    assert post(f"{V1}/groves/{grove.id}/heartbeat", credential=credential, content=moved).status_code == 200
    assert built == [str(grove.id)] * 2
    assert Grove.objects.get(pk=grove.pk).log_tail == ["moved"]
