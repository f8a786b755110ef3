"""The audit trail of staff writes made through the API.

After the view: a successful (2xx) POST/PUT/PATCH/DELETE under ``/api/`` by a *user* (token or session;
Grove credentials act as no user and are not staff writes) becomes one ``AuditEvent``: the URL's name
is the action (``compute-job-cancel``), the target is the object the URL or the response names, and the
request id ties it to the logs. A refused call writes nothing, so it leaves the database unchanged.
Secret values are never recorded: only the response's identifying fields are kept. A view whose POST
writes nothing (placement preview) sets ``audit_writes = False``.
"""
from __future__ import annotations

import logging

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.db import DatabaseError
from django.utils.decorators import sync_and_async_middleware

from apps.accounts.choices import AuditVia
from apps.accounts.models import ApiToken
from apps.accounts.services import audit_record

log = logging.getLogger(__name__)
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The response fields that identify what was written; nothing else of a body is kept.
_IDENTIFYING = ("id", "slug", "name", "environment", "team", "status", "reason", "run_id", "digest", "grove",
                "subject_type", "subject_id", "state")
_TARGET_KWARGS = ("job_id", "run_id", "placement_id", "slug", "digest", "grove_id")


def _user(request):
    user = getattr(request, "user", None)
    return user if getattr(user, "is_authenticated", False) and getattr(user, "pk", None) else None


def _audit(request, response) -> None:
    """Record the write. The write itself has committed by now, so a failure here is logged loudly
    (with the request id) instead of turning a done write into a 500 the client would retry."""
    try:
        _record(request, response)
    except DatabaseError:
        log.exception("audit event not recorded", extra={"path": request.path, "method": request.method})


def _record(request, response) -> None:
    user = _user(request)
    if user is None:
        return
    if not 200 <= response.status_code < 300:
        return
    token = getattr(request, "auth", None)
    token = token if isinstance(token, ApiToken) else None
    match = getattr(request, "resolver_match", None)
    if match is None or not request.path.startswith("/api/"):
        return
    # A view that answers POST without writing (a preview) says so with ``audit_writes = False``.
    if getattr(getattr(match.func, "cls", None), "audit_writes", True) is False:
        return
    data = getattr(response, "data", None)
    data = data if isinstance(data, dict) else {}
    kept = {key: data[key] for key in _IDENTIFYING if isinstance(data.get(key), str | int | bool)}
    target_kwarg = next((k for k in _TARGET_KWARGS if k in match.kwargs), None)
    target_id = match.kwargs[target_kwarg] if target_kwarg else kept.get("id", kept.get("slug", ""))
    name = match.url_name or match.view_name or request.path
    # ``x-list`` answers POST by creating; the rest of the names already say what they do.
    action = f"{name[:-5]}-create" if name.endswith("-list") else name
    audit_record(actor=user, token=token, via=AuditVia.API, action=action,
                 target_type=_target_type(name), target_id=target_id, team=str(kept.get("team", "")),
                 detail={"method": request.method, "path": request.path, "status": response.status_code, **kept})


def _target_type(url_name: str) -> str:
    head, _, verb = url_name.rpartition("-")
    return head if head and verb in {"list", "detail", "cancel", "replace", "create"} else url_name


def _worth_a_look(request) -> bool:
    return request.method in WRITE_METHODS


@sync_and_async_middleware
def AuditMiddleware(get_response):
    if iscoroutinefunction(get_response):

        async def middleware(request):
            response = await get_response(request)
            if _worth_a_look(request):
                await sync_to_async(_audit)(request, response)
            return response

    else:

        def middleware(request):
            response = get_response(request)
            if _worth_a_look(request):
                _audit(request, response)
            return response

    return middleware
