"""Workload secrets belong to a team (issue 33).

Existing rows stay as they are, team-less: team-less workloads keep reading them. A team's workload reads
only its own team's rows, so each team whose workloads already named a team-less secret gets its own copy
of that row (the same ciphertext): every running workload keeps the values it was already given, and no
team gains a value its workloads were not already reading. From then on each team's copy changes only by
that team's writes."""
from django.db import migrations, models


def _copy_to_referencing_teams(apps, schema_editor):
    WorkloadSecret = apps.get_model("workloads", "WorkloadSecret")
    NativeWorkload = apps.get_model("workloads", "NativeWorkload")
    wanted: set[tuple[str, str, str]] = set()
    # secret_refs is a JSON list: filtered here rather than with a JSON lookup every database may not have.
    for team, environment, refs in NativeWorkload.objects.exclude(team="").values_list("team", "environment",
                                                                                       "secret_refs"):
        wanted.update((team, environment, name) for name in refs or [] if isinstance(name, str))
    legacy = {(row.environment, row.name): row for row in WorkloadSecret.objects.filter(team="")}
    WorkloadSecret.objects.bulk_create(
        [WorkloadSecret(team=team, environment=environment, name=name,
                        ciphertext=legacy[(environment, name)].ciphertext)
         for team, environment, name in sorted(wanted) if (environment, name) in legacy],
        ignore_conflicts=True)


def _drop_team_rows(apps, schema_editor):
    """Back to one row per (environment, name): the team-less rows are the ones that were there before."""
    apps.get_model("workloads", "WorkloadSecret").objects.exclude(team="").delete()


class Migration(migrations.Migration):

    dependencies = [
        ('workloads', '0002_ingress_hostname'),
    ]

    operations = [
        migrations.AddField(
            model_name='workloadsecret',
            name='team',
            field=models.CharField(blank=True, default='', max_length=100),
        ),
        migrations.RemoveConstraint(
            model_name='workloadsecret',
            name='workload_secret_unique',
        ),
        migrations.AddConstraint(
            model_name='workloadsecret',
            constraint=models.UniqueConstraint(fields=('team', 'environment', 'name'),
                                               name='workload_secret_team_unique'),
        ),
        migrations.AlterModelOptions(
            name='workloadsecret',
            options={'ordering': ['team', 'environment', 'name']},
        ),
        migrations.RunPython(_copy_to_referencing_teams, _drop_team_rows),
    ]
