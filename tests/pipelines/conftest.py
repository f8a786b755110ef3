"""Fixtures for pipeline tests: Groves of both substrates, flag switches, a driver that plays the runner,
a Grove that claims and reports over the real wire API, and a real Celery worker subprocess."""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis
from django.conf import settings as django_settings

from apps.flags import services as flag_services
from apps.pipelines import services
from apps.pipelines.models import PipelineNode
from tests.console import console_script

ROOT = Path(__file__).resolve().parents[2]
V1 = "/api/forest/v1"


@pytest.fixture
def k8s_grove(fresh_grove):
    return fresh_grove(name="kube", substrate="kubernetes", roles=("compute", "build"))


@pytest.fixture
def native_grove(fresh_grove):
    return fresh_grove(name="mac", substrate="native", roles=("compute",), platforms=("darwin/arm64",))


@pytest.fixture
def flag_on():
    def _on(name: str, **scope):
        flag_services.flag_override_set(name=name, enabled=True, reason="test", **scope)

    return _on


@pytest.fixture
def detached(flag_on, settings):
    """Detached waiting on, and environment ``prod`` listed."""
    flag_on("host.pipeline_detached_wait")
    settings.PIPELINE_DETACHED_WAIT_ENVIRONMENT_IDS = ["prod"]


def execute_queued(run) -> list[str]:
    """Play the runner: dispatch every queued node of a run (what the node_execute task does)."""
    modes = []
    for node in PipelineNode.objects.filter(run=run, status="queued").order_by("position"):
        modes.append(services.pipeline_node_execute(node_id=node.pk))
    return modes


class WireGrove:
    """A Grove talking to Host over the real wire endpoints with its own credential."""

    def __init__(self, client, grove):
        self.client, self.grove = client, grove

    def url(self, tail: str) -> str:
        return f"{V1}/groves/{self.grove.id}/{tail}"

    def claim(self, job_id):
        return self.client.post(self.url(f"jobs/{job_id}/claim"), {}, format="json")

    def report(self, job_id, **body):
        return self.client.post(self.url(f"jobs/{job_id}/report"), body, format="json")

    def run_job(self, job_id, *, state="succeeded", exit_code=0, outputs=None):
        assert self.claim(job_id).status_code == 200
        assert self.report(job_id, state="running", log_tail=["started"]).status_code == 200
        response = self.report(job_id, state=state, exit_code=exit_code, outputs=outputs or {})
        assert response.status_code == 200, response.json()
        return response.json()


@pytest.fixture
def wire(grove_client):
    def _wire(grove_and_credential) -> WireGrove:
        grove, credential = grove_and_credential
        return WireGrove(grove_client(credential), grove)

    return _wire


# --- a real Celery worker ------------------------------------------------------------------------

def _test_database_url() -> str:
    db = django_settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def _die_with_parent() -> None:
    """Linux: SIGKILL the worker if the test process dies without its teardown (e.g. killed by a timeout)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def kill_leftovers(group: int) -> None:
    """Processes a stopped child left in its process group (prefork pool children) go with it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)


class Worker:
    """What ``make run`` runs, on queues of this test's own (so parallel test processes never steal each
    other's tasks), pointed at this test's database: ``celery -A forest_host worker`` (dispatch and resume)
    and ``manage.py pipeline_runner`` (the runner pool for in-place waits, ``runner_slots`` of them).
    Each starts in its own session so its whole process group can be killed, with SIGKILL when a test
    needs a hard crash."""

    def __init__(self, queue: str, log_path: Path, *, concurrency: int = 2, runner_slots: int = 2):
        self.queue, self.log_path, self.procs = queue, log_path, []
        self.concurrency, self.runner_slots = concurrency, runner_slots

    def start(self) -> Worker:
        env = {**os.environ, "DATABASE_URL": _test_database_url(),
               "DJANGO_SETTINGS_MODULE": "tests.pipelines.worker_settings", "FOREST_TEST_QUEUE": self.queue,
               "PIPELINE_DETACHED_WAIT_ENVIRONMENT_IDS": "prod", "FLAGS_CACHE_TTL_S": "0", "LOG_LEVEL": "WARNING",
               "PIPELINE_RUNNER_SLOTS": str(self.runner_slots)}
        self.log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        commands = [
            [console_script("celery"), "-A", "forest_host", "worker", "-Q", self.queue, "-c",
             str(self.concurrency), "--without-heartbeat", "--without-gossip", "--without-mingle",
             "-n", f"{self.queue}@%h"],
            [sys.executable, "manage.py", "pipeline_runner", "--loglevel", "WARNING",
             "--hostname", f"{self.queue}.runner@%h"],
        ]
        self.procs = [subprocess.Popen(command, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                       start_new_session=True, preexec_fn=_die_with_parent)
                      for command in commands]
        return self

    def kill(self, sig=signal.SIGKILL) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=20)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            kill_leftovers(proc.pid)
        if getattr(self, "log", None):
            self.log.close()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


@pytest.fixture
def celery_queue(settings):
    """Route this test's tasks to a queue of its own; the queue is dropped afterwards."""
    from forest_host.celery import app

    queue = f"forest-test-{uuid.uuid4().hex[:10]}"
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    settings.PIPELINE_RUNNER_QUEUE = f"{queue}.runner"
    yield queue
    app.conf.task_default_queue = previous
    redis.Redis.from_url(django_settings.CELERY_BROKER_URL).delete(queue, f"{queue}.runner")


@pytest.fixture
def worker(celery_queue, tmp_path):
    """Start a worker with ``worker()``; every started worker is killed at teardown."""
    started: list[Worker] = []

    def _start(**sizes) -> Worker:
        w = Worker(celery_queue, tmp_path / f"worker-{len(started)}.log", **sizes).start()
        started.append(w)
        return w

    yield _start
    for w in started:
        w.stop()


# A bound on a hang, not a speed: a wait returns the moment its condition holds, so the bound only decides how
# long a broken test takes to fail. On a busy 2-core CI box a worker's start-up alone has taken over 30 s.
HANG_S = 120.0


def wait_for(predicate, *, timeout: float = HANG_S, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")



@pytest.fixture
def celery_tail(settings):
    """Every tail through the pipeline.node_resume task and its outbox row (the path the inline tail
    falls back to: busy locks, big runs, PIPELINE_INLINE_TAIL=0), for the tests that exercise that path."""
    settings.PIPELINE_INLINE_TAIL = False
