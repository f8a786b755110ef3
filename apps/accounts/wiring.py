"""What accounts subscribes to in Django itself (called by ``AccountsConfig.ready``; listed in
docs/architecture.md "Events and subscribers")."""
from __future__ import annotations

from django.apps import AppConfig
from django.apps import apps as global_apps


def sync_roles_after_migrate(sender, apps=global_apps, **kwargs) -> None:
    """After every migrate (and every test-database flush, which empties auth_group) the role groups are
    made to match apps.accounts.roles again, so a role never silently loses its permissions."""
    from apps.accounts.services import roles_sync

    roles_sync(permission_model=apps.get_model("auth", "Permission"), group_model=apps.get_model("auth", "Group"),
               content_type_model=apps.get_model("contenttypes", "ContentType"))


def connect(config: AppConfig) -> None:
    from django.db.models.signals import post_migrate

    post_migrate.connect(sync_roles_after_migrate, sender=config, dispatch_uid="accounts.sync_roles")
