"""Settings for the Celery worker subprocesses the reliability tests start: the test settings, plus the
queues of the one test that started them (``FOREST_TEST_QUEUE`` and its runner queue), so tasks they
send stay on that test's queues."""
import os

from tests.settings import *  # noqa: F403

CELERY_TASK_DEFAULT_QUEUE = os.environ["FOREST_TEST_QUEUE"]
PIPELINE_RUNNER_QUEUE = f"{CELERY_TASK_DEFAULT_QUEUE}.runner"
