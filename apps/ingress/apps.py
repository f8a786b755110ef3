from django.apps import AppConfig


class IngressConfig(AppConfig):
    name = "apps.ingress"
    label = "ingress"
    verbose_name = "Native ingress"
