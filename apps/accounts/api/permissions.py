"""One DRF permission class for the staff/CI API: each view declares the model permission each method
needs, and a refusal names it (403 ``permission_required`` with ``permission``)."""
from __future__ import annotations

from rest_framework.permissions import BasePermission

from apps.accounts.selectors import permission_refusal
from apps.core.errors import Forbidden, NotAuthenticated

__all__ = ["SIGN_IN", "Requires", "permission_refusal", "requires"]

SIGN_IN = "Use 'Authorization: Token <key>' (manage.py api_token create USER --name CLIENT) or a staff session."


class Requires(BasePermission):
    """Subclass per view with ``perms = {"GET": "app.view_model", "POST": "app.add_model"}``, or use
    :func:`requires`. A method absent from ``perms`` is refused: nothing is open by omission."""

    perms: dict[str, str] = {}

    def has_permission(self, request, view):
        user = request.user
        # A Grove principal is authenticated but is no user: the staff API is not for Groves.
        if getattr(user, "grove", None) is not None:
            raise Forbidden("grove_not_allowed", "A Grove credential acts only on the Grove wire API; use a staff "
                            "API token ('Authorization: Token <key>').")
        if not getattr(user, "is_authenticated", False) or not getattr(user, "pk", None):
            raise NotAuthenticated("not_authenticated", SIGN_IN)
        if request.method == "OPTIONS":
            return True  # metadata only: which methods exist, no data
        method = "GET" if request.method == "HEAD" else request.method
        needed = self.perms.get(method)
        if needed is None:
            if hasattr(view, request.method.lower()):
                raise Forbidden("permission_undeclared", f"{request.method} on this endpoint has no declared "
                                "permission, so it is refused.")
            return True  # DRF answers 405 for a method the view does not implement
        if not user.has_perm(needed):
            raise permission_refusal(needed)
        return True


def requires(**perms: str) -> type[Requires]:
    """``permission_classes = [requires(GET="compute.view_computejob", POST="compute.add_computejob")]``."""
    name = "Requires_" + "_".join(f"{m}_{p.replace('.', '_')}" for m, p in sorted(perms.items()))
    return type(name, (Requires,), {"perms": dict(perms)})
