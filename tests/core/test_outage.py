"""Which failures are outages (503 + Retry-After) and which are not (apps/core/outage.py); the executors'
and the CLI's reading of Retry-After. The live restart of PostgreSQL and Redis is tests/e2e/test_outages.py."""
from __future__ import annotations

import socket

import kombu.exceptions
import psycopg
import pytest
import redis
from django.db import utils as db_utils
from redis.backoff import NoBackoff
from redis.retry import Retry

from apps.core.api.exceptions import forest_exception_handler
from apps.core.outage import BROKER_UNAVAILABLE, DATABASE_UNAVAILABLE, outage_of


def _wrapped(inner: BaseException, outer_cls=db_utils.OperationalError) -> BaseException:
    """As Django's DatabaseErrorWrapper raises it: the driver's error is the cause."""
    try:
        try:
            raise inner
        except type(inner) as exc:
            raise outer_cls(str(exc)) from exc
    except outer_cls as outer:
        return outer


@pytest.mark.parametrize("exc, code", [
    (_wrapped(psycopg.OperationalError("connection refused")), DATABASE_UNAVAILABLE),
    (_wrapped(psycopg.errors.AdminShutdown("terminating connection")), DATABASE_UNAVAILABLE),
    (_wrapped(psycopg.InterfaceError("the connection is closed"), db_utils.InterfaceError), DATABASE_UNAVAILABLE),
    (kombu.exceptions.OperationalError("Error 111 connecting"), BROKER_UNAVAILABLE),
    (redis.exceptions.ConnectionError("Connection refused"), BROKER_UNAVAILABLE),
    (_wrapped(psycopg.errors.DeadlockDetected("deadlock detected")), None),
    (_wrapped(psycopg.errors.UniqueViolation("duplicate key"), db_utils.IntegrityError), None),
    (ValueError("a bug"), None),
])
def test_only_connection_level_failures_are_outages(exc, code):
    outage = outage_of(exc)
    assert (outage.code if outage else None) == code
    if outage:
        assert outage.status == 503 and "refused" not in outage.detail.lower()


def test_drf_handler_answers_an_outage_503_with_retry_after(settings):
    settings.FOREST_OUTAGE_RETRY_AFTER_S = 7
    response = forest_exception_handler(_wrapped(psycopg.OperationalError("could not connect to 10.0.0.5")), {})
    assert response.status_code == 503
    assert response.data["code"] == DATABASE_UNAVAILABLE and response["Retry-After"] == "7"
    assert "10.0.0.5" not in str(response.data)


def test_executors_wait_at_least_retry_after_and_never_past_their_cap():
    from forest_agent.backoff import Backoff
    from forest_agent.wire.client import retry_after_seconds

    assert retry_after_seconds("2") == 2.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert retry_after_seconds("nan") is None and retry_after_seconds(None) is None
    assert retry_after_seconds("99999") == 300.0
    backoff = Backoff(0.5, 10.0)
    assert backoff.next_delay(5.0) >= 5.0
    assert backoff.next_delay(60.0) == 10.0
    assert backoff.next_delay() <= 2.0


def test_a_redis_timeout_is_a_broker_outage_not_a_500(settings):
    """A real ``redis.exceptions.TimeoutError``: a loopback listener that accepts the connection (the kernel's
    backlog) and never answers, as a hung broker does. The API answers it 503 with Retry-After."""
    settings.FOREST_OUTAGE_RETRY_AFTER_S = 3
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        client = redis.Redis(host="127.0.0.1", port=silent.getsockname()[1], socket_timeout=0.2,
                             socket_connect_timeout=2, retry=Retry(NoBackoff(), 0))
        with pytest.raises(redis.exceptions.TimeoutError) as timed_out:
            client.ping()
        client.close()
    assert outage_of(timed_out.value).code == BROKER_UNAVAILABLE
    response = forest_exception_handler(timed_out.value, {})
    assert response.status_code == 503 and response.data["code"] == BROKER_UNAVAILABLE
    assert response["Retry-After"] == "3"
