"""ASGI entry point: serves everything, and lets the long-poll ``changes`` view wait without a thread."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forest_host.settings")
application = get_asgi_application()
