"""What flags subscribes to in Django itself (called by ``FlagsConfig.ready``; listed in docs/architecture.md
"Events and subscribers")."""
from __future__ import annotations

from django.apps import AppConfig


def sync_registry_after_migrate(**kwargs) -> None:
    """After every migrate the flag rows match the code's registry (apps/flags/registry.py)."""
    from apps.flags.services import flag_registry_sync

    flag_registry_sync()


def connect(config: AppConfig) -> None:
    from django.db.models.signals import post_migrate

    post_migrate.connect(sync_registry_after_migrate, sender=config, dispatch_uid="flags.sync_registry")
