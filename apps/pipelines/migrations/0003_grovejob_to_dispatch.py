"""The references to GroveJob now point at ``dispatch.GroveJob`` (the same table, renamed by dispatch 0001);
pipelines forgets its own copy of the model. State only: the rows and constraints are already in place."""
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("pipelines", "0002_grovejob_plain_references"),
        ("dispatch", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.AlterField(
                    model_name="pipelinenode", name="current_job",
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL,
                                            related_name="+", to="dispatch.grovejob"),
                ),
                migrations.AlterField(
                    model_name="pipelineoutbox", name="job",
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE,
                                            related_name="+", to="dispatch.grovejob"),
                ),
                migrations.DeleteModel(name="GroveJob"),
            ],
        ),
    ]
