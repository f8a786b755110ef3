"""Host's Redis broker transport: kombu's, with one teardown fault closed (docs/decisions.md, "Host survives
its broker").

kombu 5.7.0's ``Connection.collect()`` (what Celery's consumer runs when the broker connection is lost)
closes the channels, then detaches the transport from its ``Connection`` (``transport.client = None``) but
keeps ``_default_channel``. When that first close of the default channel did not get through (its pending
BRPOP read raises ``ConnectionError`` first, and another channel's failing close ends the transport's close
loop before the default channel's turn), Celery's following ``connection.close()`` closes the default
channel again. Only now does the channel reach ``QoS.restore_unacked_once()``, which builds a fresh Redis
pool from ``_connparams()``, which reads ``self.connection.client.hostname`` off the detached transport:
``AttributeError`` instead of a connection error. Celery ignores connection errors during that close but
not an ``AttributeError``, so the worker logs "Unrecoverable error" and exits.

The channel below says what is true at that point: the connection is gone, so it raises the broker's
``ConnectionError``, which every teardown path already ignores. The unacknowledged messages stay in Redis's
``unacked`` hash (restored by any worker after ``visibility_timeout``), or, when Redis came back empty, are
resent by the pipeline sweep from the database's outbox; either way nothing depends on this restore.

Settings select it (``CELERY_BROKER_TRANSPORT``) for ``redis://`` brokers only: naming a transport class
bypasses kombu's ``rediss`` scheme handling (its TLS defaults), so a ``rediss://`` broker keeps kombu's own
transport, and the fault, until the pinned kombu carries a fix.
"""
from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection is None or self.connection.client is None:
            raise RedisConnectionError("the broker connection this channel belonged to was closed")
        return super()._connparams(asynchronous=asynchronous)


class Transport(kombu_redis.Transport):
    Channel = Channel
