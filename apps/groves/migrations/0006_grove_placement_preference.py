import importlib

import django.core.validators
from django.db import migrations, models

# The operator's preference is read by the fleet snapshot (a score plugin), so changing it must stamp
# updated_at like any other non-liveness column: the touch trigger compares it too (0005's trigger, one
# column longer).
_READINESS = importlib.import_module("apps.groves.migrations.0005_grove_readiness")
TRIGGER = (_READINESS.TRIGGER
           .replace("NEW.enabled, NEW.created_at, NEW.simulated)", "NEW.enabled, NEW.created_at, NEW.simulated,\n"
                    "            NEW.placement_preference)")
           .replace("OLD.enabled, OLD.created_at, OLD.simulated)", "OLD.enabled, OLD.created_at, OLD.simulated,\n"
                    "            OLD.placement_preference)"))
assert TRIGGER.count("placement_preference") == 2, "0005's trigger changed shape; write this one out"


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(TRIGGER)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_READINESS.TRIGGER)


class Migration(migrations.Migration):

    dependencies = [
        ('groves', '0005_grove_readiness'),
    ]

    operations = [
        migrations.AddField(
            model_name='grove',
            name='placement_preference',
            field=models.PositiveSmallIntegerField(default=50, help_text='Operator preference for placing work here, 0-100 (50 neutral): one weighted score among spread or bin-pack, platform order and run spread.', validators=[django.core.validators.MinValueValidator(0), django.core.validators.MaxValueValidator(100)]),
        ),
        migrations.RunPython(forward, backward),
    ]
