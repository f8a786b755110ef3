import importlib

from django.db import migrations, models

# Readiness (docs/decisions.md "Grove readiness"): last_polled_at, written coarsely by a poll or a claim; and
# simulated, the demo's Groves (compared by the trigger like every non-liveness column).
# 0003's trigger keeps updated_at for a liveness-only write; a poll stamp is liveness too while it follows the
# previous one closely (a Grove that keeps polling), so it stays HOT. A first stamp, or one after a silence
# longer than the touch window (the Grove was, or was about to be, unready), stamps updated_at: the fleet
# snapshot reloads the Grove at its next refresh and sees it ready.
TRIGGER = """
CREATE OR REPLACE FUNCTION groves_grove_touch() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    touch interval := make_interval(secs => coalesce(
        nullif(current_setting('forest.grove_liveness_touch_s', true), '')::float8, 30));
BEGIN
    IF TG_OP = 'UPDATE'
       AND NEW.last_heartbeat_at IS NOT NULL AND OLD.liveness_stamped_at IS NOT NULL
       AND NEW.last_heartbeat_at >= OLD.last_heartbeat_at
       AND NEW.last_heartbeat_at < OLD.liveness_stamped_at + touch
       AND (NEW.last_polled_at IS NOT DISTINCT FROM OLD.last_polled_at
            OR (OLD.last_polled_at IS NOT NULL AND NEW.last_polled_at >= OLD.last_polled_at
                AND NEW.last_polled_at < OLD.last_polled_at + touch))
       AND (NEW.id, NEW.slug, NEW.name, NEW.roles, NEW.substrate, NEW.platforms, NEW.isolation_modes,
            NEW.change_kinds, NEW.version, NEW.capacity_digest, NEW.free_digest, NEW.capacity_reported_at,
            NEW.enabled, NEW.created_at, NEW.simulated)
           IS NOT DISTINCT FROM
           (OLD.id, OLD.slug, OLD.name, OLD.roles, OLD.substrate, OLD.platforms, OLD.isolation_modes,
            OLD.change_kinds, OLD.version, OLD.capacity_digest, OLD.free_digest, OLD.capacity_reported_at,
            OLD.enabled, OLD.created_at, OLD.simulated)
    THEN
        NEW.updated_at := OLD.updated_at;
        NEW.liveness_stamped_at := OLD.liveness_stamped_at;
        RETURN NEW;
    END IF;
    NEW.updated_at := clock_timestamp();
    NEW.liveness_stamped_at := NEW.last_heartbeat_at;
    RETURN NEW;
END $$;
"""
# 0003's function, restored on the way back.
# Going back restores 0003's trigger (the same text, not a copy).
PREVIOUS = importlib.import_module("apps.groves.migrations.0003_grove_hot_liveness").TRIGGER


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(TRIGGER)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PREVIOUS)


class Migration(migrations.Migration):

    dependencies = [
        ('groves', '0004_grove_mesh'),
    ]

    operations = [
        migrations.AddField(
            model_name='grove',
            name='last_polled_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='grove',
            name='simulated',
            field=models.BooleanField(default=False, help_text='A demo Grove: Host simulates its reports; nothing runs its jobs.'),
        ),
        migrations.RunPython(forward, backward),
    ]
