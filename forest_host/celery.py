"""The Celery application. Tasks live in each app's ``tasks.py``; the beat schedule is in settings."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forest_host.settings")

app = Celery("forest_host")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
