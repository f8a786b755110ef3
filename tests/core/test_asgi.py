"""Host under ASGI: a waiting long-poll must hold no thread, so no middleware may be sync-only."""
from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpResponse
from django.test import RequestFactory
from django.utils.module_loading import import_string

from apps.flags.middleware import FlagSnapshotMiddleware
from apps.flags.models import FlagOverride
from apps.flags.selectors import is_enabled

FLAG = "host.staff.execution_observability"


@pytest.mark.parametrize("path", settings.MIDDLEWARE)
def test_every_middleware_is_async_capable(path):
    middleware = import_string(path)
    assert getattr(middleware, "async_capable", False), f"{path} would run the async long-poll in a thread"


@pytest.mark.django_db(transaction=True)
def test_async_requests_pin_one_flag_snapshot():
    seen = []

    async def view(request):
        seen.append(is_enabled(FLAG))
        await sync_to_async(FlagOverride.objects.create)(flag_id=FLAG, enabled=True)  # changed mid-request
        seen.append(is_enabled(FLAG))
        return HttpResponse()

    asyncio.run(FlagSnapshotMiddleware(view)(RequestFactory().get("/")))
    assert seen == [False, False]
    assert is_enabled(FLAG) is True  # the next request sees it
