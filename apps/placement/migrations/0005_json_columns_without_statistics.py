from django.db import migrations

# ANALYZE (autovacuum's, every 10% of new rows) skips the stored requirement, decision and history: no plan
# reads their statistics (nothing indexes them; the staff filters on a decision's codes ride the
# created_at order and are paginated), and sorting a 30,000-row sample of ~1 KB JSON values was half of
# each ANALYZE of the placement table (1.25 s -> 0.67 s at 150,000 rows; ~30 runs per million placed).
# docs/decisions.md "C1M speed, third pass".
COLUMNS = ("requirement", "decision", "history")


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE placement_executionplacement "
                              + ", ".join(f"ALTER COLUMN {column} SET STATISTICS 0" for column in COLUMNS))


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE placement_executionplacement "
                              + ", ".join(f"ALTER COLUMN {column} SET STATISTICS -1" for column in COLUMNS))


class Migration(migrations.Migration):
    dependencies = [("placement", "0004_spread_group")]
    operations = [migrations.RunPython(forward, backward)]
