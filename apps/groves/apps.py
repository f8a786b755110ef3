from django.apps import AppConfig


class GrovesConfig(AppConfig):
    name = "apps.groves"
    label = "groves"
