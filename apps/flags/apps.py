from django.apps import AppConfig


class FlagsConfig(AppConfig):
    name = "apps.flags"
    label = "flags"
    verbose_name = "Feature flags"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from apps.flags.services import flag_registry_sync

        post_migrate.connect(lambda **kwargs: flag_registry_sync(), sender=self, weak=False)
