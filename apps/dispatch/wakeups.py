"""Per-Grove wake-ups for the ``changes`` long-poll: Redis pub/sub when ``REDIS_URL`` is set.

A wake-up carries no data: the woken request re-reads the database, which stays the only truth, so a
lost or duplicated message costs at most one extra query or one recheck interval. Publishing happens
after commit (callers use ``transaction.on_commit``) so a woken poll always sees the new rows.

Each event loop keeps ONE pattern subscription (``forest:grove:*:changes``) and fans messages out to the
requests waiting in it, so thousands of waiting Groves cost one Redis connection per web process, not
one each. Without Redis, waiters poll the database every ``PIPELINE_CHANGES_DB_POLL_S``.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import weakref

import redis
import redis.asyncio as aioredis
from django.conf import settings

log = logging.getLogger(__name__)

CHANNEL_PREFIX = "forest:grove:"
CHANNEL_SUFFIX = ":changes"

_clients: dict[str, redis.Redis] = {}
_clients_lock = threading.Lock()


def channel_for(grove_id) -> str:
    return f"{CHANNEL_PREFIX}{grove_id}{CHANNEL_SUFFIX}"


def redis_enabled() -> bool:
    return bool(getattr(settings, "REDIS_URL", ""))


def _client() -> redis.Redis:
    url = settings.REDIS_URL
    with _clients_lock:
        if url not in _clients:
            _clients[url] = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        return _clients[url]


def grove_wake(grove_id) -> None:
    """Tell long-polls of one Grove to re-read the database. Never raises: polls recheck on their own."""
    if not redis_enabled():
        return
    try:
        _client().publish(channel_for(grove_id), b"1")
    except redis.RedisError as exc:
        log.warning("grove wake-up not published; the Grove's poll will recheck", extra={"grove": str(grove_id),
                                                                                         "error": str(exc)})


class _Hub:
    """One pattern subscription per event loop, fanned out to per-Grove waiters."""

    def __init__(self) -> None:
        self.waiters: dict[str, set[asyncio.Event]] = {}
        self.ready = asyncio.Event()
        self.failed = False
        self.task: asyncio.Task | None = None

    async def run(self) -> None:
        client = aioredis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2)
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.psubscribe(f"{CHANNEL_PREFIX}*{CHANNEL_SUFFIX}")
            self.ready.set()
            while True:
                message = await pubsub.get_message(timeout=30.0)
                if message is None:
                    continue
                channel = message["channel"].decode()
                grove_id = channel[len(CHANNEL_PREFIX):-len(CHANNEL_SUFFIX)]
                for event in list(self.waiters.get(grove_id, ())):
                    event.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # Redis gone: waiters fall back to their recheck interval.
            log.warning("grove wake-up subscription lost; long-polls recheck the database", extra={"error": str(exc)})
        finally:
            self.failed = True
            self.ready.set()
            with contextlib.suppress(Exception):
                await pubsub.aclose()
                await client.aclose()


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Hub] = weakref.WeakKeyDictionary()


async def _hub() -> _Hub | None:
    loop = asyncio.get_running_loop()
    hub = _hubs.get(loop)
    if hub is None or hub.failed:
        hub = _Hub()
        _hubs[loop] = hub
        hub.task = loop.create_task(hub.run())
    try:
        await asyncio.wait_for(hub.ready.wait(), timeout=2.0)
    except TimeoutError:
        return None
    return None if hub.failed else hub


class GroveWaiter:
    """Register interest in one Grove's channel *before* reading the database, so no wake-up is missed."""

    def __init__(self, grove_id) -> None:
        self.grove_id = str(grove_id)
        self.event = asyncio.Event()
        self.hub: _Hub | None = None

    async def __aenter__(self) -> GroveWaiter:
        if redis_enabled():
            self.hub = await _hub()
            if self.hub is not None:
                self.hub.waiters.setdefault(self.grove_id, set()).add(self.event)
        return self

    async def __aexit__(self, *exc) -> None:
        if self.hub is not None:
            waiters = self.hub.waiters.get(self.grove_id)
            if waiters is not None:
                waiters.discard(self.event)
                if not waiters:
                    self.hub.waiters.pop(self.grove_id, None)

    @property
    def subscribed(self) -> bool:
        return self.hub is not None and not self.hub.failed

    async def wait(self, timeout: float) -> bool:
        """Sleep until woken or ``timeout``; True when woken. Without a subscription it just sleeps."""
        if timeout <= 0:
            return False
        if not self.subscribed:
            await asyncio.sleep(timeout)
            return False
        try:
            await asyncio.wait_for(self.event.wait(), timeout=timeout)
        except TimeoutError:
            return False
        self.event.clear()
        return True
