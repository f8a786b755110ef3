"""One bounded count for every list, staff page and API page alike: exact up to ``FOREST_LIST_TOTAL_CAP``,
"more than the cap" beyond. Counting a million placements on every page would cost more than the page, so
the count reads at most cap + 1 index entries (``COUNT(*)`` over a ``LIMIT cap + 1`` subquery)."""
from __future__ import annotations

from django.conf import settings
from django.db.models import QuerySet


def capped_count(rows: QuerySet) -> tuple[int, bool]:
    """``(count, capped)``: the exact number of rows, or ``(cap, True)`` when more than ``cap`` match."""
    cap: int = settings.FOREST_LIST_TOTAL_CAP
    found = rows.order_by().values("pk")[:cap + 1].count()
    return (cap, True) if found > cap else (found, False)
