"""Django's model backend with a user's permissions read in one query (their own and their roles'),
instead of two: every API call checks a permission, so this is on the hot path."""
from __future__ import annotations

from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Permission
from django.db.models import Q


class RoleBackend(ModelBackend):
    def get_all_permissions(self, user_obj, obj=None):
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        if not hasattr(user_obj, "_perm_cache"):
            if user_obj.is_superuser:
                rows = Permission.objects.all()
            else:
                rows = Permission.objects.filter(Q(user=user_obj) | Q(group__user=user_obj))
            user_obj._perm_cache = {f"{app}.{codename}" for app, codename in
                                    rows.values_list("content_type__app_label", "codename").distinct()}
        return user_obj._perm_cache
