"""A Celery app of its own for tests/core/test_broker_loss.py: Forest's broker settings (acks late,
visibility timeout, the transport ``CELERY_BROKER_TRANSPORT`` names) with two tasks, so the test can hold
an unacknowledged message in a real worker while it kills the Redis it started. No Django: the test passes
the transport in ``FOREST_TEST_BROKER_TRANSPORT`` (empty: kombu's stock transport)."""
import os
import time

import redis
from celery import Celery

from forest_host.liveness import HeartbeatStep

app = Celery("broker_loss", broker=os.environ["FOREST_TEST_BROKER_URL"])
app.conf.update(
    broker_transport=os.environ.get("FOREST_TEST_BROKER_TRANSPORT") or None,
    broker_transport_options={"visibility_timeout": 3600},
    task_acks_late=True, task_reject_on_worker_lost=True, task_ignore_result=True,
    # Room to prefetch beyond what is held, so a BRPOP is in flight while a message is unacknowledged:
    # the state the worker is in on a busy Host, and the one the teardown fault needs.
    worker_prefetch_multiplier=4, broker_connection_retry_on_startup=True,
)

app.steps["consumer"].add(HeartbeatStep)  # as forest_host.celery does


@app.task(name="broker_loss.hold")
def hold(seconds: float) -> None:
    time.sleep(seconds)


@app.task(name="broker_loss.pong")
def pong(token: str) -> None:
    redis.Redis.from_url(os.environ["FOREST_TEST_BROKER_URL"]).set(f"pong:{token}", 1)
