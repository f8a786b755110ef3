"""Who counts as staff: the one definition every page, API view and CLI path asks.

Staff means a signed-in user with ``is_staff`` who holds a role that reads Groves (``groves.view_grove``:
viewer and up, see docs/permissions.md); this function is the single place that maps roles to "staff", so
no caller reads ``is_staff`` itself.
"""
from __future__ import annotations

from enum import StrEnum

from rest_framework.permissions import BasePermission

from apps.core.errors import Forbidden, NotAuthenticated

# The permission every role grants (viewer and up): holding it is what makes a user staff.
STAFF_PERMISSION = "groves.view_grove"


class StaffAccess(StrEnum):
    OK = "ok"
    SIGN_IN = "sign_in"  # anonymous, or an account that is not staff at all
    NO_ROLE = "no_role"  # a staff account without a role that reads Groves


def staff_access(user) -> StaffAccess:
    """Why a user may or may not see the staff pages (``is_staff_user`` is the yes/no of it)."""
    signed_in = getattr(user, "is_authenticated", False) and getattr(user, "pk", None)
    if not (signed_in and getattr(user, "is_staff", False)):
        return StaffAccess.SIGN_IN
    return StaffAccess.OK if user.has_perm(STAFF_PERMISSION) else StaffAccess.NO_ROLE


def is_staff_user(user) -> bool:
    """True for an authenticated human operator with staff rights (never a Grove principal)."""
    return staff_access(user) == StaffAccess.OK


class IsStaff(BasePermission):
    """DRF permission: 401 without a user, 403 with a user who is not staff, both in the error shape."""

    def has_permission(self, request, view) -> bool:
        user = request.user
        if not getattr(user, "is_authenticated", False) or not getattr(user, "pk", None):
            raise NotAuthenticated("not_authenticated", "Use 'Authorization: Token <key>' (manage.py api_token "
                                   "create USER --name CLIENT) or a staff session.")
        if not is_staff_user(user):
            raise Forbidden("staff_only", "Only staff may read this; ask an operator for a staff account.")
        return True
