"""One family of application exceptions. Each carries a stable ``code`` and a sentence a person can act on.

Services raise these; the single DRF exception handler (``apps.core.api.exceptions``) turns them into
``{"code", "detail", "field"}``; management commands turn them into one line and a non-zero exit.
"""
from __future__ import annotations


class ForestError(Exception):
    """Base of every refusal Forest reports. Subclasses fix ``status``; instances carry the code."""

    status = 400
    # A placement refusal's whole stored decision (apps.placement.decide), kept for the refusal row and
    # never put in the API body; None on every other refusal.
    decision: dict | None = None

    def __init__(self, code: str, detail: str, *, field: str | None = None, extra: dict | None = None):
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.field = field
        self.extra = extra or {}

    def as_dict(self) -> dict:
        body = {"code": self.code, "detail": self.detail}
        if self.field:
            body["field"] = self.field
        body.update(self.extra)
        return body


class ValidationFailed(ForestError):
    status = 400


class NotAuthenticated(ForestError):
    status = 401


class Forbidden(ForestError):
    status = 403


class NotFound(ForestError):
    status = 404


class Conflict(ForestError):
    status = 409


class Gone(ForestError):
    status = 410


class PayloadTooLarge(ForestError):
    status = 413


class UpstreamFailed(ForestError):
    """Something Host depends on (an OCI registry) answered badly or not at all."""

    status = 502


class ServiceUnavailable(ForestError):
    """Host cannot serve this now (e.g. its object-store bucket is missing); retrying later may work."""

    status = 503
