"""A fingerprint of every table: proves that a refused call changed nothing.

One statement over all tables: per table its row count and an order-independent digest of its rows'
text form. Comparing two fingerprints names the tables that differ.
"""
from __future__ import annotations

from django.db import connection


def table_fingerprint() -> dict[str, tuple[int, str]]:
    quote = connection.ops.quote_name
    tables = sorted(connection.introspection.table_names())
    parts = [f"SELECT %s, count(*), coalesce(md5(string_agg(md5(t::text), '' ORDER BY md5(t::text))), '') "
             f"FROM {quote(name)} t" for name in tables]
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(parts), tables)
        return {name: (count, digest) for name, count, digest in cursor.fetchall()}


def changed_tables(before: dict, after: dict) -> list[str]:
    return sorted(name for name in set(before) | set(after) if before.get(name) != after.get(name))
