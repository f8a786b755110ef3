"""One artifact row per team for the same bytes at the same location (docs/permissions.md "Artifact
ownership"). Existing rows keep their team, id, time and signature: each was the one row of its location,
so each stays its team's row; only the uniqueness widens to include the team."""
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("artifacts", "0003_lineage")]

    operations = [
        migrations.RemoveConstraint(model_name="artifact", name="artifact_unique_location"),
        migrations.AddConstraint(
            model_name="artifact",
            constraint=models.UniqueConstraint(fields=("digest", "storage_kind", "reference", "team"),
                                               name="artifact_unique_location"),
        ),
    ]
