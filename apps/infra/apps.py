from django.apps import AppConfig


class InfraConfig(AppConfig):
    name = "apps.infra"
    label = "infra"
