import uuid
from datetime import timedelta

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from apps.groves.choices import (
    AcceleratorKind,
    CapabilityKind,
    MemoryKind,
    ShareMode,
    Substrate,
)


class Grove(models.Model):
    """One unit of execution capacity: a Kubernetes cluster or a single native machine."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200)
    roles = models.JSONField(default=list, help_text="build / runtime / compute")
    substrate = models.CharField(max_length=20, choices=Substrate.choices)
    platforms = models.JSONField(default=list, help_text="os/arch[/variant], in order of preference")
    isolation_modes = models.JSONField(default=list)
    change_kinds = models.JSONField(default=list)
    version = models.CharField(max_length=100, blank=True, default="")
    # Not indexed, like every column a heartbeat writes: the liveness UPDATE stays HOT (heap-only, no index
    # entry written). Stale sweeps and "fresh" filters scan the table, which is cheap beside the heartbeats.
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Readiness (apart from liveness): when the Grove last polled `changes` or claimed a job, written coarsely
    # (GROVE_POLL_STAMP_S) by apps.groves.services.grove_poll_record. Not indexed, like the liveness columns.
    last_polled_at = models.DateTimeField(null=True, blank=True)
    # Set by the beat task when the Grove goes quiet, cleared by its next heartbeat.
    stale_since = models.DateTimeField(null=True, blank=True)
    # The latest reported capacity, verbatim ({"placement_units": [...], "accelerators": [...]}).
    capacity = models.JSONField(default=dict, blank=True)
    # rules.capacity_digests: the shape (units, allocatable amounts, inventory, kinds) and the free counts.
    capacity_digest = models.CharField(max_length=64, blank=True, default="")
    free_digest = models.CharField(max_length=64, blank=True, default="")
    capacity_reported_at = models.DateTimeField(null=True, blank=True)
    log_tail = models.JSONField(default=list, blank=True)
    # Native ingress: where Host's edge reaches this Grove's ingress proxy over the mesh (plain HTTP),
    # as its latest heartbeat reported them; null when it reports none. Written with liveness, unindexed.
    mesh_address = models.GenericIPAddressField(null=True, blank=True)
    mesh_proxy_port = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    enabled = models.BooleanField(default=True, help_text="A disabled Grove is never chosen for new work.")
    # The demo's simulated Groves (apps.groves.demo): Host's own heartbeats, no executor. Shown with a badge on
    # every page that shows a Grove; never ready (nothing polls), so never chosen unpinned.
    simulated = models.BooleanField(default=False, help_text="A demo Grove: Host simulates its reports; nothing "
                                                             "runs its jobs.")
    # Read by placement's "preference" score plugin (apps/placement/scoring.py); edits are audited in admin.
    placement_preference = models.PositiveSmallIntegerField(
        default=50, validators=[MinValueValidator(0), MaxValueValidator(100)],
        help_text="Operator preference for placing work here, 0-100 (50 neutral): one weighted score among "
                  "spread or bin-pack, platform order and run spread.")
    # Placement's fleet snapshot reloads Groves changed since its watermark. On PostgreSQL a trigger
    # (migration 0002) stamps every INSERT/UPDATE with the database clock, including queryset .update().
    # A heartbeat that only moves liveness keeps updated_at (so its UPDATE touches no indexed column and
    # stays HOT) while its heartbeat is within GROVE_LIVENESS_TOUCH_S of liveness_stamped_at, the
    # heartbeat time the last stamp carried (migration 0003): the snapshot's copy of a live Grove's
    # last_heartbeat_at is never more than that far behind.
    updated_at = models.DateTimeField(default=timezone.now, db_index=True, editable=False)
    liveness_stamped_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    @property
    def stale(self) -> bool:
        """Derived from report age; ``stale_since`` only records when the beat task noticed."""
        if self.last_heartbeat_at is None:
            return True
        return timezone.now() - self.last_heartbeat_at > timedelta(seconds=settings.GROVE_STALE_AFTER_S)

    @property
    def ready(self) -> bool:
        """Ready for dispatch: it polled ``changes`` (or claimed) within ``GROVE_READY_WITHIN_S``."""
        return self.last_polled_at is not None and (
            timezone.now() - self.last_polled_at <= timedelta(seconds=settings.GROVE_READY_WITHIN_S))


class GroveCapability(models.Model):
    """One indexed fact per role, platform, change kind, isolation mode and accelerator API of a Grove.

    Mirrors the Grove's lists so placement can pre-filter candidates with an index instead of scanning
    every Grove in Python. Rewritten only when the underlying list changes.
    """

    grove = models.ForeignKey(Grove, on_delete=models.CASCADE, related_name="capabilities")
    kind = models.CharField(max_length=20, choices=CapabilityKind.choices)
    value = models.CharField(max_length=100)
    rank = models.PositiveIntegerField(default=0, help_text="position in the Grove's list (platform preference)")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["grove", "kind", "value"], name="grove_capability_unique")]
        indexes = [models.Index(fields=["kind", "value", "grove"])]

    def __str__(self) -> str:
        return f"{self.grove_id} {self.kind}={self.value}"


class PlacementUnit(models.Model):
    """A reported unit of placement (a machine, a node): CPU, memory, and accelerator counts."""

    grove = models.ForeignKey(Grove, on_delete=models.CASCADE, related_name="placement_units")
    unit_id = models.CharField(max_length=200)
    cpu_milli_allocatable = models.BigIntegerField()
    cpu_milli_free = models.BigIntegerField()
    memory_bytes_allocatable = models.BigIntegerField()
    memory_bytes_free = models.BigIntegerField()
    # [{"inventory_id", "allocatable", "free"}], as reported.
    accelerators = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["grove", "unit_id"]
        constraints = [models.UniqueConstraint(fields=["grove", "unit_id"], name="placement_unit_unique")]

    def __str__(self) -> str:
        return f"{self.grove_id}/{self.unit_id}"


class AcceleratorInventoryItem(models.Model):
    grove = models.ForeignKey(Grove, on_delete=models.CASCADE, related_name="accelerators")
    inventory_id = models.CharField(max_length=200)
    kind = models.CharField(max_length=10, choices=AcceleratorKind.choices)
    vendor = models.CharField(max_length=50)
    model = models.CharField(max_length=200, blank=True, default="")
    apis = models.JSONField(default=list)
    memory_bytes = models.BigIntegerField(null=True, blank=True)
    memory_kind = models.CharField(max_length=20, choices=MemoryKind.choices)
    memory_enforced = models.BooleanField()
    share_mode = models.CharField(max_length=20, choices=ShareMode.choices)

    class Meta:
        ordering = ["grove", "inventory_id"]
        constraints = [
            models.UniqueConstraint(fields=["grove", "inventory_id"], name="accelerator_item_unique")
        ]

    def __str__(self) -> str:
        return f"{self.grove_id}/{self.inventory_id} {self.vendor} {self.model}"


class CapacityReport(models.Model):
    """Bounded history: a row each time the reported capacity changes (last ``GROVE_REPORT_HISTORY``)."""

    grove = models.ForeignKey(Grove, on_delete=models.CASCADE, related_name="reports")
    received_at = models.DateTimeField(default=timezone.now)
    version = models.CharField(max_length=100, blank=True, default="")
    digest = models.CharField(max_length=64)
    capacity = models.JSONField()

    class Meta:
        ordering = ["-received_at", "-id"]
        indexes = [models.Index(fields=["grove", "-received_at"])]

    def __str__(self) -> str:
        return f"{self.grove_id} report at {self.received_at:%Y-%m-%d %H:%M:%S}"


class EnrollmentToken(models.Model):
    """A one-time, expiring token that turns a new machine or cluster into a Grove. Stored hashed."""

    key_id = models.CharField(max_length=32, unique=True)
    secret_hash = models.CharField(max_length=64)
    roles = models.JSONField()
    substrate = models.CharField(max_length=20, choices=Substrate.choices)
    note = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    grove = models.ForeignKey(Grove, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"enrollment token {self.key_id}"


class GroveCredential(models.Model):
    """A Grove's bearer credential. Only its SHA-256 is stored; revoking is permanent."""

    grove = models.ForeignKey(Grove, on_delete=models.CASCADE, related_name="credentials")
    key_id = models.CharField(max_length=32, unique=True)
    secret_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_reason = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"credential {self.key_id} for {self.grove_id}"
