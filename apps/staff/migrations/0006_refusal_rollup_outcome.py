"""The refusal rollup keeps refused and would-refuse apart (``outcome``, and the ``outcome`` margin), so the
report never sums them as one. The rows written before the column have no outcome: the watermark goes back
to "never", and the next rollup run rebuilds every day (until then the report reads the placements)."""

from django.db import migrations, models


def rebuild_on_next_run(apps, schema_editor):
    apps.get_model("staff", "RefusalRollup").objects.all().delete()
    apps.get_model("staff", "RollupWatermark").objects.filter(name="refusals").delete()


def _covering(include: str):
    """The rollup's (grain, day) index (migration 0004) covering the columns the report sums, outcome now
    among them, so the outcome margin is read by index-only scans too (PostgreSQL)."""
    def run(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        schema_editor.execute("DROP INDEX IF EXISTS refusal_rollup_grain_day")
        schema_editor.execute(f"CREATE INDEX refusal_rollup_grain_day ON staff_refusalrollup (grain, day) "
                              f"INCLUDE ({include})")
    return run


class Migration(migrations.Migration):

    dependencies = [
        ('staff', '0005_incompatibilities_gin'),
    ]

    operations = [
        migrations.RunPython(rebuild_on_next_run, migrations.RunPython.noop),
        migrations.RemoveConstraint(model_name='refusalrollup', name='refusal_rollup_key'),
        migrations.AddField(
            model_name='refusalrollup',
            name='outcome',
            field=models.CharField(blank=True, max_length=20),
        ),
        migrations.AlterField(
            model_name='refusalrollup',
            name='grain',
            field=models.CharField(choices=[('detail', 'Detail'), ('day', 'Day'), ('grove', 'Grove'),
                                            ('team', 'Team'), ('code', 'Code'), ('outcome', 'Outcome')],
                                   max_length=10),
        ),
        migrations.AddConstraint(
            model_name='refusalrollup',
            constraint=models.UniqueConstraint(fields=('grain', 'day', 'code', 'grove_slug', 'team', 'outcome'),
                                               name='refusal_rollup_key'),
        ),
        migrations.RunPython(_covering("code, grove_slug, team, outcome, count"),
                             _covering("code, grove_slug, team, count")),
    ]
