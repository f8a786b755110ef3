"""PostgreSQL, pooled, with a health check that does not cost a round trip per borrow.

Django hands its pool either the stock check (an empty query on every ``getconn``: one round trip per
request) or none. This backend keeps Django's pool and swaps in ``apps.core.db.check_if_idle``.
tests/core/test_pool.py counts the round trips, so a change in psycopg_pool's internals fails there.
"""
from __future__ import annotations

from django.db.backends.postgresql import base

from apps.core.db import check_if_idle


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self):
        created = self.alias not in self._connection_pools
        pool = super().pool
        if pool is not None and created:
            pool._check = check_if_idle  # psycopg_pool reads it on every getconn
        return pool
