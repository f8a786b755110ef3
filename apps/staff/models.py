"""The daily rollup behind the "would have refused" report (see docs/decisions.md "Refusal rollup").

One row per (UTC day, code, Grove, team): how many refused / would-refuse placements of that day, Grove and
team carried that incompatibility code. The row with ``code = ""`` (``ALL_CODES``) counts the placements
themselves, once each whatever their codes: the report's total and its counts by Grove, team and day read
those rows, its counts by code the others. Derived data only: ``services.refusal_rollup_update`` rewrites
whole days from the placement table, and the report reads raw rows for any part of a window the rollup
does not cover yet.
"""
from django.db import models

ALL_CODES = ""


class RefusalRollup(models.Model):
    day = models.DateField()
    code = models.CharField(max_length=100, blank=True)
    grove_slug = models.CharField(max_length=100)
    team = models.CharField(max_length=100, blank=True)
    count = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["day", "code", "grove_slug", "team"], name="refusal_rollup_key"),
        ]
        # The report reads one kind of row (all-codes or per-code) over a range of days: the index on
        # (code, day) is created by staff migration 0004 (covering on PostgreSQL, for index-only scans).

    def __str__(self) -> str:
        return f"{self.day} {self.code or '(all)'} {self.grove_slug} {self.team or '(no team)'}: {self.count}"


class RollupWatermark(models.Model):
    """How far a rollup has read: every placement changed before ``through`` is in it (``name`` names the
    rollup; one row each). Days before ``through``'s UTC day are complete; that day itself is partial."""

    name = models.CharField(max_length=50, primary_key=True)
    through = models.DateTimeField()
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name} through {self.through.isoformat()}"
