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
import functools
import os
import time
import weakref
from datetime import datetime
from typing import TYPE_CHECKING, Any

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


class _SqlNames:
    """A model in ``sql_from_meta``'s template: ``{g}`` is its table, ``{g.field}`` a field's column."""

    def __init__(self, model) -> None:
        self._model = model

    def __format__(self, spec: str) -> str:
        return self._model._meta.db_table

    def __getattr__(self, name: str) -> str:
        try:
            return _fields_by_name(self._model)[name].column
        except KeyError:
            raise AttributeError(f"{self._model.__name__} has no concrete field {name!r}") from None


def sql_from_meta(template: str, **models) -> str:
    """``template`` (SQL written as a ``str.format`` template) with each model's table and columns read
    from its ``_meta``: ``sql_from_meta("SELECT {g.slug} FROM {g} g", g=Grove)``. A renamed field or table
    is followed, and a field that no longer exists fails when the statement is built (at first use, or at
    import), not when it runs. Every raw statement in apps/ names its tables and columns this way."""
    return template.format(**{name: _SqlNames(model) for name, model in models.items()})


def pg_array(values) -> str:
    """A PostgreSQL array literal of ``values`` (None for NULL, anything else by its ``str``: text, numbers,
    UUIDs, datetimes), for a parameter cast in SQL (``%s::uuid[]``, ``%s::text[]``). psycopg dumps a Python
    list element by element in Python (a batch's verify passed ~15,000 elements per statement); one joined
    string costs a fraction of that. Every element is quoted, so any text (commas, braces, spaces, quotes,
    backslashes) arrives as it was."""
    return "{" + ",".join("NULL" if value is None else '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
                          for value in values) + "}"


def copy_text(value: str) -> str:
    """``value`` as a field of ``COPY … FROM STDIN`` text format: backslash, tab, newline and carriage return
    escaped (PostgreSQL's rules; nothing else is special). A row built from these is what psycopg's
    ``write_row`` sends, without its per-value dumping."""
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return value


def copy_field(value) -> str:
    """One value as a field of ``COPY … FROM STDIN`` text format: NULL, a boolean, a number, a datetime
    (ISO 8601), or text (``copy_text``)."""
    if isinstance(value, str):  # most of a row: tested first
        return copy_text(value)
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def select_columns(model, *, alias: str, exclude: tuple[str, ...] = (), prefix: str = "") -> str:
    """The SELECT list of ``model``'s concrete columns (less the fields named in ``exclude``), for a hot
    read written as SQL: ``Model.objects.raw`` maps the columns back to fields (with their converters),
    and ``prefix`` names a second model's columns in the same row apart.

    The ORM costs about 0.5 ms of CPU to build and compile one lookup here, more than the database takes
    to answer it; the reads every Grove report pays (its credential with its Grove, its job's row lock,
    the run's nodes for the inline tail) are written this way, from the models' own metadata so a new
    field is never missed. Everything else uses the ORM.
    """
    return ", ".join(f'{alias}."{field.column}" AS "{prefix}{field.column}"' for field in model._meta.concrete_fields
                     if field.name not in exclude)


def instance_from_row(model, row, *, prefix: str):
    """A ``model`` instance from the ``prefix``-named columns of a raw row (``select_columns(prefix=...)``),
    as the ORM loads one: each value through its field's database converters (JSON, and on SQLite UUIDs
    and datetimes), then ``from_db`` (not new, bound to the default database)."""
    from django.db import connection

    fields, values = model._meta.concrete_fields, []
    for field in fields:
        value, column = getattr(row, f"{prefix}{field.column}"), field.get_col(model._meta.db_table)
        for convert in [*connection.ops.get_db_converters(column), *field.get_db_converters(connection)]:
            value = convert(value, column, connection)
        values.append(value)
    return model.from_db("default", [f.attname for f in fields], values)


def save_fields(instance, names) -> None:
    """``instance.save(update_fields=names)`` as one UPDATE by primary key, without the ORM's query
    building (the same SQL and values: each field's ``pre_save`` and ``get_db_prep_save``). Raises as
    Django does when no row was updated."""
    from django.db import DatabaseError, connections

    model: Any = type(instance)
    meta = model._meta
    by_name = _fields_by_name(model)
    fields = list({by_name[name].attname: by_name[name] for name in names}.values())
    if not fields:
        return
    connection = connections[instance._state.db or "default"]
    values = [field.get_db_prep_save(field.pre_save(instance, False), connection) for field in fields]
    quote = connection.ops.quote_name
    sets = ", ".join(f"{quote(field.column)} = %s" for field in fields)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {quote(meta.db_table)} SET {sets} WHERE {quote(meta.pk.column)} = %s",
                       [*values, meta.pk.get_db_prep_value(instance.pk, connection)])
        if cursor.rowcount == 0:
            raise DatabaseError("Save with update_fields did not affect any rows.")


if TYPE_CHECKING:
    from django.db.models import Model as _SavedModel
else:
    _SavedModel = object


class LeanSave(_SavedModel):
    """Model mixin: ``save(update_fields=...)`` of a stored row is ``save_fields`` (0.3 to 0.4 of the CPU of
    Django's save: docs/architecture.md "Fast paths"), whether or not anything listens to its save signals.
    Every state transition saves this way (``Lifecycle.apply``), several per Grove report.

    The rule, the same with and without receivers: the same single UPDATE, and ``pre_save`` / ``post_save``
    sent around it with the arguments Django's own save sends (``raw=False``, ``using``, ``update_fields``
    as a frozenset, ``created=False``), so a receiver cannot tell the two apart. An empty ``update_fields``
    writes and sends nothing, as Django's does. Any other save (a new row, no ``update_fields``, other
    arguments, a name that is not a concrete non-key field) is Django's own, which also raises its errors.
    tests/core/test_db_hot_reads.py connects a receiver and holds both to this."""

    def save(self, *args, update_fields=None, **kwargs):
        from django.db import transaction
        from django.db.models import signals

        if (update_fields is None or args or kwargs or self._state.adding or self.pk is None
                or not set(update_fields) <= _updatable_names(type(self))):
            return super().save(*args, update_fields=update_fields, **kwargs)
        names = frozenset(update_fields)
        if not names:
            return None
        sender, using = type(self), self._state.db or "default"
        signals.pre_save.send(sender=sender, instance=self, raw=False, using=using, update_fields=names)
        with transaction.mark_for_rollback_on_error(using):
            save_fields(self, list(dict.fromkeys(update_fields)))
        self._state.db, self._state.adding = using, False
        signals.post_save.send(sender=sender, instance=self, created=False, update_fields=names, raw=False,
                               using=using)
        return None


def lock_clause(*, of: tuple[str, ...] = (), skip_locked: bool = False) -> str:
    """The row-lock clause of a hot read written as SQL, as ``select_for_update(no_key=True, ...)`` would
    write it on this database: ``FOR NO KEY UPDATE [OF ...] [SKIP LOCKED]`` on PostgreSQL, nothing on the
    embedded SQLite (which locks the whole database per write transaction, as Django does there)."""
    from django.db import connection

    features = connection.features
    if not features.has_select_for_update:
        return ""
    clause = " FOR NO KEY UPDATE" if features.has_select_for_no_key_update else " FOR UPDATE"
    if of and features.has_select_for_update_of:
        clause += " OF " + ", ".join(of)
    if skip_locked and features.has_select_for_update_skip_locked:
        clause += " SKIP LOCKED"
    return clause


def db_params(model, **values) -> list:
    """Parameters for a hot read written as SQL, in keyword order, each as ``model``'s field (named by its
    attname) writes it for this database (a UUID is 32 hex characters on SQLite, a uuid on PostgreSQL)."""
    from django.db import connection

    fields = _fields_by_name(model)
    return [fields[name].get_db_prep_value(value, connection) for name, value in values.items()]


@functools.cache
def _updatable_names(model: Any) -> frozenset[str]:
    """The names ``save(update_fields=...)`` accepts: concrete fields less the primary key, by name and attname."""
    return frozenset(name for field in model._meta.concrete_fields if not field.primary_key
                     for name in (field.name, field.attname))


@functools.cache
def _fields_by_name(model: Any) -> dict[str, Any]:
    """``model``'s concrete fields by name and by attname (``grove`` and ``grove_id`` alike)."""
    fields = model._meta.concrete_fields
    return {**{f.name: f for f in fields}, **{f.attname: f for f in fields}}


def advisory_locks(namespace: int, keys) -> None:
    """Transaction-level advisory locks (PostgreSQL) on ``keys`` taken in one order, sorted, before the
    writer touches anything else: writers that claim unique names another writer may also claim (host
    names) then wait on each other in a line, never in a cycle (no deadlock), and the later one sees the
    earlier one's committed claim and is refused with its own 409. Deadlocks and serialization failures
    that still reach a view are 409 ``write_conflict`` (``apps.core.api.exceptions``), never a 500."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for key in sorted(set(keys)):
            cursor.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [namespace, key])
