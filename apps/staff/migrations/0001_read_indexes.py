"""Indexes that serve the staff pages' filters and orderings on other apps' tables.

Kept here, not in those apps' model Meta, because they exist for these read paths only (every list is
"newest first, filtered by one column"), so dropping the staff app drops them too. GIN on the placement
decision (the ``code`` filter's JSON containment) exists only on PostgreSQL.
"""
from django.db import migrations

INDEXES = [
    ("placement_recent", "placement_executionplacement", "created_at DESC, id DESC"),
    ("placement_platform_recent", "placement_executionplacement", "selected_platform, created_at DESC"),
    ("placement_subject_type_recent", "placement_executionplacement", "subject_type, created_at DESC"),
    ("placement_team_recent", "placement_executionplacement", "team, created_at DESC"),
    ("placement_grove_slug_recent", "placement_executionplacement", "grove_slug, created_at DESC"),
    ("pipeline_run_recent", "pipelines_pipelinerun", "created_at DESC"),
    ("pipeline_run_kind_recent", "pipelines_pipelinerun", "kind, created_at DESC"),
    ("pipeline_node_run_status", "pipelines_pipelinenode", "status, reason"),
]
GIN = ("placement_decision_gin", "placement_executionplacement", "decision jsonb_path_ops")


def create(apps, schema_editor):
    quote = schema_editor.quote_name
    for name, table, columns in INDEXES:
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {quote(name)} ON {quote(table)} ({columns})")
    if schema_editor.connection.vendor == "postgresql":
        name, table, columns = GIN
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {quote(name)} ON {quote(table)} USING gin ({columns})")


def drop(apps, schema_editor):
    for name, _table, _columns in [*INDEXES, GIN]:
        schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


class Migration(migrations.Migration):
    dependencies = [
        ("placement", "0001_initial"),
        ("pipelines", "0001_initial"),
    ]
    operations = [migrations.RunPython(create, drop)]
