from django.apps import AppConfig


class PlacementConfig(AppConfig):
    name = "apps.placement"
    label = "placement"

    def ready(self) -> None:
        from apps.placement import wiring

        wiring.connect()
