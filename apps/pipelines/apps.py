from django.apps import AppConfig


class PipelinesConfig(AppConfig):
    name = "apps.pipelines"
    label = "pipelines"

    def ready(self) -> None:
        from apps.pipelines import wiring

        wiring.connect()
