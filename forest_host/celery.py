"""The Celery application. Tasks live in each app's ``tasks.py``; the beat schedule is in settings."""
import os

from celery import Celery

from forest_host.liveness import HeartbeatStep

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forest_host.settings")

app = Celery("forest_host")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Worker and runner touch their liveness file while connected and consuming (forest_host/liveness.py).
app.steps["consumer"].add(HeartbeatStep)
