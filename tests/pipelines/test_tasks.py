"""The services send pipeline tasks by name (``vocabulary.Task``) and never import ``tasks.py``: every name
they may send is a task the worker has registered, and every pipeline task is registered under one of them
(a task renamed on one side only would be sent to a worker that does not know it)."""
from __future__ import annotations

from celery.local import Proxy
from django.conf import settings

from apps.pipelines import tasks
from apps.pipelines.vocabulary import Task
from forest_host.celery import app


def test_every_name_the_services_send_is_a_registered_task():
    assert {str(name) for name in Task} <= set(app.tasks)


def test_every_pipeline_task_is_registered_under_a_declared_name():
    declared = {getattr(tasks, name).name for name in dir(tasks) if isinstance(getattr(tasks, name), Proxy)}
    assert declared == {str(name) for name in Task}


def test_the_beat_schedule_names_a_declared_task():
    assert settings.CELERY_BEAT_SCHEDULE["pipelines.sweep"]["task"] in set(Task)
