"""Who counts as staff: the one definition every page, API view and CLI path asks.

Today staff means Django's ``user.is_staff``; when roles arrive this function is the single place that
maps them, so no caller ever reads ``is_staff`` itself.
"""
from __future__ import annotations

from rest_framework.permissions import BasePermission

from apps.core.errors import Forbidden, NotAuthenticated


def is_staff_user(user) -> bool:
    """True for an authenticated human operator with staff rights (never a Grove principal)."""
    return bool(getattr(user, "is_authenticated", False) and getattr(user, "pk", None)
                and getattr(user, "is_staff", False))


class IsStaff(BasePermission):
    """DRF permission: 401 without a user, 403 with a user who is not staff, both in the error shape."""

    def has_permission(self, request, view) -> bool:
        user = request.user
        if not getattr(user, "is_authenticated", False) or not getattr(user, "pk", None):
            raise NotAuthenticated("not_authenticated",
                                   "Use 'Authorization: Token <key>' (manage.py drf_create_token) or a staff session.")
        if not is_staff_user(user):
            raise Forbidden("staff_only", "Only staff may read this; ask an operator for a staff account.")
        return True
