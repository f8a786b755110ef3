"""Grove credentials (``Authorization: Bearer fgc_...``), accepted only on the Grove wire endpoints.

``grove_for_request`` is the one check every wire view makes (DRF views through the authentication class,
the async ``changes`` long-poll and the heartbeat's full path directly): the credential is valid, and
when the URL names a Grove, the credential is that Grove's.
"""
from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.permissions import BasePermission

from apps.core.datatoken import data_token_read
from apps.core.errors import Forbidden, NotAuthenticated
from apps.groves.models import Grove
from apps.groves.services import grove_authenticate

NEEDS_BEARER = "Grove endpoints need 'Authorization: Bearer <credential>'."
WWW_AUTHENTICATE = 'Bearer realm="forest-grove"'


def bearer_credential(request) -> str:
    """The presented Grove credential, or 401 with a code."""
    header = get_authorization_header(request).split()
    if not header or header[0].lower() != b"bearer":
        raise NotAuthenticated("not_authenticated", NEEDS_BEARER)
    if len(header) != 2:
        raise NotAuthenticated("credential_malformed", "Send 'Authorization: Bearer <credential>'.")
    return header[1].decode(errors="replace")


def grove_for_request(request, grove_id=None) -> Grove:
    """The Grove whose credential signed ``request``; 401 for a missing, unknown or revoked credential,
    403 ``grove_mismatch`` when ``grove_id`` (from the URL) names another Grove."""
    credential = grove_authenticate(presented=bearer_credential(request))
    if grove_id is not None and str(credential.grove_id) != str(grove_id):
        raise Forbidden("grove_mismatch", "This credential belongs to another Grove.")
    return credential.grove


class GroveCredentialAuthentication(BaseAuthentication):
    """``request.user`` is a ``GrovePrincipal`` and ``request.auth`` the Grove (checked against the URL's
    ``grove_id`` when there is one)."""

    keyword = b"bearer"

    def authenticate(self, request):
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword:
            return None
        kwargs = (getattr(request, "parser_context", None) or {}).get("kwargs") or {}
        grove = grove_for_request(request, kwargs.get("grove_id"))
        return (GrovePrincipal(grove), grove)

    def authenticate_header(self, request):
        return WWW_AUTHENTICATE


class GrovePrincipal:
    """Stands in for ``request.user`` on wire requests: authenticated, never staff."""

    is_authenticated = True
    is_staff = False
    is_superuser = False

    def __init__(self, grove: Grove):
        self.grove = grove

    def __str__(self) -> str:
        return f"grove:{self.grove.slug}"


class JobDataPrincipal(GrovePrincipal):
    """A job data token's holder: acts for its Grove, narrowed to one job's inputs and outputs."""

    def __init__(self, grove: Grove, claims):
        super().__init__(grove)
        self.claims = claims

    def __str__(self) -> str:
        return f"grove:{self.grove.slug}:job:{self.claims.job_id}"


class JobDataTokenAuthentication(BaseAuthentication):
    """``Authorization: Job <token>`` (``apps.core.datatoken``): a pod's data containers fetch inputs and
    upload outputs with it, never with the Grove's credential."""

    keyword = b"job"

    def authenticate(self, request):
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword:
            return None
        if len(header) != 2:
            raise NotAuthenticated("data_token_invalid", "Send 'Authorization: Job <token>'.")
        claims = data_token_read(header[1].decode("latin-1"))
        grove = Grove.objects.filter(pk=claims.grove_id, credentials__revoked_at__isnull=True).distinct().first()
        if grove is None:
            raise NotAuthenticated("data_token_invalid", "The token's Grove is gone or revoked.")
        return (JobDataPrincipal(grove, claims), grove)

    def authenticate_header(self, request):
        return "Job"


class IsGrove(BasePermission):
    """A Grove credential was presented (whose Grove, the authentication class has checked)."""

    def has_permission(self, request, view):
        if not isinstance(request.user, GrovePrincipal):
            raise NotAuthenticated("not_authenticated", NEEDS_BEARER)
        return True


class GroveCredentialScheme(OpenApiAuthenticationExtension):
    target_class = GroveCredentialAuthentication
    name = "groveCredential"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "Grove credential issued at enrollment."}
