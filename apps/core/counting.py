"""One bounded count for every list, staff page and API page alike: exact up to ``FOREST_LIST_TOTAL_CAP``,
"more than the cap" beyond. Counting a million placements on every page would cost more than the page, so
the count reads at most cap + 1 index entries (``COUNT(*)`` over a ``LIMIT cap + 1`` subquery)."""
from __future__ import annotations

from django.conf import settings
from django.db.models import QuerySet

# Pages are read with OFFSET (no COUNT): the database walks every row before a page, so a page deeper than
# this many rows would cost more than the page budget (~18 ms at 10,000 rows, ~180 ms at 100,000 on a million
# placements). Deeper pages answer 400 pointing at the filters instead, on the staff pages and the API alike.
MAX_OFFSET_ROWS = 10_000


def capped_count(rows: QuerySet) -> tuple[int, bool]:
    """``(count, capped)``: the exact number of rows, or ``(cap, True)`` when more than ``cap`` match."""
    cap: int = settings.FOREST_LIST_TOTAL_CAP
    found = rows.order_by().values("pk")[:cap + 1].count()
    return (cap, True) if found > cap else (found, False)
