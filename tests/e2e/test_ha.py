"""Host HA under process loss, end to end (bench/ha.py's harness with a handful of jobs): two uvicorn web
processes, two Celery workers and beat, on this test's PostgreSQL database and a private queue on the test
Redis; simulated Groves speak the wire API over real HTTP, deliver every terminal report three times and
fail over between the webs. Mid-run one web and one worker are SIGKILLed and restarted and the broker's
queue is flushed. Nothing is faked; "flushing the broker" deletes this test's private queue rather than
the whole Redis database, which parallel test processes share."""
from __future__ import annotations

import os

import pytest
import redis
from django.conf import settings as django_settings

from apps.flags.services import flag_override_set
from bench import ha
from tests.pipelines.conftest import _test_database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.e2e]


def test_process_loss_loses_nothing_doubles_nothing_and_revives_nothing(celery_queue, tmp_path):
    flag_override_set(name="host.pipeline_detached_wait", enabled=True, reason="ha test")
    env = {**os.environ, "DATABASE_URL": _test_database_url(),
           "DJANGO_SETTINGS_MODULE": "tests.pipelines.worker_settings",
           "FOREST_TEST_QUEUE": celery_queue, "CELERY_BROKER_URL": django_settings.CELERY_BROKER_URL,
           "PIPELINE_DETACHED_WAIT_ENVIRONMENT_IDS": "ha", "PIPELINE_SWEEP_INTERVAL_S": "1",
           "PIPELINE_RESUME_RESEND_AFTER_S": "2", "FLAGS_CACHE_TTL_S": "0", "LOG_LEVEL": "WARNING",
           "FOREST_VAR_DIR": str(tmp_path), "DATABASE_POOL_MAX_SIZE": "3", "DATABASE_POOL_ASYNC_SIZE": "2"}
    broker = redis.Redis.from_url(django_settings.CELERY_BROKER_URL)
    result = ha.run(jobs=12, groves=2, env=env, log_dir=tmp_path, faults=True, tag="test", timeout_s=180,
                    flush=lambda: broker.delete(celery_queue), say=lambda *a, **k: None)
    logs = "\n".join(p.read_text(errors="replace")[-1500:] for p in tmp_path.glob("*.log"))
    assert [what for _, what, _ in result["events"]] == ["kill web", "kill worker", "flush broker"], logs
    assert result["lost"] == 0, (result, logs)
    assert result["doubled"] == 0, result
    assert result["revived"] == 0, result
    assert result["cancelled"] >= 1
