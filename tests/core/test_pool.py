"""Pooled connections (apps/core/db.py, apps/core/dbbackend): Django's psycopg pool with a health check
that costs a round trip only after an idle spell, on real PostgreSQL. Round trips are counted with
libpq's own protocol trace."""
from __future__ import annotations

import time

import psycopg
import pytest
from django.db import connection

from apps.core import db


def _queries_sent(trace_path) -> int:
    return sum(1 for line in trace_path.read_text().splitlines() if "\tQuery\t" in line or "\tParse\t" in line)


@pytest.mark.django_db
def test_the_pool_uses_the_idle_check_and_no_persistent_connections(settings):
    assert connection.settings_dict["CONN_MAX_AGE"] == 0
    assert connection.settings_dict["CONN_HEALTH_CHECKS"] is False
    assert connection.pool is not None
    assert connection.pool._check is db.check_if_idle


def test_the_check_sends_a_query_only_after_idling(tmp_path, monkeypatch):
    from django.db import connections

    params = {k: v for k, v in connections["default"].get_connection_params().items()
              if k not in {"context", "prepare_threshold", "cursor_factory"}}
    params["dbname"] = "postgres"
    trace = tmp_path / "trace"
    with psycopg.connect(**params, autocommit=True) as conn, open(trace, "w") as out:
        conn.pgconn.trace(out.fileno())
        for _ in range(5):  # borrowed five times in a row: checked once
            db.check_if_idle(conn)
        conn.pgconn.untrace()
        out.flush()
        assert _queries_sent(trace) == 1
        monkeypatch.setattr(db, "IDLE_CHECK_S", 0.0)
        time.sleep(0.01)
        conn.pgconn.trace(out.fileno())
        db.check_if_idle(conn)
        conn.pgconn.untrace()
        out.flush()
        assert _queries_sent(trace) == 2
    with pytest.raises(psycopg.OperationalError):
        db.check_if_idle(conn)  # closed: refused locally, so the pool discards it


@pytest.mark.django_db(transaction=True)
def test_requests_give_their_connection_back(live_server):
    """Under a real server thread per request, the database sees at most the pool's connections."""
    import httpx
    from django.conf import settings

    name = connection.settings_dict["NAME"]
    with httpx.Client(base_url=live_server.url, timeout=10) as http:
        for _ in range(20):
            assert http.get("/healthz").status_code == 200
    with psycopg.connect(dbname="postgres", host="127.0.0.1", user="postgres", autocommit=True) as admin:
        (count,) = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [name]).fetchone()
    assert count <= settings.DATABASE_POOL_MAX_SIZE + 1  # + the async pool's one, if a test opened it
