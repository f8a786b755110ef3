"""WSGI entry point (admin, staff pages and REST API under a sync server)."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forest_host.settings")
application = get_wsgi_application()
