from django.apps import AppConfig


class PipelinesConfig(AppConfig):
    name = "apps.pipelines"
    label = "pipelines"

    def ready(self) -> None:
        # Importing the services registers their ``dispatch.hooks`` handlers (the resume outbox row); the
        # artifact scope tells ``artifacts.hooks`` what pipeline work references in the CAS.
        from apps.pipelines import artifact_scope, services  # noqa: F401

        artifact_scope.register()
