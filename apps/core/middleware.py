"""Request plumbing every view relies on: a request id, a guard that keeps characters PostgreSQL cannot
store out of paths and query strings, and every ``/api/`` answer in one error shape.

DRF's handler shapes errors raised inside API views. A path no route matches (a typo, a non-UUID id),
a CSRF failure or a crash in middleware is answered by Django itself with an HTML page;
``ApiErrorShapeMiddleware`` turns any such non-JSON 4xx/5xx under ``/api/`` into
``{"code", "detail"[, "field"]}``. All of them are sync *and* async: under ASGI the ``changes`` long-poll
must not be pushed into a thread.
"""
from __future__ import annotations

import abc
import functools
import json
import re
import uuid

import structlog
from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, resolve
from django.utils.decorators import sync_and_async_middleware

from apps.core import context
from apps.core.body import text_problem

REQUEST_ID_HEADER = "X-Request-ID"
# A caller's id is kept only when it is short and plain, so it is safe in logs, headers and the database.
_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def request_id_from(offered: str) -> str:
    """The request's id: the caller's ``X-Request-ID`` when it is short and plain, else a fresh one. The one
    rule, for Django's requests and the lean wire routes alike."""
    return offered if _CLIENT_ID.match(offered) else uuid.uuid4().hex


def _request_id(request: HttpRequest) -> str:
    return request_id_from(request.META.get("HTTP_X_REQUEST_ID", ""))


def bind_request_id(request_id: str) -> None:
    """Every log line and audit row written while serving this request carries its id."""
    context.request_id.set(request_id)
    structlog.contextvars.bind_contextvars(request_id=request_id)


def unbind_request_id() -> None:
    structlog.contextvars.unbind_contextvars("request_id")


@functools.cache
def security_headers(*, secure: bool) -> tuple[tuple[str, str], ...]:
    """What Django's response middleware adds to a plain JSON answer, asked of that middleware itself
    (``SecurityMiddleware``, ``XFrameOptionsMiddleware``) so the lean wire routes answer with the same
    headers whatever the settings say. ``secure``: an HTTPS request (HSTS is sent only then)."""
    from django.middleware.clickjacking import XFrameOptionsMiddleware
    from django.middleware.security import SecurityMiddleware
    from django.test import RequestFactory

    def never_called(request: HttpRequest) -> HttpResponse:
        raise AssertionError("only process_response is asked")

    request = RequestFactory().get("/", secure=secure)
    response = JsonResponse({})
    before = set(response.headers)
    for middleware in (SecurityMiddleware(never_called), XFrameOptionsMiddleware(never_called)):
        response = middleware.process_response(request, response)
    return tuple((name, response.headers[name]) for name in response.headers if name not in before)


# API routes take every secret (API token, Grove credential, job data token, enrollment token) in a header.
# One sent in the URL instead is refused, never read: URLs end up in logs, proxies and browser history.
SECRET_QUERY_NAMES = frozenset({"token", "access_token", "api_key", "apikey", "key", "secret", "credential",
                                "authorization", "auth", "password", "data_token", "job_token"})
SECRET_VALUE_RE = re.compile(r"^(?:Token|Bearer|Job)\s|^(?:fat|fgc|fet)_", re.I)


def _secret_in_query(request: HttpRequest) -> JsonResponse | None:
    if not request.path.startswith(API_PREFIX):
        return None
    for key, values in request.GET.lists():
        if key.lower() in SECRET_QUERY_NAMES or any(SECRET_VALUE_RE.match(value) for value in values):
            return JsonResponse({"code": "secret_in_query",
                                 "detail": "Secrets are sent in the Authorization header, never in the URL; this "
                                           "request was not read (rotate the secret if it was real).",
                                 "field": f"query.{key}"[:100]}, status=400)
    return None


def _refusal(request: HttpRequest) -> JsonResponse | None:
    """A 400 when the path or a query parameter holds a character Host cannot store, or an API URL carries a
    secret; else None."""
    problem = text_problem(request.path)
    if problem:
        return JsonResponse({"code": problem[0], "detail": f"The URL path {problem[1]}", "field": "path"},
                            status=400)
    refused = _secret_in_query(request)
    if refused is not None:
        return refused
    for key, values in request.GET.lists():
        for value in [key, *values]:
            problem = text_problem(value)
            if problem:
                field = f"query.{key}" if not text_problem(key) else "query"
                return JsonResponse({"code": problem[0], "detail": f"A query parameter {problem[1]}",
                                     "field": field}, status=400)
    return None


def _begin(request: HttpRequest) -> str:
    request_id = _request_id(request)
    request.request_id = request_id
    bind_request_id(request_id)
    return request_id


def _finish(response, request_id: str):
    response[REQUEST_ID_HEADER] = request_id
    unbind_request_id()
    return response


@sync_and_async_middleware
def RequestMiddleware(get_response):
    """Gives each request an id (``X-Request-ID`` in, or a fresh one) and refuses NUL in URLs."""
    if iscoroutinefunction(get_response):

        async def middleware(request):
            request_id = _begin(request)
            refusal = _refusal(request)
            response = refusal if refusal is not None else await get_response(request)
            return _finish(response, request_id)

    else:

        def middleware(request):
            request_id = _begin(request)
            refusal = _refusal(request)
            response = refusal if refusal is not None else get_response(request)
            return _finish(response, request_id)

    return middleware


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


class ResponseMiddleware(abc.ABC):
    """A middleware that only looks at the response (``respond``), sync and async capable: under ASGI the
    long-poll must not be pushed into a thread by us."""

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
        return self.respond(request, self.get_response(request))

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        return self.respond(request, await self.get_response(request))

    @abc.abstractmethod
    def respond(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        """The response to send instead of (or as) ``response``."""


class ApiErrorShapeMiddleware(ResponseMiddleware):
    """Any non-JSON 4xx/5xx under ``/api/`` becomes the error shape."""

    def respond(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
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


class OutageMiddleware(ResponseMiddleware):
    """A request that died of a lost database or broker connection answers 503 with a stable code and
    ``Retry-After`` instead of Django's 500 (``apps.core.outage``); API paths and probes get the error
    shape, a browser a short plain-text notice. DRF views shape their own through the exception handler."""

    def respond(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        outage = getattr(request, "forest_outage", None)
        if outage is None or response.status_code != 500:
            return response
        if request.path.startswith(API_PREFIX) or "text/html" not in request.headers.get("Accept", ""):
            answer = JsonResponse(outage.as_dict(), status=outage.status)
        else:
            answer = HttpResponse(f"{outage.detail} [{outage.code}]\n", status=outage.status,
                                  content_type="text/plain; charset=utf-8")
        answer["Retry-After"] = str(outage.extra["retry_after_s"])
        return answer
