from django.apps import AppConfig


class WorkloadsConfig(AppConfig):
    name = "apps.workloads"
    label = "workloads"

    def ready(self):
        from apps.workloads import artifact_scope

        artifact_scope.register()
