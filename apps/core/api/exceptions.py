"""The one place where exceptions become the API's error shape ``{"code", "detail", "field"}``."""
from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions as drf
from rest_framework.authentication import get_authorization_header
from rest_framework.response import Response
from rest_framework.views import exception_handler

from apps.core.errors import Conflict, ForestError
from apps.core.outage import outage_of

log = logging.getLogger(__name__)

_DRF_CODES = {
    drf.ParseError: "malformed_json",
    drf.NotAuthenticated: "not_authenticated",
    drf.AuthenticationFailed: "authentication_failed",
    drf.PermissionDenied: "permission_denied",
    drf.NotFound: "not_found",
    drf.MethodNotAllowed: "method_not_allowed",
    drf.NotAcceptable: "not_acceptable",
    drf.UnsupportedMediaType: "unsupported_media_type",
    drf.Throttled: "throttled",
}


def _first_error(detail, path: str = "") -> tuple[str, str, str]:
    """Walk DRF's nested error structure to the first leaf: (field path, message, code)."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            if key == "non_field_errors":
                return _first_error(value, path)
            child = f"{path}.{key}" if path else str(key)
            return _first_error(value, child)
    if isinstance(detail, list):
        for index, value in enumerate(detail):
            if isinstance(value, dict | list):
                if value:
                    return _first_error(value, f"{path}[{index}]")
                continue
            return _first_error(value, path)
    code = getattr(detail, "code", "invalid") or "invalid"
    return path, str(detail), str(code)


_RENAMED = {"invalid": "invalid_value", "required": "field_required", "null": "field_null", "blank": "field_blank"}


def validation_code(drf_code: str) -> str:
    """DRF's generic leaf codes renamed into Forest's namespace; our own codes pass through."""
    return _RENAMED.get(drf_code, drf_code)


# Scheme words an Authorization header may start with (the IANA registry's, and ours): only these are
# ever echoed back. Anything else in first place is most likely the credential itself, sent without a
# scheme word, and is never repeated (a response is logged, cached and shown by clients).
KNOWN_SCHEMES = frozenset({"basic", "bearer", "digest", "dpop", "gnap", "hoba", "mutual", "negotiate", "ntlm",
                           "oauth", "privatetoken", "scram-sha-1", "scram-sha-256", "vapid", "token",
                           "aws4-hmac-sha256", "apikey", "api-key", "jwt"})


def _scheme_hint(context) -> str:
    """When the caller sent credentials in a scheme this view does not take, say which one it takes."""
    request, view = context.get("request"), context.get("view")
    if request is None or view is None:
        return ""
    header = get_authorization_header(request).split()
    if not header:
        return ""
    word = header[0].decode(errors="replace")
    accepted = [challenge.split()[0] for auth in view.get_authenticators()
                if (challenge := auth.authenticate_header(request))]
    if not accepted or word.lower() in {scheme.lower() for scheme in accepted}:
        return ""
    wanted = " or ".join(f"'Authorization: {scheme} <...>'" for scheme in accepted)
    if word.lower() not in KNOWN_SCHEMES:
        return f" You sent a credential without a scheme word this endpoint knows; it takes {wanted}."
    return f" You sent a '{word}' credential; this endpoint takes {wanted}."


# SQLSTATEs of two writers that met: a deadlock, a serialization failure. The request lost a race it could
# not order; the client retries (the one place these become an answer, never a 500).
WRITE_CONFLICT_STATES = frozenset({"40P01", "40001"})


def write_conflict_of(exc: BaseException) -> Conflict | None:
    link: BaseException | None = exc
    seen: set[int] = set()
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if getattr(link, "sqlstate", None) in WRITE_CONFLICT_STATES or getattr(link, "pgcode", None) in \
                WRITE_CONFLICT_STATES:
            return Conflict("write_conflict", "Another request changed the same records at the same moment; "
                            "retry the request.")
        link = link.__cause__ or link.__context__
    return None


def forest_exception_handler(exc, context):
    exc = write_conflict_of(exc) or exc
    outage = outage_of(exc)
    if outage is not None:
        log.warning("request refused: %s", outage.code, extra={"error": str(exc)})
        exc = outage
    if isinstance(exc, ForestError):
        body = exc.as_dict()
        if exc.status == 401 and (hint := _scheme_hint(context)):
            body["detail"] = exc.detail + hint
        response = Response(body, status=exc.status)
        if exc.status == 401:
            _challenge(response, context)
        elif exc.status == 503 and "retry_after_s" in exc.extra:
            response["Retry-After"] = str(exc.extra["retry_after_s"])
        return response
    if isinstance(exc, RequestDataTooBig):
        # Django's own message names its setting (DATA_UPLOAD_MAX_MEMORY_SIZE); say what an operator sets.
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        detail = f"The request body is larger than the limit of {limit} bytes (FOREST_MAX_BODY_BYTES)."
        return Response({"code": "payload_too_large", "detail": detail}, status=413)
    if isinstance(exc, drf.ValidationError):
        field, message, code = _first_error(exc.detail)
        body = {"code": validation_code(code), "detail": message}
        if field:
            body["field"] = field
        return Response(body, status=400)
    if isinstance(exc, Http404):
        exc = drf.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = drf.PermissionDenied()
    response = exception_handler(exc, context)
    if response is None:
        log.exception("unhandled error in API view", exc_info=exc)
        return Response({"code": "internal_error", "detail": "Host failed to handle this request."}, status=500)
    code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    if isinstance(exc, drf.NotAuthenticated | drf.AuthenticationFailed):
        detail += _scheme_hint(context)
    response.data = {"code": code, "detail": detail}
    return response


def _challenge(response: Response, context) -> None:
    """A 401 names the scheme to use (RFC 9110), as DRF does for its own authentication errors."""
    view, request = context.get("view"), context.get("request")
    if view is None or request is None:
        return
    for auth in view.get_authenticators():
        if challenge := auth.authenticate_header(request):
            response["WWW-Authenticate"] = challenge
            return
