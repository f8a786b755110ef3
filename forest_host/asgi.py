"""ASGI entry point: serves everything, and lets the long-poll ``changes`` view wait without a thread.

Every middleware in ``MIDDLEWARE`` is async-capable (tests/core/test_asgi.py holds that), so a waiting
long-poll holds no thread. With ``FOREST_SERVE_STATIC`` (on in DEBUG) the app also serves static files,
for ``make run``; in production a front proxy serves ``collectstatic`` output.
"""
import os

from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forest_host.settings")
application = get_asgi_application()
if settings.FOREST_SERVE_STATIC:
    application = ASGIStaticFilesHandler(application)
