"""Grove credentials (``Authorization: Bearer fgc_...``), accepted only on the Grove wire endpoints."""
from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.permissions import BasePermission

from apps.core.errors import Forbidden, NotAuthenticated
from apps.groves.services import grove_authenticate


def bearer_credential(request) -> str:
    """The presented Grove credential, or 401 with a code."""
    header = get_authorization_header(request).split()
    if not header or header[0].lower() != b"bearer":
        raise NotAuthenticated("not_authenticated", "Grove endpoints need 'Authorization: Bearer <credential>'.")
    if len(header) != 2:
        raise NotAuthenticated("credential_malformed", "Send 'Authorization: Bearer <credential>'.")
    return header[1].decode(errors="replace")


class GroveCredentialAuthentication(BaseAuthentication):
    keyword = b"bearer"

    def authenticate(self, request):
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword:
            return None
        credential = grove_authenticate(presented=bearer_credential(request))
        # The Grove acts as no Django user; request.auth carries the credential and its Grove.
        return (GrovePrincipal(credential.grove), credential)

    def authenticate_header(self, request):
        return 'Bearer realm="forest-grove"'


class GrovePrincipal:
    """Stands in for ``request.user`` on wire requests: authenticated, never staff."""

    is_authenticated = True
    is_staff = False
    is_superuser = False

    def __init__(self, grove):
        self.grove = grove

    def __str__(self) -> str:
        return f"grove:{self.grove.slug}"


class IsOwnGrove(BasePermission):
    """The credential must belong to the Grove named in the URL."""

    def has_permission(self, request, view):
        credential = request.auth
        if credential is None or not hasattr(credential, "grove_id"):
            raise NotAuthenticated("not_authenticated", "Grove endpoints need 'Authorization: Bearer <credential>'.")
        if str(credential.grove_id) != str(view.kwargs.get("grove_id")):
            raise Forbidden("grove_mismatch", "This credential belongs to another Grove.")
        return True


class GroveCredentialScheme(OpenApiAuthenticationExtension):
    target_class = GroveCredentialAuthentication
    name = "groveCredential"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "Grove credential issued at enrollment."}
