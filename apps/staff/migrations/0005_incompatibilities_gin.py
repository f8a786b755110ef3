"""The ``code`` filter's GIN index holds a decision's incompatibilities only, not the whole decision.

``placement_decision_gin`` (0001) indexed every path of every stored decision (its top candidates, their
scores and fits, the "why"): ~60 entries per placement written, the largest index of the table (88 MB of
1.27 GB at 600,000 batch placements), of which the filter reads one path. The filter now asks
``decision -> 'incompatibilities' @> [{"code": ...}]`` (``apps.placement.filtersets``), which this
expression index serves; a placed decision has none, so its entry is the empty item. The filter's other arm,
a stored refusal's or wait's own ``code``, gets a partial index of the rows that have one (placed rows, the
great majority, have none and pay no entry): with both arms indexed PostgreSQL can answer the OR from the
two indexes (a BitmapOr) instead of reading every placement in the list's order.

Built ``CONCURRENTLY`` (writes go on while a large table is indexed), so the migration is not atomic.
PostgreSQL only, as 0001's was.
"""
from django.db import migrations

OLD = "placement_decision_gin"
NEW = "placement_incompatibilities_gin"
CODE = "placement_code"
TABLE = "placement_executionplacement"


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {NEW} ON {TABLE} "
                          "USING gin ((decision -> 'incompatibilities') jsonb_path_ops)")
    schema_editor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {CODE} ON {TABLE} (code) WHERE code <> ''")
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {OLD}")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {OLD} ON {TABLE} USING gin (decision jsonb_path_ops)")
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {NEW}")
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {CODE}")


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("staff", "0004_filter_indexes")]
    operations = [migrations.RunPython(create, drop)]
