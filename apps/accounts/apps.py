from django.apps import AppConfig
from django.apps import apps as global_apps
from django.db.models.signals import post_migrate


def _sync_roles(sender, apps=global_apps, **kwargs):
    # After every migrate (and every test-database flush, which empties auth_group) the role groups are
    # made to match apps.accounts.roles again, so a role never silently loses its permissions.
    from apps.accounts.services import roles_sync

    roles_sync(permission_model=apps.get_model("auth", "Permission"), group_model=apps.get_model("auth", "Group"),
               content_type_model=apps.get_model("contenttypes", "ContentType"))


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    label = "accounts"
    verbose_name = "Accounts, roles and audit"

    def ready(self):
        post_migrate.connect(_sync_roles, sender=self, dispatch_uid="accounts.sync_roles")
