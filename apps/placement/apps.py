from django.apps import AppConfig


class PlacementConfig(AppConfig):
    name = "apps.placement"
    label = "placement"
