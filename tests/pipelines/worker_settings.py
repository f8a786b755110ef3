"""Settings for the Celery worker subprocess the reliability tests start: the test settings, plus the
queue of the one test that started it (``FOREST_TEST_QUEUE``), so tasks it sends stay on that queue."""
import os

from tests.settings import *  # noqa: F403

CELERY_TASK_DEFAULT_QUEUE = os.environ["FOREST_TEST_QUEUE"]
