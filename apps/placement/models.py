from django.db import models

from apps.groves.models import Grove
from apps.placement.choices import Chooser, Outcome, SubjectType


class ExecutionPlacement(models.Model):
    """One persisted placement decision per subject (a pipeline node, a workload generation, a compute step).

    The requirement is stored verbatim as it was derived at placement time; a retry re-reads this row and
    never re-derives. The Grove link survives the Grove's deletion as NULL (``grove_slug`` keeps the
    name) so a retry can say the Grove is gone instead of silently choosing another.

    Refused and waiting decisions are stored here too (``outcome``; no Grove, ``code`` says why), so they can
    be listed and explained; a retry re-reads only a ``placed`` row, and a later placement replaces the
    subject's unplaced row (its last verdict kept in ``history``).
    """

    subject_type = models.CharField(max_length=30, choices=SubjectType.choices)
    subject_id = models.CharField(max_length=200)
    # No index of its own: (grove, -created_at) below leads with it and serves every lookup by Grove (the
    # foreign key's SET NULL included); a second one cost every placement written an index entry more.
    grove = models.ForeignKey(Grove, null=True, on_delete=models.SET_NULL, related_name="placements", db_index=False)
    grove_slug = models.CharField(max_length=100, blank=True)
    selected_platform = models.CharField(max_length=50, blank=True)
    outcome = models.CharField(max_length=10, choices=Outcome.choices, default=Outcome.PLACED)
    code = models.CharField(max_length=64, blank=True, default="",
                            help_text="Why it was refused or waits (blank when placed).")
    requirement = models.JSONField()
    # {"selected_platform", "incompatibilities", "enforced", "would_refuse", "chooser", "candidates", "summary"}
    decision = models.JSONField()
    chooser = models.CharField(max_length=20, choices=Chooser.choices)
    enforced = models.BooleanField(help_text="Compatibility enforcement was on when this was decided.")
    would_refuse = models.BooleanField(help_text="Incompatible, placed anyway because enforcement was off.")
    team = models.CharField(max_length=100, blank=True, default="")
    environment = models.CharField(max_length=100, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Earlier decisions replaced by staff re-placement: [{"grove_id", "grove_slug", "selected_platform",
    # "decision", "replaced_at", "replaced_by", "reason"}].
    history = models.JSONField(default=list, blank=True)
    # A batch placement's decision is compact (``apps.placement.batch``): its full verdicts are the
    # ``PlacementVerdicts`` row with this key, shared by every subject of the same requirement decided
    # against the same Grove facts. Empty for a single placement (its decision holds every verdict).
    verdicts_key = models.CharField(max_length=64, blank=True, default="")
    # The subject's spread group (``run:<id>``: one run's steps): the run-spread score plugin counts a
    # group's placements per Grove to keep them apart. Blank when the caller gave none.
    spread_group = models.CharField(max_length=100, blank=True, default="")

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["subject_type", "subject_id"], name="execution_placement_subject_unique"),
        ]
        indexes = [
            models.Index(fields=["grove", "-created_at"]),
            models.Index(fields=["would_refuse", "-created_at"]),
            models.Index(fields=["outcome", "-created_at"]),
            models.Index(fields=["spread_group", "grove"], condition=~models.Q(spread_group=""),
                         name="placement_spread_group"),
        ]

    def __str__(self) -> str:
        if self.outcome != Outcome.PLACED:
            return f"{self.subject_type}:{self.subject_id} {self.outcome} ({self.code})"
        return f"{self.subject_type}:{self.subject_id} -> {self.grove_slug} ({self.selected_platform})"


class PlacementVerdicts(models.Model):
    """The full verdicts of one requirement shape against one version of the Grove facts, stored once and
    shared by every batch-placed subject decided from them (keyed by the hash of the content)."""

    key = models.CharField(max_length=64, primary_key=True)
    # {"candidates": [verdict, ...], "summary": str, "eligible_total": int, "ineligible_total": int}
    body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.key


class UnitLoad(models.Model):
    """The assume ledger: CPU and memory Host has placed on one unit since the Grove last reported its free
    counts (``Grove.capacity_reported_at`` equal to ``reported_at``; any other value means the Grove has
    reported since, and the load counts from zero). Written under the unit rows' lock by a batch."""

    grove = models.ForeignKey(Grove, on_delete=models.CASCADE, related_name="placement_loads")
    unit_id = models.CharField(max_length=200)
    reported_at = models.DateTimeField(null=True, blank=True)
    cpu_milli = models.BigIntegerField(default=0)
    memory_bytes = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["grove", "unit_id"], name="placement_unit_load_unique")]

    def __str__(self) -> str:
        return f"{self.grove_id}/{self.unit_id}: {self.cpu_milli}m {self.memory_bytes}B"
