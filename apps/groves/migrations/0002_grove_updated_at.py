import django.utils.timezone
from django.db import migrations, models

# Every write to a Grove row gets the database clock, whatever wrote it (save(), queryset .update(), raw
# SQL): placement's fleet snapshot reloads the rows stamped after its watermark. PostgreSQL only; the
# embedded SQLite of `make run` re-reads its handful of Groves in full.
TRIGGER = """
CREATE OR REPLACE FUNCTION groves_grove_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := clock_timestamp();
    RETURN NEW;
END $$;
CREATE TRIGGER groves_grove_touch BEFORE INSERT OR UPDATE ON groves_grove
    FOR EACH ROW EXECUTE FUNCTION groves_grove_touch();
"""
DROP = "DROP TRIGGER IF EXISTS groves_grove_touch ON groves_grove; DROP FUNCTION IF EXISTS groves_grove_touch();"


def create_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(TRIGGER)


def drop_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):

    dependencies = [
        ('groves', '0001_initial'),
    ]

    operations = [
        migrations.AddField(
            model_name='grove',
            name='updated_at',
            field=models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False),
        ),
        migrations.RunPython(create_trigger, drop_trigger),
    ]
