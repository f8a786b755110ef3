"""The embedded default (``make run`` with no DATABASE_URL / CELERY_BROKER_URL) holds under concurrent work.

Everything is real and nothing is shared with the rest of the suite: a fresh ``var/`` folder with its own
SQLite file and filesystem broker, ``manage.py migrate``, the web process under uvicorn, the worker(s)
started with the Procfile's own command lines, and the real ``forest-agent`` running native jobs. Several
compute jobs are submitted at once over HTTP while the agent heartbeats, claims and reports; every job must
finish, with one Grove job per step, and no process may log ``database is locked``. Beat is not started, so
a lock error cannot hide behind the sweep's recovery.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.console import console_script
from tests.pipelines.conftest import kill_leftovers, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
AGENT = console_script("forest-agent")
JOBS, STEPS = 6, 2

SETUP = """
from django.contrib.auth import get_user_model
from apps.accounts.services import api_token_create, role_grant, team_member_set
from apps.flags.services import flag_override_set
user = get_user_model().objects.create_user("ci", password="not-used-by-token-auth")
role_grant(username="ci", role="submitter")
team_member_set(slug="ci", username="ci", member=True)
flag_override_set(name="host.deploy.forest_compute_jobs", enabled=True, reason="embedded test")
print(api_token_create(user=user, name="embedded test")[1])
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def procfile_commands() -> dict[str, str]:
    """``make run``'s process lines, so this test runs the workers exactly as ``make run`` does."""
    lines = (ROOT / "Procfile").read_text().splitlines()
    return dict(line.split(":", 1) for line in lines if line.strip() and not line.startswith("#"))


class Processes:
    def __init__(self, tmp: Path, env: dict):
        self.tmp, self.env, self.started = tmp, env, []

    def start(self, name: str, command: str | list[str]) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop_all()
        if isinstance(command, str):
            command = f"exec {command}"  # a Procfile line: the shell becomes the process we stop and reap
        proc = subprocess.Popen(command, shell=isinstance(command, str), cwd=ROOT, env=self.env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.started.append((name, proc, log))
        return proc

    def stop_all(self) -> None:
        for _, proc, _ in self.started:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for _, proc, log in self.started:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            kill_leftovers(proc.pid)
            log.close()

    def logs(self) -> dict[str, str]:
        return {name: (self.tmp / f"{name}.log").read_text(errors="replace") for name, _, _ in self.started}


@pytest.fixture
def embedded(tmp_path):
    var = tmp_path / "var"
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}}
    env.update(FOREST_VAR_DIR=str(var), DEBUG="1", LOG_LEVEL="INFO", PYTHONUNBUFFERED="1",
               FOREST_PUBLIC_URL="http://127.0.0.1")
    procs = Processes(tmp_path, env)
    yield procs, env, var
    procs.stop_all()


def _manage(env: dict, *args: str) -> str:
    result = subprocess.run([PYTHON, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_web_and_worker_on_sqlite_take_concurrent_submissions_without_database_is_locked(embedded, tmp_path):
    procs, env, var = embedded
    _manage(env, "migrate", "--noinput")
    api_token = _manage(env, "shell", "-c", SETUP).strip().splitlines()[-1]
    enrollment = _manage(env, "create_enrollment_token", "--roles", "compute", "--substrate", "native",
                         "--expires-in", "600").strip().splitlines()[-1]
    import sqlite3

    with sqlite3.connect(var / "forest.sqlite3") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert {p.name for p in (var / "broker").iterdir()} >= {"queue", "processed", "control"}

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    procs.start("web", [console_script("uvicorn"), "forest_host.asgi:application", "--host", "127.0.0.1",
                        "--port", str(port), "--log-level", "info"])
    workers = {name: line for name, line in procfile_commands().items() if name in {"worker", "runner"}}
    assert set(workers) == {"worker", "runner"}, "the Procfile starts no worker or no runner pool"
    for name, line in workers.items():
        procs.start(name, line)
    wait_for(lambda: _healthy(base), what="the web process")

    state = tmp_path / "agent-state"
    enroll = subprocess.run([AGENT, "enroll", "--host", base, "--token", enrollment, "--name", "embedded-box",
                             "--state-dir", str(state)], capture_output=True, text=True, timeout=60, env=env)
    assert enroll.returncode == 0, enroll.stdout + enroll.stderr
    procs.start("agent", [AGENT, "run", "--state-dir", str(state), "--enable-native-jobs", "--heartbeat-interval",
                          "1", "--poll-wait", "2", "--backoff-max", "2"])

    client = httpx.Client(base_url=f"{base}/api/forest/v1", headers={"Authorization": f"Token {api_token}"},
                          timeout=60)
    wait_for(lambda: _grove_ready(client), what="the agent's first heartbeat")

    body = {"name": "embedded", "grove": "embedded-box",
            "steps": [{"name": f"s{i}", "kind": "native", "timeout_s": 120,
                       "command": [sys.executable, "-c", f"print('step {i}')"]} for i in range(STEPS)]}
    barrier, answers = threading.Barrier(JOBS), []

    def submit():
        barrier.wait()
        answers.append(client.post("/compute/jobs", json=body))

    threads = [threading.Thread(target=submit) for _ in range(JOBS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [a.status_code for a in answers] == [201] * JOBS, [a.text for a in answers]
    ids = [a.json()["id"] for a in answers]

    def all_finished():
        views = [client.get(f"/compute/jobs/{job_id}").json() for job_id in ids]
        return views if all(v["status"] in {"succeeded", "failed", "cancelled"} for v in views) else None

    try:
        views = wait_for(all_finished, timeout=240, interval=0.5, what="every compute job to finish")
    finally:
        logs = procs.logs()
    locked = {name: text.count("database is locked") for name, text in logs.items()}
    assert not any(locked.values()), locked
    for view in views:
        assert view["status"] == "succeeded", view
        assert len({s["job_id"] for s in view["steps"]}) == STEPS
        assert all(s["status"] == "succeeded" and s["exit_code"] == 0 for s in view["steps"]), view
    assert not (ROOT / "control").exists()  # the filesystem broker's control folder stays under var/


def _healthy(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        time.sleep(0.2)
        return False


def _grove_ready(client: httpx.Client) -> bool:
    response = client.get("/groves", params={"search": "embedded-box"})
    if response.status_code != 200:
        return False
    rows = response.json()
    rows = rows.get("results", rows) if isinstance(rows, dict) else rows
    return any("native.job" in (row.get("change_kinds") or []) for row in rows)
