"""The bench's own Celery task, loaded into the worker with ``-I bench.floor_tasks`` (never in production)."""
import time

import redis
from celery import shared_task
from django.conf import settings


@shared_task(name="bench.ping")
def ping(reply_key: str) -> None:
    """An empty round trip for the floor: record when it ran, on the broker's Redis."""
    redis.Redis.from_url(settings.REDIS_URL).rpush(reply_key, repr(time.time()))
