"""The landing page and the health probe."""
import logging

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.defaults import page_not_found

from apps.core.middleware import API_PREFIX, error_body
from apps.core.outage import DATABASE_UNAVAILABLE, retry_after_s
from apps.core.selectors import process_liveness

log = logging.getLogger(__name__)


def home(request: HttpRequest) -> HttpResponse:
    return render(request, "home.html")


PROCESSES_STALE = "processes_stale"


def healthz(request: HttpRequest) -> JsonResponse:
    """Readiness: a database round-trip (503 when it cannot be reached), plus each background role's liveness
    (``processes``: live / stale / unknown, from the probe's record). A stale worker leaves the answer 200,
    with ``status`` "degraded": a web still takes reports and submissions, which the outbox holds for the
    workers' return. ``?require=worker,runner`` makes those roles' staleness a 503 for a caller that wants to
    gate on them (docs/decisions.md "Host survives its broker")."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        processes = {row.role: row.verdict for row in process_liveness()}
    except Exception as exc:  # any driver error means "not ready"; its text (addresses, ports) stays in the log
        log.warning("health check: database unreachable", extra={"error": str(exc)})
        response = JsonResponse({"status": "unavailable", "code": DATABASE_UNAVAILABLE,
                                 "detail": "Host cannot reach its database."}, status=503)
        response["Retry-After"] = str(retry_after_s())
        return response
    required = [role for role in request.GET.get("require", "").split(",") if role]
    unknown = sorted(set(required) - set(processes))
    if unknown:
        return JsonResponse({"code": "invalid_role", "detail": f"No such process role: {', '.join(unknown)}.",
                             "field": "require"}, status=400)
    body = {"status": "ok" if all(v == "live" for v in processes.values()) else "degraded", "processes": processes}
    not_live = [role for role in required if processes[role] != "live"]
    if not_live:
        return JsonResponse({**body, "code": PROCESSES_STALE,
                             "detail": f"No {', '.join(not_live)} process showed life within the bound.",
                             "field": None}, status=503)
    return JsonResponse(body)


def not_found(request: HttpRequest, exception=None) -> HttpResponse:
    """Django's 404 for URLs no route matches: the API's error shape under /api/, Django's page elsewhere."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse(error_body(request, 404), status=404)
    return page_not_found(request, exception)
