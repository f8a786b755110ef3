"""Writes of the staff app: the daily refusal rollup (``models.RefusalRollup``).

Kept up to date by the ``staff.refusal_rollup`` beat task, not in the placement write: see docs/decisions.md
"Refusal rollup". Each run finds the UTC days holding a placement changed since the last watermark (less a
settle margin for transactions that stamped their rows earlier and committed later) and rewrites those
days whole from the placement table (delete the day's rows, insert its aggregate), then moves the
watermark. Rewriting a day instead of adding to it is what makes a run idempotent: running twice, or over
a placement already counted, never counts it twice, and a placement whose verdict changed (staff
re-placement) moves from its old buckets to its new ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import TruncDate
from django.utils import timezone

from apps.core.db import sql_from_meta
from apps.placement.models import ExecutionPlacement
from apps.staff import selectors
from apps.staff.models import ALL_CODES, Grain, RefusalRollup, RollupWatermark

ROLLUP = selectors.REFUSAL_ROLLUP
NEVER = selectors.ROLLUP_NEVER


@dataclass(frozen=True)
class RollupRun:
    days: list[date]
    rows: int
    through: datetime


def refusal_rollup_update(*, now: datetime | None = None, rebuild: bool = False) -> RollupRun:
    """Bring the refusal rollup up to ``now``. The first run (or ``rebuild``) aggregates every day."""
    now = now or timezone.now()
    with transaction.atomic():
        # One run at a time: a second one waits here, then finds nothing new.
        RollupWatermark.objects.get_or_create(name=ROLLUP, defaults={"through": NEVER})
        mark = RollupWatermark.objects.select_for_update().get(name=ROLLUP)
        placements = ExecutionPlacement.objects.all()
        if rebuild or mark.through == NEVER:
            RefusalRollup.objects.all().delete()
        else:
            placements = placements.filter(
                updated_at__gte=mark.through - timedelta(seconds=settings.STAFF_REFUSAL_ROLLUP_SETTLE_S))
        days = sorted(placements.annotate(day=TruncDate("created_at", tzinfo=UTC)).values_list("day", flat=True)
                      .distinct().order_by())
        rows = 0
        for first, last in _ranges(days):
            RefusalRollup.objects.filter(day__gte=first, day__lte=last).delete()
            rows += _aggregate(first, last)
        mark.through = now
        mark.save(update_fields=["through", "updated_at"])
    return RollupRun(days=days, rows=rows, through=now)


def _ranges(days: list[date]) -> list[tuple[date, date]]:
    """Consecutive days as [first, last] ranges: one statement per range, not per day."""
    ranges: list[tuple[date, date]] = []
    for day in days:
        if ranges and day == ranges[-1][1] + timedelta(days=1):
            ranges[-1] = (ranges[-1][0], day)
        else:
            ranges.append((day, day))
    return ranges


# Each margin from the detail rows of the same days: (grain, its code column, its Grove column, its team
# column, its outcome column, which detail rows it sums). Columns a grain does not group by hold "".
# ``sql_from_meta`` templates over ``r``, the rollup table.
MARGINS = (
    (Grain.DAY, "''", "''", "''", "''", "r.{r.code} = ''"),
    (Grain.GROVE, "''", "r.{r.grove_slug}", "''", "''", "r.{r.code} = ''"),
    (Grain.TEAM, "''", "''", "r.{r.team}", "''", "r.{r.code} = ''"),
    (Grain.CODE, "r.{r.code}", "''", "''", "''", "r.{r.code} <> ''"),
    (Grain.OUTCOME, "''", "''", "''", "r.{r.outcome}", "r.{r.code} = ''"),
)


def _aggregate(first: date, last: date) -> int:
    """Insert the rollup rows of the UTC days [first, last] from the placement table (the detail rows), then
    the margins from the detail rows; the number of rows inserted."""
    sql = selectors.refused_sql()
    table = ExecutionPlacement._meta.db_table
    since = datetime.combine(first, datetime.min.time(), tzinfo=UTC)
    until = datetime.combine(last + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    window = f"{sql.refused} AND {sql.window}"
    names = {"p": ExecutionPlacement, "r": RefusalRollup}
    columns = sql_from_meta("INSERT INTO {r} ({r.grain}, {r.day}, {r.code}, {r.grove_slug}, {r.team}, {r.outcome}, "
                            "{r.count})", **names)
    subject = sql_from_meta("p.{p.grove_slug}, p.{p.team}", **names) + f", {sql.outcome}"
    inserted = 0
    with connection.cursor() as cursor:
        cursor.execute(
            f"{columns} SELECT %s, {sql.day}, %s, {subject}, COUNT(*) FROM {table} p WHERE {window} "
            f"GROUP BY {sql.day}, {subject}", [Grain.DETAIL, ALL_CODES, since, until])
        inserted += cursor.rowcount
        cursor.execute(
            f"{columns} SELECT %s, {sql.day}, {sql.code}, {subject}, COUNT(*) "
            f"FROM {table} p, {sql.elements} WHERE {window} AND {sql.code} IS NOT NULL AND {sql.code} <> '' "
            f"GROUP BY {sql.day}, {sql.code}, {subject}", [Grain.DETAIL, since, until])
        inserted += cursor.rowcount
        for grain, code, grove, team, outcome, rows in MARGINS:
            kept = [column for column in (code, grove, team, outcome) if column != "''"]
            cursor.execute(sql_from_meta(
                f"{columns} SELECT %s, r.{{r.day}}, {code}, {grove}, {team}, {outcome}, SUM(r.{{r.count}}) "
                f"FROM {{r}} r WHERE r.{{r.grain}} = %s AND {rows} AND r.{{r.day}} >= %s AND r.{{r.day}} <= %s "
                "GROUP BY " + ", ".join(["r.{r.day}", *kept]), **names),
                [grain, Grain.DETAIL, first, last])
            inserted += cursor.rowcount
    return inserted
