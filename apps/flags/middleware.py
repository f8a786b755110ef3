"""Pins one flag snapshot per request, so a request sees a consistent set of flags.

Sync and async: under ASGI an async view (the ``changes`` long-poll) must not be pushed into a thread
by a sync-only middleware. A sync request reads its snapshot on its first flag lookup (a heartbeat reads
none and pays nothing); an async one reads it up front, off the event loop.
"""
from asgiref.sync import iscoroutinefunction, sync_to_async
from django.utils.decorators import sync_and_async_middleware

from apps.flags.selectors import fresh_snapshot, pinned_snapshot


@sync_and_async_middleware
def FlagSnapshotMiddleware(get_response):
    if iscoroutinefunction(get_response):

        async def middleware(request):
            snapshot = await sync_to_async(fresh_snapshot)()
            with pinned_snapshot(snapshot):
                return await get_response(request)

    else:

        def middleware(request):
            with pinned_snapshot(deferred=True):
                return get_response(request)

    return middleware
