"""GroveJob moves to apps.dispatch, which sits below pipelines: first its ``run``/``node`` foreign keys become
plain ``run_id``/``node_id`` columns (same columns, same data; only the FK constraints and the FK indexes go)."""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("pipelines", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.AlterField("grovejob", "run", models.UUIDField(db_column="run_id")),
                migrations.AlterField("grovejob", "node", models.BigIntegerField(db_column="node_id")),
            ],
            state_operations=[
                migrations.RemoveIndex(model_name="grovejob", name="pipelines_g_run_id_030953_idx"),
                migrations.RemoveField("grovejob", "run"),
                migrations.RemoveField("grovejob", "node"),
                migrations.AddField("grovejob", "run_id", models.UUIDField(
                    db_column="run_id", help_text="the pipeline run (opaque to dispatch)"), preserve_default=False),
                migrations.AddField("grovejob", "node_id", models.BigIntegerField(
                    db_column="node_id", help_text="the pipeline node (opaque to dispatch)"), preserve_default=False),
                migrations.AddIndex(model_name="grovejob", index=models.Index(
                    fields=["run_id", "status"], name="pipelines_g_run_id_030953_idx")),
            ],
        ),
    ]
