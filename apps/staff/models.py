"""The daily rollup behind the "would have refused" report (see docs/decisions.md "Refusal rollup").

One table, a small data cube over refused / would-refuse placements per UTC day, in grains:

- ``detail``: (day, code, Grove, team, outcome) → count (``outcome``: ``refused`` or ``would_refuse``, the
  keys of apps/placement/outcome.py; a Grove of "" is no Grove: a refusal placed nowhere). The row with
  ``code = ""`` (``ALL_CODES``) counts the placements themselves, once each whatever their codes; the
  others count the placements carrying that incompatibility code.
- the margins the report sums, derived from the detail rows in the same run: ``day`` (placements per day:
  the total and the trend), ``grove`` and ``team`` (placements per day and Grove, per day and team),
  ``code`` (per day and code) and ``outcome`` (placements per day and outcome). Columns a grain does not
  group by hold "". Summing a window then reads a few rows per day and dimension instead of every
  (Grove, team) pair of every day.

Derived data only: ``services.refusal_rollup_update`` rewrites whole days from the placement table, and
the report reads raw rows for any part of a window the rollup does not cover yet.
"""
from django.db import models

ALL_CODES = ""


class Grain(models.TextChoices):
    DETAIL = "detail"
    DAY = "day"
    GROVE = "grove"
    TEAM = "team"
    CODE = "code"
    OUTCOME = "outcome"


class RefusalRollup(models.Model):
    grain = models.CharField(max_length=10, choices=Grain.choices)
    day = models.DateField()
    code = models.CharField(max_length=100, blank=True)
    grove_slug = models.CharField(max_length=100, blank=True)
    team = models.CharField(max_length=100, blank=True)
    outcome = models.CharField(max_length=20, blank=True)
    count = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["grain", "day", "code", "grove_slug", "team", "outcome"],
                                    name="refusal_rollup_key"),
        ]
        # The report reads one grain over a range of days: the index on (grain, day) is created by staff
        # migration 0004 (covering on PostgreSQL, for index-only scans).

    def __str__(self) -> str:
        return (f"{self.grain} {self.day} {self.code or '(all)'} {self.grove_slug or '-'} "
                f"{self.team or '-'} {self.outcome or '-'}: {self.count}")


class RollupWatermark(models.Model):
    """How far a rollup has read: every placement changed before ``through`` is in it (``name`` names the
    rollup; one row each). Days before ``through``'s UTC day are complete; that day itself is partial."""

    name = models.CharField(max_length=50, primary_key=True)
    through = models.DateTimeField()
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name} through {self.through.isoformat()}"
