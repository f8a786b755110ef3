from django.apps import AppConfig


class DispatchConfig(AppConfig):
    name = "apps.dispatch"
    label = "dispatch"
    verbose_name = "Dispatch (Grove jobs and the wire)"
