"""GroveJob, moved here from apps.pipelines with its rows: the model enters dispatch's state on the existing
table, which is then renamed ``dispatch_grovejob`` (indexes and constraints go with it)."""
import uuid

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("groves", "0002_grove_updated_at"),
        ("pipelines", "0002_grovejob_plain_references"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="GroveJob",
                    fields=[
                        ("id", models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True,
                                                serialize=False)),
                        ("run_id", models.UUIDField(db_column="run_id",
                                                    help_text="the pipeline run (opaque to dispatch)")),
                        ("node_id", models.BigIntegerField(db_column="node_id",
                                                           help_text="the pipeline node (opaque to dispatch)")),
                        ("build_id", models.CharField(blank=True, max_length=100, null=True)),
                        ("change_kind", models.CharField(max_length=30)),
                        ("payload", models.JSONField()),
                        ("idempotency_key", models.CharField(help_text="run:node:attempt", max_length=200,
                                                             unique=True)),
                        ("attempt", models.PositiveIntegerField()),
                        ("status", models.CharField(choices=[
                            ("assigned", "Assigned"), ("claimed", "Claimed"), ("running", "Running"),
                            ("succeeded", "Succeeded"), ("failed", "Failed"), ("cancelled", "Cancelled"),
                            ("timed_out", "Timed out")], default="assigned", max_length=10)),
                        ("reason", models.CharField(blank=True, default="", max_length=64)),
                        ("exit_code", models.IntegerField(blank=True, null=True)),
                        ("outputs", models.JSONField(blank=True, default=dict)),
                        ("log_tail", models.JSONField(blank=True, default=list)),
                        ("late_report", models.JSONField(blank=True, null=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("claimed_at", models.DateTimeField(blank=True, null=True)),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        ("deadline_at", models.DateTimeField(
                            help_text="timeout_s + scheduling grace; the sweep times out past it")),
                        ("cancel_requested_at", models.DateTimeField(blank=True, null=True)),
                        ("cancel_acked_at", models.DateTimeField(blank=True, null=True)),
                        ("grove", models.ForeignKey(on_delete=django.db.models.deletion.PROTECT,
                                                    related_name="jobs", to="groves.grove")),
                    ],
                    options={
                        "ordering": ["-created_at"],
                        "db_table": "pipelines_grovejob",
                        "indexes": [
                            models.Index(condition=models.Q(("status", "assigned")), fields=["grove", "created_at"],
                                         name="grove_job_assigned"),
                            models.Index(condition=models.Q(("cancel_acked_at__isnull", True),
                                                            ("cancel_requested_at__isnull", False)),
                                         fields=["grove"], name="grove_job_cancel_unacked"),
                            models.Index(condition=models.Q(("status__in", ["assigned", "claimed", "running"])),
                                         fields=["deadline_at"], name="grove_job_live_deadline"),
                            models.Index(fields=["run_id", "status"], name="pipelines_g_run_id_030953_idx"),
                        ],
                    },
                ),
            ],
        ),
        migrations.AlterModelTable(name="grovejob", table=None),
        migrations.AddIndex(model_name="grovejob", index=models.Index(fields=["node_id"], name="grove_job_node")),
    ]
