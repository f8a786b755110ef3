from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "apps.core"
    label = "core"

    def ready(self) -> None:
        from django.core.signals import got_request_exception

        from apps.core.outage import remember_outage

        got_request_exception.connect(remember_outage, dispatch_uid="forest.core.remember_outage")
