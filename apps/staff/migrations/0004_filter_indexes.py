"""The indexes still missing behind the staff filters, and the one the refusal rollup finds changed days by.

As in 0001 these serve staff read paths on other apps' tables, so they live here. Placements (a million
rows at the quality bar): ``subject_id`` alone (the unique key leads with ``subject_type``), ``chooser``
and ``enforced`` (each with the list's order), and ``updated_at`` (``services.refusal_rollup_update`` asks
which days changed since its watermark). Nodes: the failed ones by ``finished_at`` with their reason, for
the report's "refused at dispatch" counts over a window (an index-only scan of the window on PostgreSQL).
A Grove's page lists the nodes of its live jobs: those jobs by Grove, newest first (``selectors.LIVE_JOBS``).
The rollup's own index, (grain, day), covers the columns the report sums on PostgreSQL (index-only scans).
"""
from django.db import migrations

INDEXES = [
    ("placement_subject_id", "placement_executionplacement", "subject_id", ""),
    ("placement_chooser_recent", "placement_executionplacement", "chooser, created_at DESC", ""),
    ("placement_enforced_recent", "placement_executionplacement", "enforced, created_at DESC", ""),
    ("placement_updated", "placement_executionplacement", "updated_at", ""),
    ("pipeline_node_failed_finished", "pipelines_pipelinenode", "finished_at, reason", "status = 'failed'"),
    ("refusal_rollup_grain_day", "staff_refusalrollup", "grain, day", ""),
    ("grove_job_live_by_grove", "dispatch_grovejob", "grove_id, created_at DESC",
     "status IN ('assigned', 'claimed', 'running')"),
]
COVERING = {"refusal_rollup_grain_day": " INCLUDE (code, grove_slug, team, count)"}


def create(apps, schema_editor):
    quote = schema_editor.quote_name
    for name, table, columns, where in INDEXES:
        condition = f" WHERE {where}" if where else ""
        include = COVERING.get(name, "") if schema_editor.connection.vendor == "postgresql" else ""
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {quote(name)} ON {quote(table)} ({columns}){include}{condition}")


def drop(apps, schema_editor):
    for name, *_rest in INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


class Migration(migrations.Migration):
    dependencies = [("staff", "0003_refusal_rollup"), ("dispatch", "0001_initial")]
    operations = [migrations.RunPython(create, drop)]
