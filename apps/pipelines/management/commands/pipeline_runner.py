"""``manage.py pipeline_runner``: the runner pool, a Celery worker for in-place waits only.

Its queue and size come from settings (``PIPELINE_RUNNER_QUEUE``, ``PIPELINE_RUNNER_SLOTS``), the same
values run and job status show, so the pool that runs is the pool that is reported.
"""
from __future__ import annotations

import socket

from django.conf import settings
from django.core.management.base import BaseCommand

from forest_host.celery import app


class Command(BaseCommand):
    help = "Run the runner pool: a Celery worker for steps that wait in place (PIPELINE_RUNNER_SLOTS processes)."

    def add_arguments(self, parser):
        parser.add_argument("--loglevel", default="INFO")
        parser.add_argument("--hostname", default=f"runner@{socket.gethostname()}",
                            help="Celery node name (unique per worker on one broker).")

    def handle(self, *args, **options):
        slots = settings.PIPELINE_RUNNER_SLOTS
        self.stderr.write(f"runner pool: {slots} slot(s) on queue {settings.PIPELINE_RUNNER_QUEUE}")
        app.worker_main(["worker", "-Q", settings.PIPELINE_RUNNER_QUEUE, "-c", str(slots),
                         "-n", options["hostname"], "--loglevel", options["loglevel"],
                         "--without-gossip", "--without-mingle"])
