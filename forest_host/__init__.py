"""Forest Host: the Django project that holds desired state and decides placement."""
from .celery import app as celery_app

__all__ = ("celery_app",)
