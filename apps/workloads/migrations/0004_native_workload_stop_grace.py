"""A workload may declare its stop grace (issue 38). Existing rows get NULL: the agent's own --kill-grace, as
before, and their generations' specs stay as they are (no new generation from the upgrade)."""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("workloads", "0003_workload_secret_team"),
    ]

    operations = [
        migrations.AddField(
            model_name="nativeworkload",
            name="stop_grace_s",
            field=models.PositiveIntegerField(
                blank=True, help_text="SIGTERM-to-SIGKILL grace when its agent stops it (empty: the agent's)",
                null=True),
        ),
        migrations.AddConstraint(
            model_name="nativeworkload",
            constraint=models.CheckConstraint(condition=models.Q(stop_grace_s__gte=1, stop_grace_s__lte=3600),
                                              name="native_workload_stop_grace_bounded"),
        ),
    ]
