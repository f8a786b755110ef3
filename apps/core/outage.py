"""Outages of what Host stands on, told apart from bugs: a lost database or broker connection is a 503
with a stable code and ``Retry-After``, on every door, never a 500.

Clients (the CLI, forest-agent, forest-controller) retry a 503 after ``Retry-After``; a 500 means Host
itself is wrong and retrying blindly hides it. Only *connection-level* failures count: a deadlock or a
serialization failure is the request's own business (the services retry those where it is safe), and a
constraint violation is a bug or a refusal.
"""
from __future__ import annotations

import sys

import psycopg
from django.conf import settings
from django.db import utils as db_utils

from apps.core.errors import ServiceUnavailable

DATABASE_UNAVAILABLE = "database_unavailable"
BROKER_UNAVAILABLE = "broker_unavailable"

# SQLSTATE classes of a connection that is gone or refused: 08 connection exception; 57P01-57P03 the
# server shutting down, crashed or not accepting connections yet; 53300 too many connections.
_DB_GONE_PREFIXES = ("08", "57P01", "57P02", "57P03", "53300")


def retry_after_s() -> int:
    return int(getattr(settings, "FOREST_OUTAGE_RETRY_AFTER_S", 2))


def _chain(exc: BaseException):
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _database_gone(exc: BaseException) -> bool:
    if isinstance(exc, db_utils.InterfaceError):
        return True
    if isinstance(exc, psycopg.InterfaceError):
        return True
    if isinstance(exc, psycopg.OperationalError):
        state = getattr(exc, "sqlstate", None)
        # No SQLSTATE: the driver lost or never had a connection (refused, reset, pool timeout).
        return state is None or state.startswith(_DB_GONE_PREFIXES)
    return False


def _broker_gone(exc: BaseException) -> bool:
    import kombu.exceptions
    import redis.exceptions

    return isinstance(exc, kombu.exceptions.OperationalError | redis.exceptions.ConnectionError
                      | redis.exceptions.TimeoutError)


def outage_of(exc: BaseException | None) -> ServiceUnavailable | None:
    """The 503 this exception stands for, or None when it is not an outage of a service Host needs."""
    if exc is None:
        return None
    for link in _chain(exc):
        if _database_gone(link):
            return ServiceUnavailable(DATABASE_UNAVAILABLE,
                                      "Host cannot reach its database right now; retry after a moment.",
                                      extra={"retry_after_s": retry_after_s()})
        if _broker_gone(link):
            return ServiceUnavailable(BROKER_UNAVAILABLE,
                                      "Host cannot reach its message broker right now; retry after a moment.",
                                      extra={"retry_after_s": retry_after_s()})
    return None


def remember_outage(sender, request=None, **kwargs) -> None:
    """``got_request_exception`` receiver: keep the outage the request died of for ``OutageMiddleware``.

    Django turns an exception raised in a view or middleware into a 500 before any outer middleware sees
    it; this signal is the one place that still holds the exception (``sys.exc_info()``).
    """
    if request is not None:
        request.forest_outage = outage_of(sys.exc_info()[1])
