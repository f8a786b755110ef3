"""Request plumbing that every view relies on: a request id, and a guard that keeps characters PostgreSQL
cannot store out of paths and query strings.

Both are sync *and* async: under ASGI the ``changes`` long-poll must not be pushed into a thread.
"""
from __future__ import annotations

import re
import uuid

import structlog
from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, JsonResponse
from django.utils.decorators import sync_and_async_middleware

from apps.core import context
from apps.core.body import text_problem

REQUEST_ID_HEADER = "X-Request-ID"
# A caller's id is kept only when it is short and plain, so it is safe in logs, headers and the database.
_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def _request_id(request: HttpRequest) -> str:
    offered = request.META.get("HTTP_X_REQUEST_ID", "")
    return offered if _CLIENT_ID.match(offered) else uuid.uuid4().hex


def _refusal(request: HttpRequest) -> JsonResponse | None:
    """A 400 when the path or a query parameter holds a character Host cannot store; else None."""
    problem = text_problem(request.path)
    if problem:
        return JsonResponse({"code": problem[0], "detail": f"The URL path {problem[1]}", "field": "path"},
                            status=400)
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
    context.request_id.set(request_id)
    structlog.contextvars.bind_contextvars(request_id=request_id)
    return request_id


def _finish(response, request_id: str):
    response[REQUEST_ID_HEADER] = request_id
    structlog.contextvars.unbind_contextvars("request_id")
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
