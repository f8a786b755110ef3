from django.apps import AppConfig


class AcceleratorsConfig(AppConfig):
    name = "apps.accelerators"
    label = "accelerators"
