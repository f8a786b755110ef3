"""The bench's own Celery task, loaded into the worker with ``-I bench.floor_tasks`` (never in production)."""
import functools
import time

import redis
from celery import shared_task
from django.conf import settings


@functools.cache
def _redis() -> redis.Redis:
    """One client (one connection pool) per worker process, made on its first task: a connection per
    task would put a TCP handshake and Redis's client setup into every floor round trip."""
    return redis.Redis.from_url(settings.REDIS_URL)


@shared_task(name="bench.ping")
def ping(reply_key: str) -> None:
    """An empty round trip for the floor: record when it ran, on the broker's Redis."""
    _redis().rpush(reply_key, repr(time.time()))
