import uuid

from django.db import models
from django.db.models import Q

from apps.accelerators.choices import ClaimState, Period
from apps.groves.models import Grove


class AcceleratorEntitlement(models.Model):
    """What one team may consume of one API/vendor (blank = any): concurrency and a budget per period."""

    team = models.CharField(max_length=100)
    api = models.CharField(max_length=30, blank=True, default="", help_text="cuda, metal, ... blank = any")
    vendor = models.CharField(max_length=50, blank=True, default="", help_text="nvidia, apple, ... blank = any")
    max_concurrent = models.PositiveIntegerField(
        null=True, blank=True, help_text="Accelerators in use at once by the team; empty = no limit.")
    budget_accelerator_seconds = models.BigIntegerField(
        null=True, blank=True, help_text="Accelerator-seconds per period; empty = no budget.")
    period = models.CharField(max_length=10, choices=Period.choices, default=Period.MONTH)
    note = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team", "api", "vendor"]
        constraints = [
            models.UniqueConstraint(fields=["team", "api", "vendor"], name="accelerator_entitlement_unique"),
            models.CheckConstraint(condition=Q(budget_accelerator_seconds__isnull=True)
                                   | Q(budget_accelerator_seconds__gte=0), name="accelerator_budget_non_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.team}: {self.api or 'any api'}/{self.vendor or 'any vendor'}"


class AcceleratorClaim(models.Model):
    """Host's claim on accelerator slots of one placement unit for one job; also the ledger's
    start/end record of that job's use. Admission subtracts active claims from what the Grove reports."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    grove = models.ForeignKey(Grove, null=True, on_delete=models.SET_NULL, related_name="accelerator_claims")
    grove_slug = models.CharField(max_length=100)
    unit_id = models.CharField(max_length=200)
    job_ref = models.CharField(max_length=200, help_text="The job this claim is for (passed back to cancel it).")
    team = models.CharField(max_length=100, blank=True, default="")
    vendor = models.CharField(max_length=50, blank=True, default="")
    api = models.CharField(max_length=30, blank=True, default="")
    count = models.PositiveIntegerField()
    allocations = models.JSONField(help_text='[{"inventory_id", "count"}] on the unit')
    cooperative = models.BooleanField(default=False, help_text="Unified, unenforced memory: advisory admission.")
    state = models.CharField(max_length=10, choices=ClaimState.choices, default=ClaimState.ACTIVE)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=100, blank=True, default="")
    # Usage up to this moment is already in AcceleratorUsage: the beat task never counts a second twice.
    accrued_through = models.DateTimeField()

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.UniqueConstraint(fields=["job_ref"], condition=Q(state=ClaimState.ACTIVE),
                                    name="accelerator_claim_one_active_per_job"),
        ]
        indexes = [
            models.Index(fields=["grove", "state"]),
            models.Index(fields=["team", "state"]),
        ]

    def __str__(self) -> str:
        return f"{self.job_ref}: {self.count}x {self.api or self.vendor} on {self.grove_slug}/{self.unit_id}"


class AcceleratorUsage(models.Model):
    """The usage ledger: accelerator-milliseconds of one claim on one UTC day (budgets sum these)."""

    claim = models.ForeignKey(AcceleratorClaim, on_delete=models.CASCADE, related_name="usage")
    team = models.CharField(max_length=100, blank=True, default="")
    api = models.CharField(max_length=30, blank=True, default="")
    vendor = models.CharField(max_length=50, blank=True, default="")
    day = models.DateField()
    accelerator_ms = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["-day", "team"]
        constraints = [models.UniqueConstraint(fields=["claim", "day"], name="accelerator_usage_claim_day")]
        indexes = [models.Index(fields=["team", "day"])]

    def __str__(self) -> str:
        return f"{self.team} {self.day}: {self.accelerator_ms / 1000:.0f} accelerator-seconds"
