from django.apps import AppConfig


class FlagsConfig(AppConfig):
    name = "apps.flags"
    label = "flags"
    verbose_name = "Feature flags"

    def ready(self) -> None:
        from apps.flags import wiring

        wiring.connect(self)
