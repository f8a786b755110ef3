"""Outages answer, not crash: Host's own PostgreSQL and Redis go away under a live web process and come back.

Nothing is faked. The test starts a PostgreSQL cluster of its own (``initdb`` into a temporary folder, on a
free loopback port) and a Redis of its own, migrates Host onto them, serves Host with uvicorn, and stops
and starts those two servers while the CLI's client and forest-agent's wire client talk to Host over real
HTTP. The shared PostgreSQL and Redis that the rest of the suite uses are never touched.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from bench.ha import Proc, free_port
from bench.own_servers import PG_BIN, REDIS, OwnPostgres, OwnRedis
from tests.console import console_script

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]

SETUP = """
import json
from apps.accounts.services import api_token_create, role_grant, team_ensure, team_member_set
from apps.flags.services import flag_override_set
from apps.groves.services import enrollment_token_create
from django.contrib.auth import get_user_model
user = get_user_model().objects.create_user("ci", password="x")
team_ensure(slug="ml")
role_grant(username="ci", role="submitter")
team_member_set(slug="ml", username="ci", member=True)
flag_override_set(name="host.deploy.forest_compute_jobs", enabled=True, reason="outage test")
token = api_token_create(user=user, name="outage")[1]
enroll = enrollment_token_create(roles=["compute"], substrate="native")[1]
print(json.dumps({"token": token, "enroll": enroll}))
"""


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory):
    """One stack for the module (migrating costs seconds); the broker test runs last since it stops Redis."""
    tmp_path = tmp_path_factory.mktemp("outage")
    if PG_BIN is None or REDIS is None:
        pytest.fail("PostgreSQL server binaries and redis-server are required (scripts/services-up.sh)")
    pg, rd = OwnPostgres(), OwnRedis()
    pg.start()
    rd.start()
    pg.createdb()
    env = {**os.environ, "DATABASE_URL": pg.url, "CELERY_BROKER_URL": rd.url, "REDIS_URL": rd.url,
           "DJANGO_SETTINGS_MODULE": "tests.settings", "FLAGS_CACHE_TTL_S": "0", "LOG_LEVEL": "WARNING",
           "FOREST_VAR_DIR": str(tmp_path), "DATABASE_POOL_MAX_SIZE": "4", "DATABASE_POOL_TIMEOUT_S": "3",
           "FOREST_OUTAGE_RETRY_AFTER_S": "1"}
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], env=env, check=True, cwd=ROOT)
    made = subprocess.run([*manage, "shell", "-c", SETUP], env=env, check=True, cwd=ROOT, capture_output=True,
                          text=True)
    secrets = json.loads(made.stdout.strip().splitlines()[-1])
    port = free_port()
    web = Proc("web", [console_script("uvicorn"), "forest_host.asgi:application", "--host", "127.0.0.1",
                       "--port", str(port), "--log-level", "warning", "--no-access-log"], env, tmp_path).start()
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            threading.Event().wait(0.1)
    else:
        pytest.fail((tmp_path / "web.log").read_text(errors="replace")[-3000:])
    yield {"url": url, "pg": pg, "redis": rd, "log": tmp_path / "web.log", **secrets}
    web.kill()
    rd.stop()
    pg.remove()


HELLO = {"name": "hello", "environment": "dev", "steps": [{"name": "hi", "kind": "native",
                                                             "command": ["/bin/echo", "hi"], "timeout_s": 30}]}


def test_lost_database_answers_503_with_retry_after_on_every_door_and_clients_retry(own_stack):
    from forest_agent.wire.client import WireClient, WireError

    from forest_cli.client import ForestClient, ForestClientError

    url, pg = own_stack["url"], own_stack["pg"]
    wire = WireClient(url)
    enrolled = wire.enroll(token=own_stack["enroll"], name="outage-box", substrate="native",
                           platforms=["linux/amd64"], version="test")
    grove = WireClient(url, credential=enrolled["credential"], grove_id=enrolled["grove_id"])
    beat = {"version": "test", "change_kinds": ["native.job"], "isolation": ["host_process"],
            "capacity": {"placement_units": [], "accelerators": []}}
    grove.heartbeat(beat)
    cli = ForestClient(url, own_stack["token"], sleep=lambda s: None)
    assert cli.compute_submit(HELLO)["id"]

    pg.stop()
    try:
        api = httpx.post(f"{url}/api/forest/v1/compute/jobs", json=HELLO,
                         headers={"Authorization": f"Token {own_stack['token']}"}, timeout=30)
        assert api.status_code == 503, api.text
        assert api.json()["code"] == "database_unavailable"
        assert api.headers["Retry-After"] == "1"
        assert "X-Request-ID" in api.headers
        assert "refused" not in api.text.lower() and str(pg.port) not in api.text  # no OS error text

        with pytest.raises(WireError) as beat_error:  # the lean heartbeat route, handed to Django
            grove.heartbeat(beat)
        assert (beat_error.value.status, beat_error.value.code) == (503, "database_unavailable")
        assert beat_error.value.retryable and beat_error.value.retry_after_s == 1.0

        health = httpx.get(f"{url}/healthz", timeout=30)
        assert health.status_code == 503 and health.json()["code"] == "database_unavailable"
        assert str(pg.port) not in health.text

        # a page, not the API: a plain 503, not a 500
        page = httpx.get(f"{url}/staff/", timeout=30, headers={"Accept": "text/html"})
        assert page.status_code == 503, page.status_code
        assert "database_unavailable" in page.text and page.headers["Retry-After"] == "1"

        # The CLI's client retries the outage and succeeds once PostgreSQL is back: the restart happens in
        # its retry callback, so the second try is what meets the restarted server.
        retries: list[str] = []

        def restart_on_first_retry(exc: ForestClientError, delay: float, attempt: int) -> None:
            retries.append(exc.code)
            if attempt == 1:
                pg.start()

        patient = ForestClient(url, own_stack["token"], on_retry=restart_on_first_retry, sleep=lambda s: None)
        job = patient.compute_submit(HELLO)
    finally:
        if not pg.accepting():
            pg.start()
    assert job["id"] and retries and set(retries) == {"database_unavailable"}
    grove.heartbeat(beat)  # the agent's next beat goes through on the same web process
    log = own_stack["log"].read_text(errors="replace")
    assert "unhandled error in API view" not in log, log[-3000:]


def test_lost_broker_loses_nothing_and_never_answers_500(own_stack):
    """With Redis gone, a submission still answers 201: the database holds the node and its outbox row;
    the broker send is logged and left to the sweep (docs/architecture.md, the transactional outbox)."""
    from forest_cli.client import ForestClient

    own_stack["redis"].stop()
    cli = ForestClient(own_stack["url"], own_stack["token"], sleep=lambda s: None)
    job = cli.compute_submit(HELLO)
    assert job["id"]
    assert cli.compute_get(job["id"])["id"] == job["id"]
    assert "unhandled error in API view" not in own_stack["log"].read_text(errors="replace")
