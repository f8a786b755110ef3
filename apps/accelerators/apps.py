from django.apps import AppConfig


class AcceleratorsConfig(AppConfig):
    name = "apps.accelerators"
    label = "accelerators"

    def ready(self) -> None:
        # Importing the services registers their ``dispatch.hooks`` handler (the claim release).
        from apps.accelerators import services  # noqa: F401
