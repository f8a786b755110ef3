"""ASGI entry point: serves everything, and lets the long-poll ``changes`` view wait without a thread.

The Grove hot paths (heartbeat, changes) are served by ``apps.dispatch.api.lean.LeanWire`` in front of
Django when they need nothing of Django's stack; everything else, and every refusal, is Django's.

Every middleware in ``MIDDLEWARE`` is async-capable (tests/core/test_asgi.py holds that), so a waiting
long-poll holds no thread. Blob uploads (``apps.artifacts.api.urls.STREAMED_BODY_PATHS``) read their body
as it arrives instead of after Django spooled it to disk (``apps.core.asgi``). With
``FOREST_SERVE_STATIC`` (on in DEBUG) the app also serves static files, for ``make run``; in production a
front proxy serves ``collectstatic`` output.
"""
import os

import django
from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forest_host.settings")
django.setup(set_prefix=False)  # what get_asgi_application() does, before the app modules are imported

from apps.artifacts.api.urls import STREAMED_BODY_PATHS  # noqa: E402
from apps.core.asgi import StreamingBodyASGIHandler  # noqa: E402
from apps.dispatch.api.lean import LeanWire  # noqa: E402

# The lean Grove wire route in front; everything it does not serve goes to Django, whose blob paths
# stream their bodies.
application = LeanWire(StreamingBodyASGIHandler(STREAMED_BODY_PATHS))
if settings.FOREST_SERVE_STATIC:
    application = ASGIStaticFilesHandler(application)
