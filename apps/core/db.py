"""Database connections for Host's processes: the pool health check, and the async pool of the lean wire.

Django 5.2 pools PostgreSQL connections per process (``OPTIONS["pool"]``, psycopg_pool): a request or a
Celery task borrows a connection and gives it back when Django closes it, so uvicorn's fresh thread per
request no longer opens a connection per request, and no thread keeps one (``CONN_MAX_AGE`` must stay 0).

The pool's stock health check (``CONN_HEALTH_CHECKS``) is an empty query on every borrow: one round trip
per request. ``check_if_idle`` checks locally (the client-side connection state) and sends the empty
query only to a connection that has not been checked for ``IDLE_CHECK_S``, i.e. one that sat in the pool
long enough for a server restart or an idle-session kill to have closed it. A connection that breaks
inside that window fails one request and is discarded by the pool when it comes back broken.

The lean wire routes (``apps.dispatch.api.lean``) run on the event loop and use ``await async_pool()``: one
``AsyncConnectionPool`` per event loop, built from the same ``DATABASES["default"]`` settings.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import time
import weakref

import psycopg
from psycopg import pq

IDLE_CHECK_S = float(os.environ.get("DATABASE_POOL_IDLE_CHECK_S", "5"))
_checked: dict[int, float] = {}


def check_if_idle(conn: psycopg.Connection) -> None:
    """psycopg_pool ``check`` callback: raise if ``conn`` is unusable; a round trip only after idling."""
    if conn.closed or conn.pgconn.status != pq.ConnStatus.OK:
        raise psycopg.OperationalError("pooled connection is closed")
    now = time.monotonic()
    key = id(conn)
    if now - _checked.get(key, float("-inf")) < IDLE_CHECK_S:
        return
    if len(_checked) > 4096:  # ids of connections long gone; an unknown id only costs one check
        _checked.clear()
    with contextlib.suppress(psycopg.Error):
        conn.autocommit = True
    conn.execute("")
    _checked[key] = now


_async_pools: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _conninfo() -> dict:
    # Read at first use, not import: the test runner renames the database before any request.
    from django.db import connections

    params = dict(connections["default"].get_connection_params())
    params.pop("context", None)  # Django's adapters are for its own cursors
    params.pop("prepare_threshold", None)
    params.pop("cursor_factory", None)
    return params


async def async_pool():
    """This event loop's opened pool for the lean wire routes (prepared statements on, autocommit)."""
    from django.conf import settings
    from psycopg_pool import AsyncConnectionPool

    loop = asyncio.get_running_loop()
    entry = _async_pools.get(loop)
    if entry is None:
        pool = AsyncConnectionPool(kwargs={**_conninfo(), "autocommit": True, "prepare_threshold": 0},
                                   min_size=1, max_size=settings.DATABASE_POOL_ASYNC_SIZE,
                                   timeout=settings.DATABASE_POOL_TIMEOUT_S, max_idle=300.0, open=False)
        entry = _async_pools[loop] = [pool, asyncio.Lock()]
    pool, lock = entry
    if pool.closed:
        async with lock:
            if pool.closed:
                await pool.open()
    return pool


def released(fn):
    """``fn`` (a sync database read for an async caller) giving its connection back to the pool when it
    returns, so a coroutine that waits between reads (the ``changes`` long-poll) holds no connection while
    it waits. Inside a transaction (a test's) the connection stays: closing it would break the transaction."""
    from django.db import connection

    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            if not connection.in_atomic_block:
                connection.close()

    return run


async def async_pool_close() -> None:
    """Close this event loop's lean-route pool (tests that drive the ASGI app, process shutdown)."""
    entry = _async_pools.pop(asyncio.get_running_loop(), None)
    if entry is not None:
        await entry[0].close()
