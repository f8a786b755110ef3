"""The daily refusal rollup and its watermark (apps/staff/models.py; docs/decisions.md "Refusal rollup")."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('staff', '0002_refused_index'),
    ]

    operations = [
        migrations.CreateModel(
            name='RollupWatermark',
            fields=[
                ('name', models.CharField(max_length=50, primary_key=True, serialize=False)),
                ('through', models.DateTimeField()),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
        ),
        migrations.CreateModel(
            name='RefusalRollup',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('grain', models.CharField(choices=[('detail', 'Detail'), ('day', 'Day'), ('grove', 'Grove'), ('team', 'Team'), ('code', 'Code')], max_length=10)),
                ('day', models.DateField()),
                ('code', models.CharField(blank=True, max_length=100)),
                ('grove_slug', models.CharField(blank=True, max_length=100)),
                ('team', models.CharField(blank=True, max_length=100)),
                ('count', models.PositiveIntegerField()),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('grain', 'day', 'code', 'grove_slug', 'team'), name='refusal_rollup_key')],
            },
        ),
    ]
