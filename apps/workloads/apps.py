from django.apps import AppConfig


class WorkloadsConfig(AppConfig):
    name = "apps.workloads"
    label = "workloads"

    def ready(self) -> None:
        # Importing the selectors registers their ``dispatch.hooks`` changes source (generations); the
        # artifact scope tells ``artifacts.hooks`` which bundles workloads reference.
        from apps.workloads import artifact_scope, selectors  # noqa: F401

        artifact_scope.register()
