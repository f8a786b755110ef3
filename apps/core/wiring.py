"""What core subscribes to in Django itself (called by ``CoreConfig.ready``; listed in docs/architecture.md)."""
from __future__ import annotations


def connect() -> None:
    from django.core.signals import got_request_exception

    from apps.core.outage import remember_outage

    got_request_exception.connect(remember_outage, dispatch_uid="forest.core.remember_outage")
