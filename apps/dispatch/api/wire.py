"""``GET groves/{id}/changes``: the long-poll, as a plain async Django view so a waiting Grove holds no
thread. It authenticates with the same ``grove_for_request`` and answers in the same error shape as the
DRF wire views.

Each wake (a Redis pub/sub message on the Grove's channel, or the recheck interval) re-reads the
database, which is the only truth; the wait is bounded by ``wait`` (0..30 s). Without ``REDIS_URL``
the view polls the database every ``PIPELINE_CHANGES_DB_POLL_S`` instead.
"""
from __future__ import annotations

import asyncio

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import JsonResponse

from apps.core.db import released
from apps.core.errors import ForestError
from apps.dispatch import rules, selectors, wakeups
from apps.dispatch.api.views import ChangesSchemaView
from apps.groves import services as grove_services
from apps.groves.api.authentication import WWW_AUTHENTICATE, grove_for_request


async def changes_view(request, grove_id):
    if request.method != "GET":
        return JsonResponse({"code": "method_not_allowed", "detail": f'Method "{request.method}" not allowed.'},
                            status=405)
    try:
        grove = await sync_to_async(released(grove_for_request))(request, grove_id)
        wait = rules.changes_wait(request.GET.get("wait"))
    except ForestError as exc:
        response = JsonResponse(exc.as_dict(), status=exc.status)
        if exc.status == 401:
            response["WWW-Authenticate"] = WWW_AUTHENTICATE
        return response
    return JsonResponse(await changes_answer(grove, wait))


async def changes_answer(grove, wait: int, *, thread_sensitive: bool = True) -> dict:
    """The body of a long-poll for an authenticated Grove: at once when there is news, else after ``wait``
    seconds or the first wake-up that brings news. Each read gives its connection back before the wait,
    so waiting Groves hold no database connection. ``thread_sensitive=False`` (the lean route) runs the
    reads on the shared executor instead of the request's own thread."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    if grove_services.poll_stamp_due(grove):  # readiness, written coarsely: most polls write nothing
        await sync_to_async(released(grove_services.grove_poll_record),
                            thread_sensitive=thread_sensitive)(grove=grove)
    read = sync_to_async(released(selectors.grove_changes), thread_sensitive=thread_sensitive)
    async with wakeups.GroveWaiter(grove.pk) as waiter:
        # Subscribed before the first read: work assigned between the read and the wait still wakes us.
        recheck = (getattr(settings, "PIPELINE_CHANGES_RECHECK_S", 10.0) if waiter.subscribed
                   else getattr(settings, "PIPELINE_CHANGES_DB_POLL_S", 1.0))
        while True:
            body, news = await read(grove=grove)
            remaining = deadline - loop.time()
            if news or remaining <= 0:
                return body
            await waiter.wait(min(remaining, recheck))


# drf-spectacular documents DRF views only; pointing it at the schema stand-in lists this endpoint in
# /api/schema/ while Django serves the coroutine.
changes_view.cls = ChangesSchemaView
changes_view.initkwargs = {}
