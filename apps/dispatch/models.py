import uuid

from django.db import models
from django.db.models import Q

from apps.core.db import LeanSave
from apps.dispatch.choices import JobStatus
from apps.dispatch.states import JOB_LIVE

LIVE_JOB = Q(status__in=sorted(JOB_LIVE))


class GroveJob(LeanSave, models.Model):
    """A unit of work on one Grove for one attempt of one node. ``build_id`` is nullable: compute runs have none.

    ``run_id`` and ``node_id`` name the pipeline run and node the job belongs to; dispatch carries them on
    the wire and hands them back to the owner's hooks, but does not know what they are (no foreign key up).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run_id = models.UUIDField(db_column="run_id", help_text="the pipeline run (opaque to dispatch)")
    node_id = models.BigIntegerField(db_column="node_id", help_text="the pipeline node (opaque to dispatch)")
    grove = models.ForeignKey("groves.Grove", on_delete=models.PROTECT, related_name="jobs")
    build_id = models.CharField(max_length=100, null=True, blank=True)
    change_kind = models.CharField(max_length=30)
    payload = models.JSONField()
    idempotency_key = models.CharField(max_length=200, unique=True, help_text="run:node:attempt")
    attempt = models.PositiveIntegerField()
    status = models.CharField(max_length=10, choices=JobStatus.choices, default=JobStatus.ASSIGNED)
    reason = models.CharField(max_length=64, blank=True, default="")
    exit_code = models.IntegerField(null=True, blank=True)
    outputs = models.JSONField(default=dict, blank=True)
    log_tail = models.JSONField(default=list, blank=True)
    # A report that arrived after Host ended the job (cancelled / timed out): stored, never applied.
    late_report = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    deadline_at = models.DateTimeField(help_text="timeout_s + scheduling grace; the sweep times out past it")
    # Host asked the Grove to stop it; the Grove acknowledges with any later report.
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_acked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # changes: a Grove's unclaimed work, and the cancellations it has not acknowledged.
            models.Index(fields=["grove", "created_at"], name="grove_job_assigned", condition=Q(status="assigned")),
            models.Index(fields=["grove"], name="grove_job_cancel_unacked",
                         condition=Q(cancel_requested_at__isnull=False, cancel_acked_at__isnull=True)),
            # sweep: only live jobs are indexed by deadline.
            models.Index(fields=["deadline_at"], name="grove_job_live_deadline", condition=LIVE_JOB),
            models.Index(fields=["run_id", "status"], name="pipelines_g_run_id_030953_idx"),
            models.Index(fields=["node_id"], name="grove_job_node"),
        ]

    def __str__(self) -> str:
        return self.idempotency_key
