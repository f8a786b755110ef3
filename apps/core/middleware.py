"""Every ``/api/`` answer in one error shape, including what Django answers before DRF runs.

DRF's handler shapes errors raised inside API views. A path no route matches (a typo, a non-UUID id),
a CSRF failure or a crash in middleware is answered by Django itself with an HTML page; this middleware
turns any such non-JSON 4xx/5xx under ``/api/`` into ``{"code", "detail"[, "field"]}``.
"""
from __future__ import annotations

import json
import uuid

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, resolve

API_PREFIX = "/api/"

_CODES = {
    400: ("bad_request", "The request could not be understood."),
    403: ("permission_denied", "You may not do this."),
    404: ("not_found", "No API endpoint at {path}."),
    405: ("method_not_allowed", "{method} is not allowed on {path}."),
    413: ("payload_too_large", "The request body is too large."),
    415: ("unsupported_media_type", "Send the body as application/json."),
    500: ("internal_error", "Host failed to handle this request."),
}
# What a malformed id is tried as, to tell "wrong id" from "wrong path".
_ID_PROBES = (str(uuid.UUID(int=0)), "1")


def _invalid_id(path: str) -> tuple[str, str, str] | None:
    """(kwarg name, bad value, expected kind) when the path matches a route once one segment is a
    well-formed id."""
    segments = path.split("/")
    for index, segment in enumerate(segments):
        if not segment or segment in {"api", "forest", "v1"}:
            continue
        for probe in _ID_PROBES:
            trial = "/".join([*segments[:index], probe, *segments[index + 1:]])
            try:
                match = resolve(trial)
            except Resolver404:
                continue
            name = next((key for key, value in match.kwargs.items() if str(value) == probe), None)
            if name:
                return name, segment, "a UUID" if probe == _ID_PROBES[0] else "a whole number"
    return None


def error_body(request: HttpRequest, status: int) -> dict:
    code, detail = _CODES.get(status, ("error" if status < 500 else "internal_error",
                                       f"Host answered {status}."))
    if status == 404:
        bad = _invalid_id(request.path)
        if bad:
            name, value, kind = bad
            return {"code": "invalid_id", "detail": f"'{value}' is not a valid {name}: it must be {kind}.",
                    "field": name}
    return {"code": code, "detail": detail.format(path=request.path, method=request.method)}


class ApiErrorShapeMiddleware:
    """Sync and async capable: under ASGI the long-poll must not be pushed into a thread by us."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest):
        if self.async_mode:
            return self._acall(request)
        return self._shape(request, self.get_response(request))

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        return self._shape(request, await self.get_response(request))

    def _shape(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if not request.path.startswith(API_PREFIX) or response.status_code < 400:
            return response
        if response.get("Content-Type", "").startswith("application/json") and _is_shaped(response):
            return response
        shaped = JsonResponse(error_body(request, response.status_code), status=response.status_code)
        for header in ("Allow", "WWW-Authenticate", "Retry-After"):
            if response.has_header(header):
                shaped[header] = response[header]
        return shaped


def _is_shaped(response: HttpResponse) -> bool:
    if getattr(response, "streaming", False):
        return True
    try:
        body = json.loads(response.content or b"null")
    except ValueError:
        return False
    return isinstance(body, dict) and "code" in body
