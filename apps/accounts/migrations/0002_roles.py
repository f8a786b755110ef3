"""Create the four roles (Django groups) with their permissions, from ``apps.accounts.roles``.

Permission rows for models of other apps may not exist yet on a fresh database (Django creates them
after all migrations), so ``roles_sync`` creates any it needs, as Django's own post_migrate would.
"""
from django.db import migrations


def create_roles(apps, schema_editor):
    from apps.accounts.services import roles_sync

    roles_sync(permission_model=apps.get_model("auth", "Permission"), group_model=apps.get_model("auth", "Group"),
               content_type_model=apps.get_model("contenttypes", "ContentType"))


def remove_roles(apps, schema_editor):
    from apps.accounts.roles import ROLES

    apps.get_model("auth", "Group").objects.filter(name__in=list(ROLES)).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_roles, remove_roles)]
