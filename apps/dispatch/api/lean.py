"""Lean ASGI routes for the Grove hot paths, in front of Django: ``POST groves/{id}/heartbeat``,
``GET groves/{id}/changes`` and ``POST groves/{id}/jobs/{job}/claim`` and ``.../report``.

At fleet scale these two are nearly all of Host's traffic, and Django's stack costs more than their work:
eleven middleware (each sync-style one hops to a per-request thread, which a waiting long-poll would hold
for its whole wait), URL resolution, DRF's negotiation and a pooled-connection round trip per request. Here:

* **heartbeat**: the body is parsed and validated with the same rules, and the same one statement
  (``apps.groves.services.heartbeat_sql()``: auth, liveness and free counts) runs on this event loop's
  async pool as a prepared statement, for every heartbeat that arrived while the previous one ran
  (``HeartbeatBatch``: group commit; each answer still waits for its own row's commit, so nothing
  answered is lost). Only a heartbeat that statement records is answered here;
  anything else (a changed shape, a bad or oversized body, a wrong credential, a plain-HTTP request
  that must be redirected, a Host header Django would refuse) is handed to Django unchanged, which
  answers it exactly as before (codes, fields and all).
* **changes**: authenticated on the shared executor (no per-request thread), then the same
  ``wire.changes_answer`` as the Django view; every refusal is handed to Django for its error body.
* **claim, report**: the same services (``grove_job_claim``, ``grove_job_report``: auth, the job's row
  lock, the transition, the inline tail, all in their transaction) on their own threads
  (``FOREST_LEAN_JOB_THREADS``), so reports overlap their database waits, and pay no middleware, URL
  resolution or DRF negotiation. A service's
  refusal (``ForestError``: an unknown job, a conflict, a bad body) rolled its transaction back and is
  answered here with the body Django's exception handler gives it (a claim lost to another claimer is
  common: running it twice would double the cost of every lost race); a refused credential (its 401
  carries a challenge header and hints) and anything unusual about the request are handed to Django, as
  for the heartbeat.

What Django's middleware gives a request, the lean routes take from the same definitions
(``MIDDLEWARE_COVERAGE`` says, per entry of ``settings.MIDDLEWARE``, how: applied or waived and why; a test
fails when ``MIDDLEWARE`` gains an entry it does not name): the request id (``request_id_from``, bound to
every log line, ``X-Request-ID`` on every answer and passed on to Django on a hand-over), the security
headers (asked of Django's own middleware, ``security_headers``), the Host and HTTPS checks (Django's
``validate_host``; anything Django would redirect or refuse is handed to it), the flag snapshot. The Grove
credential is checked by ``apps.groves.services.grove_authenticate`` (and its SQL twin in the heartbeat
statement). ``FOREST_LEAN_WIRE=0`` turns the routes off (everything goes to Django), as does a database other
than PostgreSQL.
Counted in ``forest_wire_lean_total{route,outcome}``.
"""
from __future__ import annotations

import asyncio
import collections
import functools
import logging
import re
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.db import connections
from django.http import HttpRequest
from django.middleware.security import SecurityMiddleware
from django.utils import timezone
from prometheus_client import Counter

from apps.core import context
from apps.core.api.renderers import json_bytes
from apps.core.body import read_json
from apps.core.db import async_pool, released
from apps.core.errors import ForestError
from apps.core.middleware import bind_request_id, request_id_from, security_headers, unbind_request_id
from apps.dispatch import rules, selectors, services
from apps.dispatch.api.wire import changes_answer
from apps.flags.selectors import pinned_snapshot
from apps.groves import hooks as grove_hooks
from apps.groves import services as grove_services

log = logging.getLogger(__name__)
_UUID = r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"
HEARTBEAT = re.compile(rf"/api/forest/v1/groves/(?P<grove>{_UUID})/heartbeat")
CHANGES = re.compile(rf"/api/forest/v1/groves/(?P<grove>{_UUID})/changes")
JOB_CALL = re.compile(rf"/api/forest/v1/groves/(?P<grove>{_UUID})/jobs/(?P<job>{_UUID})/(?P<call>claim|report)")
LEAN = Counter("forest_wire_lean", "Grove hot-path requests seen by the lean ASGI routes",
               ["route", "outcome"])
BATCHES = Counter("forest_wire_heartbeat_batches", "Heartbeat statements the lean route ran (batches)")
# Rows per statement at most: a batch this size is a ~100 KB parameter and a few ms of PostgreSQL time,
# past which a bigger batch only makes its first heartbeat wait longer.
BATCH_MAX = 256
# Every entry of settings.MIDDLEWARE and what the lean routes do about it (tests/dispatch/test_lean_middleware.py
# fails when MIDDLEWARE gains an entry that is not named here).
MIDDLEWARE_COVERAGE = {
    "django_prometheus.middleware.PrometheusBeforeMiddleware":
        "waived: the lean routes count themselves (forest_wire_lean_total); a hand-over is counted by Django",
    "django.middleware.security.SecurityMiddleware":
        "applied: security_headers() asks it for its headers; its own process_request decides a redirect, "
        "and a request it would redirect goes to Django",
    "apps.core.middleware.RequestMiddleware":
        "applied: request_id_from/bind_request_id, X-Request-ID on every answer; the routes match UUIDs only, "
        "so no path can hold the characters it refuses",
    "apps.core.middleware.OutageMiddleware":
        "applied: any failure is handed to Django, whose answer to an outage is the 503",
    "django.contrib.sessions.middleware.SessionMiddleware": "waived: Groves send a bearer credential, no session",
    "django.middleware.common.CommonMiddleware":
        "applied: the Host check (Django's own request.get_host()); the routes are exact, so no slash is "
        "appended",
    "apps.core.middleware.ApiErrorShapeMiddleware":
        "applied: a lean answer is a served body or a ForestError's shape; anything else goes to Django",
    "django.middleware.csrf.CsrfViewMiddleware": "waived: bearer-authenticated wire API (csrf-exempt in Django too)",
    "django.contrib.auth.middleware.AuthenticationMiddleware": "waived: Grove credentials are not users",
    "apps.accounts.middleware.AuditMiddleware":
        "waived: Grove wire calls write no staff audit rows on Django either (no user)",
    "django.contrib.messages.middleware.MessageMiddleware": "waived: no messages on the API",
    "django.middleware.clickjacking.XFrameOptionsMiddleware": "applied: security_headers() asks it for its header",
    "django_htmx.middleware.HtmxMiddleware": "waived: no HTMX on the wire",
    "apps.flags.middleware.FlagSnapshotMiddleware": "applied: pinned_snapshot around each service call",
    "django_prometheus.middleware.PrometheusAfterMiddleware": "waived: as PrometheusBeforeMiddleware",
}


def _header(scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return value
    return None


class _ScopeRequest(HttpRequest):
    """The parts of Django's request that its Host check (``get_host``), ``is_secure`` and
    ``SecurityMiddleware.process_request`` read, built from the ASGI scope as Django's ``ASGIRequest`` builds
    them (headers into ``META``, a repeated header joined with commas, the scope's scheme), so the lean routes
    decide both with Django's own code rather than a copy of it. Building a whole ``ASGIRequest`` would add
    17 µs per request; the checks through this cost what the hand-written copy they replace cost (17 µs
    against 16 µs, shared 2-core box). Nothing else of a request is read from it."""

    def __init__(self, scope) -> None:  # not HttpRequest's: its QueryDicts and file handlers are never read
        self.path = scope["path"]
        server = scope.get("server") or ("unknown", 0)
        meta = {"SERVER_NAME": server[0] or "unknown", "SERVER_PORT": str(server[1] or 0),
                "QUERY_STRING": scope.get("query_string", b"").decode("latin-1")}
        for name, value in scope["headers"]:
            key = name.decode("latin-1").upper().replace("-", "_")
            key = key if key in ("CONTENT_LENGTH", "CONTENT_TYPE") else f"HTTP_{key}"
            value = value.decode("latin-1")
            meta[key] = f"{meta[key]},{value}" if key in meta else value
        self.META = meta
        self._scheme = scope.get("scheme") or "http"

    def _get_scheme(self) -> str:
        return self._scheme


def _django_request(scope) -> _ScopeRequest:
    request = scope.get("forest.lean_request")
    if request is None:
        request = scope["forest.lean_request"] = _ScopeRequest(scope)
    return request


@functools.cache
def _security_middleware(*settings_read: object) -> SecurityMiddleware:
    # Built again whenever a setting it reads changes (tests change them); otherwise once per process.
    def never_called(request):
        raise AssertionError("only process_request is asked")

    return SecurityMiddleware(never_called)


def _secure(scope) -> bool:
    """``request.is_secure()``, Django's own (the scheme, or the trusted proxy's header)."""
    return _django_request(scope).is_secure()


def _plain_enough(scope) -> bool:
    """Django would answer this request itself: its Host check passes (``get_host``, i.e. CommonMiddleware's
    ``ALLOWED_HOSTS`` check) and ``SecurityMiddleware`` would not redirect it to HTTPS."""
    request = _django_request(scope)
    try:
        request.get_host()
    except DisallowedHost:
        return False
    middleware = _security_middleware(settings.SECURE_SSL_REDIRECT, tuple(settings.SECURE_REDIRECT_EXEMPT),
                                      settings.SECURE_SSL_HOST)
    return middleware.process_request(request) is None


def _bearer(scope) -> str | None:
    parts = (_header(scope, b"authorization") or b"").split()
    if len(parts) != 2 or parts[0].lower() != b"bearer":
        return None
    return parts[1].decode(errors="replace")


async def _send_json(send, scope, status: int, body: dict) -> None:
    payload = json_bytes(body)  # the bytes the DRF routes' renderer sends
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
               (b"x-request-id", context.request_id.get().encode())]
    headers += [(name.lower().encode("latin-1"), value.encode("latin-1"))
                for name, value in security_headers(secure=_secure(scope))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


class _Replay:
    """An ASGI ``receive`` that first gives back the messages already read, then the live ones."""

    def __init__(self, messages: list[dict], receive) -> None:
        self.messages, self.receive = messages, receive

    async def __call__(self) -> dict:
        if self.messages:
            return self.messages.pop(0)
        return await self.receive()


@functools.cache
def _vendor() -> str:
    """The default database's vendor, asked once: ``connections["default"]`` in a fresh async context (every
    request is one) builds a new connection wrapper, ~15% of a lean heartbeat's CPU (bench/heartbeat.py)."""
    return connections["default"].vendor


class LeanWire:
    """ASGI middleware: serve the hot paths it can, pass everything else to ``app`` (Django)."""

    def __init__(self, app) -> None:
        self.app = app

    @staticmethod
    def _on() -> bool:
        # PostgreSQL only: the statement and the async pool are psycopg's (the embedded SQLite of
        # `make run` sends everything to Django).
        return settings.FOREST_LEAN_WIRE and _vendor() == "postgresql"

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and self._on():
            method, path = scope["method"], scope["path"]
            if method == "POST" and (match := HEARTBEAT.fullmatch(path)):
                route = functools.partial(self.heartbeat, match["grove"])
            elif method == "GET" and (match := CHANGES.fullmatch(path)):
                route = functools.partial(self.changes, match["grove"])
            elif method == "POST" and (match := JOB_CALL.fullmatch(path)):
                route = functools.partial(self.job_call, match["call"], match["grove"], match["job"])
            else:
                return await self.app(scope, receive, send)
            return await self._with_request_id(route, scope, receive, send)
        return await self.app(scope, receive, send)

    @staticmethod
    async def _with_request_id(route, scope, receive, send) -> None:
        """RequestMiddleware's rule and context for a lean request; a hand-over carries the same id to Django
        (as the request's own ``X-Request-ID``), so one request has one id in every log line and answer."""
        offered = (_header(scope, b"x-request-id") or b"").decode("latin-1")
        request_id = request_id_from(offered)
        if request_id != offered:
            scope = {**scope, "headers": [*(h for h in scope["headers"] if h[0] != b"x-request-id"),
                                          (b"x-request-id", request_id.encode())]}
        token = context.request_id.set(request_id)
        bind_request_id(request_id)
        try:
            return await route(scope, receive, send)
        finally:
            unbind_request_id()
            context.request_id.reset(token)

    @staticmethod
    async def _json_body(scope, receive, *, empty_ok: bool = False, raw: bool = False) -> tuple[list[dict], object]:
        """The messages read (for a hand-over to Django) and the parsed JSON body, or ``_DJANGO`` when the
        request is anything but a plain, complete, small-enough JSON call with a bearer credential
        (``empty_ok``: a call that takes no body may also come without one, and without a content type)."""
        messages, body, limit = [], bytearray(), settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            if len(body) > limit or not message.get("more_body", False):
                break
        content_type = (_header(scope, b"content-type") or b"").split(b";")[0].strip().lower()
        complete = messages[-1]["type"] == "http.request" and not messages[-1].get("more_body", False)
        if empty_ok and complete and not body and _plain_enough(scope):
            return messages, None
        if not (complete and len(body) <= limit and content_type == b"application/json" and _plain_enough(scope)):
            return messages, _DJANGO
        if raw:  # the caller parses (_parse) only what it has not seen before
            return messages, bytes(body)
        return messages, _parse(body)

    async def heartbeat(self, grove_id: str, scope, receive, send) -> None:
        messages, body = await self._json_body(scope, receive, raw=True)
        presented = _bearer(scope)
        if presented is not None and isinstance(body, bytes):
            row = _ROWS.row(grove_id, presented, body)
            if row is not None and await self._record(row):
                LEAN.labels("heartbeat", "served").inc()
                return await _send_json(send, scope, 200, {"server_time": timezone.now(),
                                                    "stale_after_s": settings.GROVE_STALE_AFTER_S})
        LEAN.labels("heartbeat", "django").inc()
        return await self.app(scope, _Replay(messages, receive), send)

    @staticmethod
    async def _record(row: dict) -> bool:
        return await HeartbeatBatch.of_this_loop().record(row)

    async def changes(self, grove_id: str, scope, receive, send) -> None:
        presented = _bearer(scope)
        if presented is not None and _plain_enough(scope):
            try:
                query = dict(part.split("=", 1) if "=" in part else (part, "")
                             for part in scope.get("query_string", b"").decode("latin-1").split("&") if part)
                wait = rules.changes_wait(query.get("wait"))
                grove = await sync_to_async(released(_authenticated), thread_sensitive=False)(presented, grove_id)
            except ForestError:
                grove = None
            if grove is not None:
                LEAN.labels("changes", "served").inc()
                return await _send_json(send, scope, 200, await changes_answer(grove, wait, thread_sensitive=False))
        LEAN.labels("changes", "django").inc()
        return await self.app(scope, receive, send)


    async def job_call(self, call: str, grove_id: str, job_id: str, scope, receive, send) -> None:
        messages, parsed = await self._json_body(scope, receive, empty_ok=call == "claim")
        presented = _bearer(scope)
        if presented is not None and parsed is not _DJANGO:
            try:
                answer = await sync_to_async(released(_job_call), thread_sensitive=False,
                                             executor=_job_executor())(call, presented, grove_id, job_id, parsed)
            except ForestError as refused:  # rolled back: the body Django's exception handler gives it
                LEAN.labels(call, "refused").inc()
                return await _send_json(send, scope, refused.status, refused.as_dict())
            except Exception:  # Django answers it (with its error shape), and logs what it meets
                log.exception("lean %s failed; Django takes it", call)
                answer = None
            if answer is not None:
                LEAN.labels(call, "served").inc()
                return await _send_json(send, scope, 200, answer)
        LEAN.labels(call, "django").inc()
        return await self.app(scope, _Replay(messages, receive), send)


class HeartbeatBatch:
    """Group commit for the lean heartbeat on one event loop: up to ``FOREST_HEARTBEAT_BATCHES_IN_FLIGHT``
    ``heartbeat_sql()`` statements in flight at a time, each carrying the heartbeats that arrived while the
    ones before it ran.

    An idle Host sends a heartbeat alone and at once (no timer, no added latency); under load the rows
    queue while statements are in flight, and the next free one takes them all (up to ``BATCH_MAX``), so
    the per-statement cost (round trip, parse, executor start, commit) is paid once per batch, while more
    than one batch in flight keeps PostgreSQL's other cores busy during each round trip (one at a time
    left this process waiting on every commit). A heartbeat is answered only after the statement that
    wrote its row committed; any failure of the statement sends its heartbeats to Django (which runs the
    statement alone and answers errors itself). A Grove already queued or in flight waits for a later
    batch with its next heartbeat, so no two statements in flight name one Grove (no row-lock waits, and
    a Grove's beats commit in the order they came)."""

    _batches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # one per event loop

    def __init__(self) -> None:
        self.queue: list[tuple[dict, asyncio.Future]] = []
        self.flushing = 0  # statements' loops running (each has at most one statement in flight)
        self.in_flight: set[str] = set()  # Groves named by a statement in flight
        self.background: set[asyncio.Task] = set()

    @classmethod
    def of_this_loop(cls) -> HeartbeatBatch:
        loop = asyncio.get_running_loop()
        batch = cls._batches.get(loop)
        if batch is None:
            batch = cls._batches[loop] = cls()
        return batch

    async def record(self, row: dict) -> bool:
        """True once ``row`` is committed; False sends the heartbeat to Django."""
        future = asyncio.get_running_loop().create_future()
        self.queue.append((row, future))
        if self.flushing < settings.FOREST_HEARTBEAT_BATCHES_IN_FLIGHT:
            self.flushing += 1
            task = asyncio.get_running_loop().create_task(self._flush())
            self.background.add(task)
            task.add_done_callback(self.background.discard)
        return await future

    def _take(self) -> dict[str, tuple[dict, asyncio.Future]]:
        batch: dict[str, tuple[dict, asyncio.Future]] = {}
        rest = []
        for entry in self.queue:
            grove_id = entry[0]["grove"]
            if grove_id in batch or grove_id in self.in_flight or len(batch) >= BATCH_MAX:
                rest.append(entry)
            else:
                batch[grove_id] = entry
        self.queue = rest
        return batch

    async def _flush(self) -> None:
        try:
            # Ends when nothing is queued, or when all that is queued waits on Groves of another statement
            # in flight (whose loop takes them when it is done).
            while batch := self._take():
                self.in_flight.update(batch)
                try:
                    written = await self._run([row for row, _ in batch.values()])
                except Exception as exc:  # Django answers these heartbeats (and reports any error)
                    log.warning("lean heartbeat batch failed; Django takes it", extra={"rows": len(batch),
                                                                                     "error": repr(exc)})
                    written = {}
                finally:
                    self.in_flight.difference_update(batch)
                for grove_id, (_, future) in batch.items():
                    if not future.done():
                        future.set_result(grove_id in written)
                if moved := [grove_id for grove_id, was_moved in written.items() if was_moved]:
                    # Wake what waits for these Groves (cheap, and off every heartbeat's answer).
                    task = asyncio.get_running_loop().create_task(sync_to_async(
                        released(grove_hooks.capacity_moved), thread_sensitive=False)(moved))
                    self.background.add(task)
                    task.add_done_callback(self.background.discard)
        finally:
            self.flushing -= 1
            if not self.flushing:  # only after a cancellation: nothing may wait forever
                for _, future in self.queue:
                    if not future.done():
                        future.set_result(False)
                self.queue = []

    @staticmethod
    async def _run(rows: list[dict]) -> dict[str, bool]:
        BATCHES.inc()
        pool = await async_pool()
        async with pool.connection() as conn:
            cursor = await conn.execute(grove_services.heartbeat_sql(), grove_services.heartbeat_rows_params(rows),
                                        prepare=True)
            return dict(await cursor.fetchall())


_DJANGO = object()  # "hand this request to Django"


def _parse(body) -> object:
    """The one body reader (depth, NUL, huge numbers); a refusal is Django's to answer (``_DJANGO``)."""
    try:
        return read_json(bytes(body), max_bytes=settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    except ForestError:
        return _DJANGO


class _Rows:
    """Each Grove's last fast-path row (less its time), kept with the credential and the exact body bytes
    it came from: a steady Grove sends the same bytes beat after beat, and the row is a pure function of
    them (and of settings fixed for the process), so its next beat skips parsing, validation and the
    digests: a third of the web processes' CPU per beat (bench/heartbeat.py; docs/decisions.md "Benches that
    stay honest").
    Bounded (``FOREST_HEARTBEAT_ROW_CACHE`` Groves, the least recently beating dropped first); per process."""

    def __init__(self) -> None:
        self.rows: collections.OrderedDict[str, tuple[str, bytes, dict]] = collections.OrderedDict()

    def row(self, grove_id: str, presented: str, body: bytes) -> dict | None:
        cached = self.rows.get(grove_id)
        if cached is not None and cached[0] == presented and cached[1] == body:
            self.rows.move_to_end(grove_id)
            return {**cached[2], "at": timezone.now().isoformat()}
        parsed = _parse(body)
        if parsed is _DJANGO:
            return None
        row = grove_services.heartbeat_fast_row(grove_id=grove_id, presented=presented, body=parsed)
        if row is None or settings.FOREST_HEARTBEAT_ROW_CACHE <= 0:
            return row
        self.rows[grove_id] = (presented, body, row)
        self.rows.move_to_end(grove_id)
        while len(self.rows) > settings.FOREST_HEARTBEAT_ROW_CACHE:
            self.rows.popitem(last=False)
        return row


_ROWS = _Rows()


@functools.cache
def _job_executor() -> ThreadPoolExecutor:
    """Claims and reports run on their own threads: a report waiting on its job's row lock (a repeated
    report, a racing claim) holds a thread, and must not hold one the ``changes`` reads need. Sized below
    the Django pool (``DATABASE_POOL_MAX_SIZE``), which every thread here borrows from."""
    return ThreadPoolExecutor(max_workers=settings.FOREST_LEAN_JOB_THREADS, thread_name_prefix="lean-job")


def _job_call(call: str, presented: str, grove_id: str, job_id: str, body) -> dict | None:
    """A claim or report as its Django view answers it; None when Django must answer (a credential it
    refuses, with its challenge header and hints); a service's refusal (``ForestError``, its transaction
    rolled back) is raised for the caller to answer."""
    try:
        grove = _authenticated(presented, grove_id)
    except ForestError:
        return None
    if grove is None:
        return None
    with pinned_snapshot(deferred=True):  # as FlagSnapshotMiddleware gives each Django request
        if call == "claim":
            return {"job": selectors.job_wire(services.grove_job_claim(grove=grove, job_id=job_id))}
        return services.grove_job_report(grove=grove, job_id=job_id, body=body)


def _authenticated(presented: str, grove_id: str):
    """The credential's Grove when it is the one in the URL; None lets Django give the refusal."""
    credential = grove_services.grove_authenticate(presented=presented)
    return credential.grove if credential.grove_id == uuid.UUID(grove_id) else None
