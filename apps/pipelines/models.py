import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from apps.core.db import LeanSave
from apps.pipelines.choices import (
    NodeKind,
    NodeRuntime,
    NodeStatus,
    OutboxKind,
    Reuse,
    RunKind,
    RunStatus,
    Trust,
    WaitMode,
)


class PipelineGraph(models.Model):
    """A canonical Canopy Pipeline Graph. ``digest`` is the identity of the work, shared by every run of it."""

    digest = models.CharField(max_length=71, unique=True)
    canonical = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.digest[:19]


class PipelineRun(LeanSave, models.Model):
    """One attempt to execute a graph. Its id travels through every job payload and idempotency key."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    graph = models.ForeignKey(PipelineGraph, on_delete=models.PROTECT, related_name="runs")
    kind = models.CharField(max_length=10, choices=RunKind.choices)
    environment = models.CharField(max_length=100, blank=True, default="")
    team = models.CharField(max_length=100, blank=True, default="")
    # A build run may carry the build it belongs to; compute (and most deploy) runs have none.
    build_id = models.CharField(max_length=100, null=True, blank=True)
    status = models.CharField(max_length=10, choices=RunStatus.choices, default=RunStatus.PENDING)
    reason = models.CharField(max_length=64, blank=True, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "-created_at"]), models.Index(fields=["environment", "-created_at"])]

    def __str__(self) -> str:
        return f"run {self.id}"


class PipelineNode(LeanSave, models.Model):
    """One node of one run. Two runs of the same graph never share node rows."""

    run = models.ForeignKey(PipelineRun, on_delete=models.CASCADE, related_name="nodes")
    node_id = models.CharField(max_length=63)
    kind = models.CharField(max_length=20, choices=NodeKind.choices)
    runtime = models.CharField(max_length=10, choices=NodeRuntime.choices, blank=True, default="")
    spec = models.JSONField(help_text="the canonical node from the graph")
    node_digest = models.CharField(max_length=71, help_text="identity of this node's work (GRAPH_DEDUP key)")
    position = models.PositiveIntegerField(help_text="place in the planner's order")
    needs = models.JSONField(default=list)
    reuse = models.CharField(max_length=20, choices=Reuse.choices)
    trust = models.CharField(max_length=10, choices=Trust.choices)
    timeout_s = models.PositiveIntegerField()
    requirement = models.JSONField(null=True, blank=True, help_text="derived at plan time")
    plan_warnings = models.JSONField(default=list, blank=True, help_text="never-placeable reasons (flag off)")
    status = models.CharField(max_length=10, choices=NodeStatus.choices, default=NodeStatus.PENDING)
    reason = models.CharField(max_length=64, blank=True, default="")
    detail = models.TextField(blank=True, default="")
    attempt = models.PositiveIntegerField(default=1, help_text="1 + the retries taken; in the job's idempotency key")
    # Set while a retry waits out its backoff: the exec driver dispatches the node no earlier than this.
    retry_at = models.DateTimeField(null=True, blank=True)
    # GRAPH_DEDUP: the run whose result this node inherited at seed time, and why it could not when not.
    seeded_from_run = models.ForeignKey(PipelineRun, null=True, blank=True, on_delete=models.SET_NULL,
                                        related_name="+")
    dedup_decision = models.CharField(max_length=40, blank=True, default="")
    wait_mode = models.CharField(max_length=10, choices=WaitMode.choices, blank=True, default="")
    current_job = models.ForeignKey("dispatch.GroveJob", null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    # Set only while detached: the job whose terminal report will resume this node.
    awaiting_job_id = models.UUIDField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    outputs = models.JSONField(default=dict, blank=True)
    grove = models.ForeignKey("groves.Grove", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    queued_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "position"]
        constraints = [models.UniqueConstraint(fields=["run", "node_id"], name="pipeline_node_unique_per_run")]
        indexes = [
            models.Index(fields=["node_digest", "status"], name="pipeline_node_dedup"),
            # Sweep: only live nodes are indexed, so its cost does not grow with history.
            models.Index(fields=["queued_at"], name="pipeline_node_queued", condition=Q(status="queued")),
            models.Index(fields=["current_job"], name="pipeline_node_awaiting", condition=Q(status="awaiting")),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}:{self.node_id}"


class PipelineNodeEvent(models.Model):
    """One row per node state change (the transition function writes it): who did what, and why."""

    node = models.ForeignKey(PipelineNode, on_delete=models.CASCADE, related_name="events")
    from_status = models.CharField(max_length=10, blank=True, default="")
    to_status = models.CharField(max_length=10)
    reason = models.CharField(max_length=64, blank=True, default="")
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.node_id}: {self.from_status} -> {self.to_status}"


class PipelineOutbox(models.Model):
    """Transactional outbox: written with the state change it announces, sent to Celery after commit,
    re-sent by the sweep until the consumer marks it done in the same transaction as its effect."""

    kind = models.CharField(max_length=40, choices=OutboxKind.choices)
    node = models.ForeignKey(PipelineNode, on_delete=models.CASCADE, related_name="outbox")
    job = models.ForeignKey("dispatch.GroveJob", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    next_send_at = models.DateTimeField(help_text="when the sweep re-sends it if still not done")
    sends = models.PositiveIntegerField(default=0)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["next_send_at"], name="pipeline_outbox_due", condition=Q(done_at__isnull=True)),
        ]

    def __str__(self) -> str:
        return f"{self.kind} node={self.node_id}"


class PipelineNodeWait(models.Model):
    """A node in the admission queue (status ``waiting``; docs/decisions.md "Admission queue").

    The row is written when the node first waits and kept until it is dispatched or ends, so its ``id`` is
    the node's place in submission order even when an admission loses a race and the node waits again.
    ``admitted_grove_id`` is set between the queue's admission (node back to ``queued``) and its dispatch:
    the wake-up counts what such nodes will take so one freed unit is not handed out twice."""

    node = models.OneToOneField(PipelineNode, on_delete=models.CASCADE, related_name="capacity_wait")
    code = models.CharField(max_length=64, help_text="what it waits on: resources_unavailable, ...")
    detail = models.TextField(blank=True, default="")
    verdicts = models.JSONField(default=list, blank=True, help_text="the per-Grove verdicts it waits on")
    since = models.DateTimeField(auto_now_add=True)
    deadline_at = models.DateTimeField(help_text="the bounded wait: first wait + the node's timeout")
    admitted_grove_id = models.UUIDField(null=True, blank=True)
    admitted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["deadline_at"], name="pipeline_wait_deadline"),
            models.Index(fields=["admitted_grove_id"], name="pipeline_wait_admitted",
                         condition=Q(admitted_grove_id__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"wait #{self.pk} node={self.node_id} ({self.code})"


class PipelineNodeWaitGrove(models.Model):
    """The queue's index: one row per (waiting node, Grove it could fit), ordered by the wait's ``seq``. A
    freed unit on Grove G reads only G's rows, oldest first, through ``(grove_id, seq)``: the cost of a
    wake-up follows what it admits, not the length of the queue."""

    wait = models.ForeignKey(PipelineNodeWait, on_delete=models.CASCADE, related_name="groves")
    grove_id = models.UUIDField()
    seq = models.BigIntegerField(help_text="the wait's id: submission order")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["wait", "grove_id"], name="pipeline_wait_grove_unique")]
        indexes = [models.Index(fields=["grove_id", "seq"], name="pipeline_wait_grove_seq")]

    def __str__(self) -> str:
        return f"{self.grove_id} #{self.seq}"


class PipelineAdmissionWake(models.Model):
    """A wake-up of one Grove's line that is requested and not yet started: further requests coalesce into
    it (``admission_queue.request_wake``), and the wake-up deletes the row before it reads capacity, so an
    event that commits after that starts a new one. A row older than ``WAKE_RESEND_AFTER_S`` is a lost
    message and is sent again."""

    grove_id = models.UUIDField(primary_key=True)
    requested_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"wake {self.grove_id}"
