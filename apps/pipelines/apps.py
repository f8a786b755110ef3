from django.apps import AppConfig


class PipelinesConfig(AppConfig):
    name = "apps.pipelines"
    label = "pipelines"

    def ready(self) -> None:
        # Importing the services registers their ``dispatch.hooks`` handlers (the resume outbox row).
        from apps.pipelines import services  # noqa: F401
