"""ASGI entry point: serves everything, and lets the long-poll ``changes`` view wait without a thread.

The Grove hot paths (heartbeat, changes) are served by ``apps.dispatch.api.lean.LeanWire`` in front of
Django when they need nothing of Django's stack; everything else, and every refusal, is Django's.

Every middleware in ``MIDDLEWARE`` is async-capable (tests/core/test_asgi.py holds that), so a waiting
long-poll holds no thread. With ``FOREST_SERVE_STATIC`` (on in DEBUG) the app also serves static files,
for ``make run``; in production a front proxy serves ``collectstatic`` output.
"""
import os

from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forest_host.settings")
django_application = get_asgi_application()

from apps.dispatch.api.lean import LeanWire  # noqa: E402 - needs the app registry get_asgi_application set up

application = LeanWire(django_application)
if settings.FOREST_SERVE_STATIC:
    application = ASGIStaticFilesHandler(application)
