from django.apps import AppConfig


class AcceleratorsConfig(AppConfig):
    name = "apps.accelerators"
    label = "accelerators"

    def ready(self) -> None:
        from apps.accelerators import wiring

        wiring.connect()
