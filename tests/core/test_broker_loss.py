"""A Redis restart must not kill the Celery worker (issue 34; docs/decisions.md "Host survives its broker").

kombu 5.7.0 tears a lost connection down twice; the second close of the default channel restores its
unacknowledged messages through a transport already detached from its connection and raised
``AttributeError``, which Celery does not ignore: the worker exited ("Unrecoverable error"). Host's broker
transport (forest_host/broker.py, selected by ``CELERY_BROKER_TRANSPORT``) turns that into the connection
error it is. Both tests start a Redis of their own on a free loopback port and kill it; the shared Redis is
never touched. Nothing is faked.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis
from django.conf import settings
from kombu import Consumer, Exchange, Queue
from kombu.common import ignore_errors

from bench.own_servers import OwnRedis
from forest_host.celery import app as forest_app
from tests.pipelines.conftest import _die_with_parent, kill_leftovers, wait_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def own_redis():
    server = OwnRedis()
    server.start()
    yield server
    server.stop()


def test_celery_teardown_after_broker_loss_raises_no_attribute_error(own_redis):
    """The exact sequence Celery's consumer runs on a lost connection (``collect()``, then ``close()`` under
    ``ignore_errors``), in the state a busy worker is in: an unacknowledged message, a BRPOP in flight on the
    default channel, and a second channel (remote control's fanout). Built by Host's Celery app, so the
    transport is the one settings select; with kombu's stock transport this raises ``AttributeError`` every
    time."""
    assert settings.CELERY_BROKER_TRANSPORT == "forest_host.broker:Transport"
    connection = forest_app.connection_for_read(url=own_redis.url)
    connection.connect()
    queue = f"loss-{uuid.uuid4().hex[:8]}"
    with forest_app.connection_for_write(url=own_redis.url) as producer_connection:
        producer_connection.SimpleQueue(queue).put({"n": 1})
        producer_connection.SimpleQueue(queue).put({"n": 2})
    held: list = []
    tasks = Consumer(connection, [Queue(queue)], callbacks=[lambda body, message: held.append(message)],
                     accept=["json"])
    tasks.qos(prefetch_count=1)
    tasks.consume()
    control = Consumer(connection.channel(), [Queue(f"{queue}.ctl", Exchange(f"{queue}.ctl", type="fanout"),
                                                    auto_delete=True)], callbacks=[], accept=["json"])
    control.consume()
    deadline = time.monotonic() + 10
    while not held and time.monotonic() < deadline:  # an event may be the fanout's subscribe reply
        connection.drain_events(timeout=1)
    assert len(held) == 1 and len(connection.default_channel.qos._delivered) == 1  # one message unacknowledged
    connection.default_channel._brpop_start()  # the worker's event loop always has one outstanding

    own_redis.stop()
    connection.collect(socket_timeout=5)
    ignore_errors(connection, connection.close)  # stock kombu: AttributeError ... 'hostname'


def _worker(broker_url: str, transport: str, log: Path, node: str) -> subprocess.Popen:
    # Celery prefers CELERY_BROKER_URL from the environment (the suite's shared Redis) to the app's own.
    env = {**os.environ, "CELERY_BROKER_URL": broker_url, "FOREST_TEST_BROKER_URL": broker_url,
           "FOREST_TEST_BROKER_TRANSPORT": transport, "PYTHONPATH": str(ROOT),
           "FOREST_VAR_DIR": str(log.parent)}
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tests.core.broker_app", "worker", "-c", "2", "--loglevel", "INFO",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", node],
        cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=_die_with_parent)


ROUNDS = 4


def _alive(worker: subprocess.Popen, log: Path) -> bool:
    assert worker.poll() is None, "the worker exited:\n" + log.read_text(errors="replace")[-3000:]
    return True


@pytest.mark.slow
def test_worker_survives_redis_killed_while_it_holds_unacknowledged_messages(own_redis, tmp_path):
    """A real worker on Host's transport: each round it holds a message unacknowledged (a task sleeping
    past the kill) with room to prefetch more, Redis is SIGKILLed and started again empty, and the worker
    must still be running and consume a fresh task. With kombu's stock transport the worker exits in the
    first round or two (the teardown above); ``bench/broker_loss.py`` repeats this for many rounds."""
    from celery import Celery

    sender = Celery("broker_loss_sender")

    def send(name: str, *args) -> None:
        with sender.connection_for_write(url=own_redis.url) as connection:
            sender.send_task(name, args=list(args), connection=connection)

    log, node = tmp_path / "worker.log", f"loss-{uuid.uuid4().hex[:6]}@box"
    worker = _worker(own_redis.url, settings.CELERY_BROKER_TRANSPORT, log, node)
    heartbeat = tmp_path / "liveness" / node
    client = redis.Redis.from_url(own_redis.url)
    try:
        for round_no in range(ROUNDS):
            token = uuid.uuid4().hex
            send("broker_loss.pong", token)
            wait_for(lambda t=token: _alive(worker, log) and client.exists(f"pong:{t}"), timeout=60,
                  what=f"round {round_no}: the worker to consume")
            send("broker_loss.hold", 30)
            wait_for(lambda: client.hlen("unacked"), timeout=30, what="the worker to hold a message unacknowledged")
            touched = wait_for(lambda: heartbeat.exists() and heartbeat.stat().st_mtime_ns, timeout=30,
                            what="the worker's heartbeat file")
            own_redis.stop()
            own_redis.start()  # the same port, empty; the client reconnects on its next command
        token = uuid.uuid4().hex
        send("broker_loss.pong", token)
        wait_for(lambda: _alive(worker, log) and client.exists(f"pong:{token}"), timeout=60,
              what="the worker to consume after the last kill")
        # the heartbeat step started again after the reconnect (it stops while the consumer reconnects)
        wait_for(lambda: heartbeat.stat().st_mtime_ns > touched, timeout=30, what="a touch after the last reconnect")
        assert worker.poll() is None
        assert "Unrecoverable error" not in log.read_text(errors="replace")
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, 15)
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, 9)
        kill_leftovers(worker.pid)
        sender.close()
