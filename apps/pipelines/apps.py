from django.apps import AppConfig


class PipelinesConfig(AppConfig):
    name = "apps.pipelines"
    label = "pipelines"

    def ready(self):
        from apps.pipelines import artifact_scope

        artifact_scope.register()
