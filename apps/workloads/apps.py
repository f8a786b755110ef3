from django.apps import AppConfig


class WorkloadsConfig(AppConfig):
    name = "apps.workloads"
    label = "workloads"

    def ready(self) -> None:
        # Importing the selectors registers their ``dispatch.hooks`` changes source (generations).
        from apps.workloads import selectors  # noqa: F401
