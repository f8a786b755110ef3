"""A partial index holding only refused / would-refuse placements, newest first, covering what the report
counts (id, Grove, team): its counts by Grove, team and day are index-only scans.

Its predicate is, word for word, the SQL of ``apps.staff.selectors.REFUSED`` (PostgreSQL uses a partial
index only when the query's WHERE implies the predicate): the report then reads the window's refusals
(a tenth of the table today) instead of every placement in the window. PostgreSQL only.
"""
from django.db import migrations

PREDICATE = "(would_refuse OR ((decision #> '{incompatibilities,0}') IS NOT NULL AND enforced))"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "CREATE INDEX IF NOT EXISTS placement_refused_recent ON placement_executionplacement "
            f"(created_at DESC) INCLUDE (id, grove_slug, team) WHERE {PREDICATE}")


def drop(apps, schema_editor):
    schema_editor.execute("DROP INDEX IF EXISTS placement_refused_recent")


class Migration(migrations.Migration):
    dependencies = [("staff", "0001_read_indexes")]
    operations = [migrations.RunPython(create, drop)]
