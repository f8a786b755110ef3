"""Two `make run` stacks on one machine: each with its own settings file (its own var/), database and ports,
started the way the Makefile starts them — honcho with the real Procfile, its base port read from the
settings through ``python -m apps.core.localenv --get PORT`` — and both answer at once.

Kept cheap: only the Procfile's ``web`` line runs (one uvicorn worker each); the two databases are copies
of the already-migrated test database (pg_dump piped into psql), dropped afterwards.
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest
from django.conf import settings

from apps.core import localenv
from tests.console import console_script
from tests.e2e.test_native_workload import free_port
from tests.pipelines.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = str(Path(console_script("honcho")).parent) + "/"


def _server_url(name: str) -> str:
    db = settings.DATABASES["default"]
    return f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{name}"


@pytest.fixture
def databases():
    """Two databases, each a copy of the migrated test database (pg_dump | psql; a TEMPLATE copy would need
    this process's pooled connections to it closed)."""
    source = settings.DATABASES["default"]["NAME"]  # the test database here, migrated
    names = [f"forest_two_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    with psycopg.connect(_server_url("postgres"), autocommit=True) as conn:
        for name in names:
            conn.execute(f'CREATE DATABASE "{name}"')
    try:
        for name in names:
            subprocess.run(f"pg_dump --no-owner --dbname {shlex.quote(_server_url(source))} | "
                           f"psql --quiet -v ON_ERROR_STOP=1 --dbname {shlex.quote(_server_url(name))} >/dev/null",
                           shell=True, check=True, timeout=120)
        yield [_server_url(name) for name in names]
    finally:
        with psycopg.connect(_server_url("postgres"), autocommit=True) as conn:
            for name in names:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Stack:
    """``honcho start -f Procfile --port "$(localenv --get PORT)" web`` as the Makefile runs it."""

    def __init__(self, env_file: Path, procfile: Path, log: Path, environ: dict[str, str]) -> None:
        self.env = {"PATH": f"{SCRIPTS}:/usr/bin:/bin", "HOME": str(env_file.parent),
                    "FOREST_ENV_FILE": str(env_file), "FOREST_VAR_DIR": str(env_file.parent), "WEB_CONCURRENCY": "1",
                    **environ}
        self.procfile, self.log_path = procfile, log

    def start(self) -> Stack:
        port = subprocess.run([f"{SCRIPTS}python", "-m", "apps.core.localenv", "--get", "PORT"], cwd=ROOT,
                              env=self.env, capture_output=True, text=True, check=True).stdout.strip()
        self.port = int(port)
        self.log = self.log_path.open("wb")
        self.proc = subprocess.Popen([f"{SCRIPTS}honcho", "start", "-f", str(self.procfile), "-d", str(ROOT),
                                      "--port", port, "web"], cwd=ROOT, env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def health(self) -> int | None:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=5).status_code
        except httpx.TransportError:
            return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:]


def test_two_stacks_with_their_own_settings_and_ports_answer_side_by_side(tmp_path, databases):
    procfile = tmp_path / "Procfile"
    procfile.write_text((ROOT / "Procfile").read_text().replace(".venv/bin/", SCRIPTS))
    first_port, second_port = free_port(), free_port()
    # Stack one keeps its port in its var/forest.env; stack two exports PORT (the environment wins).
    first_env, second_env = tmp_path / "one" / "var" / "forest.env", tmp_path / "two" / "var" / "forest.env"
    written = localenv.write(first_env, environ={"DATABASE_URL": databases[0], "PORT": str(first_port),
                                                 "FOREST_EDGE_HTTP_PORT": str(free_port()),
                                                 "FOREST_EDGE_HTTPS_PORT": str(free_port()),
                                                 "FOREST_LOCAL_PROXY_PORT": str(free_port())})
    assert written["FOREST_HOST"] == f"http://127.0.0.1:{first_port}"
    localenv.write(second_env, environ={"DATABASE_URL": databases[1]})
    stacks = [Stack(first_env, procfile, tmp_path / "one.log", {}),
              Stack(second_env, procfile, tmp_path / "two.log", {"PORT": str(second_port)})]
    try:
        for stack in stacks:
            stack.start()
        assert [stack.port for stack in stacks] == [first_port, second_port]
        for stack in stacks:
            wait_for(lambda s=stack: s.health() == 200, what=f"the web on {stack.port}: {stack.output()}")
        assert all(stack.proc.poll() is None for stack in stacks), [stack.output() for stack in stacks]
        assert [stack.health() for stack in stacks] == [200, 200]  # both still up together
    finally:
        for stack in stacks:
            if hasattr(stack, "proc"):
                stack.stop()
