"""The landing page and the health probe."""
import logging

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.defaults import page_not_found

from apps.core.middleware import API_PREFIX, error_body
from apps.core.outage import DATABASE_UNAVAILABLE, retry_after_s

log = logging.getLogger(__name__)


def home(request: HttpRequest) -> HttpResponse:
    return render(request, "home.html")


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness plus a database round-trip; 503 when the database cannot be reached."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any driver error means "not ready"; its text (addresses, ports) stays in the log
        log.warning("health check: database unreachable", extra={"error": str(exc)})
        response = JsonResponse({"status": "unavailable", "code": DATABASE_UNAVAILABLE,
                                 "detail": "Host cannot reach its database."}, status=503)
        response["Retry-After"] = str(retry_after_s())
        return response
    return JsonResponse({"status": "ok"})


def not_found(request: HttpRequest, exception=None) -> HttpResponse:
    """Django's 404 for URLs no route matches: the API's error shape under /api/, Django's page elsewhere."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse(error_body(request, 404), status=404)
    return page_not_found(request, exception)
