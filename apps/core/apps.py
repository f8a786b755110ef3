from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "apps.core"
    label = "core"

    def ready(self) -> None:
        from apps.core import wiring
        from apps.core.api import schema  # noqa: F401  (registers the declared bodies' schema extension)

        wiring.connect()
