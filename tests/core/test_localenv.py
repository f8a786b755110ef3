"""`make run`'s local settings file and database check (apps/core/localenv.py), against real subprocesses and
the real PostgreSQL: a new shell with nothing exported runs manage.py and the CLI from the file; a missing
database is created; one that cannot be created gets the exact command to run."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

from apps.core import localenv

ROOT = Path(__file__).resolve().parents[2]


def _clean_env(**extra) -> dict:
    """A new shell: none of the settings exported (only what finds Python and this checkout)."""
    keep = {key: os.environ[key] for key in ("PATH", "HOME", "PYTHONPATH") if key in os.environ}
    return {**keep, **extra}


def test_write_keeps_a_secret_once_and_remembers_an_exported_database(tmp_path):
    target = tmp_path / "forest.env"
    first = localenv.write(target, environ={})
    assert first["DEBUG"] == "1" and first["DATABASE_URL"].startswith("sqlite:") and len(first["SECRET_KEY"]) > 40
    assert target.stat().st_mode & 0o077 == 0
    again = localenv.write(target, environ={"DATABASE_URL": "postgres://u@127.0.0.1:5432/x"})
    assert again["SECRET_KEY"] == first["SECRET_KEY"] and again["DATABASE_URL"] == "postgres://u@127.0.0.1:5432/x"
    assert localenv.write(target, environ={})["DATABASE_URL"] == "postgres://u@127.0.0.1:5432/x"


def test_manage_py_and_the_cli_read_the_file_in_a_new_shell(tmp_path):
    target = tmp_path / "forest.env"
    localenv.write(target, environ={"DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3",
                                    "CELERY_BROKER_URL": "filesystem://"})
    env = _clean_env(FOREST_ENV_FILE=str(target), FOREST_VAR_DIR=str(tmp_path / "var"))
    # Without the file, DEBUG off and no SECRET_KEY: settings refuse to load (the README's old traceback).
    refused = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True,
                             env={**env, "FOREST_ENV_FILE": ""}, timeout=120)
    assert refused.returncode != 0 and "SECRET_KEY must be set" in refused.stderr
    ran = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True, env=env,
                         timeout=120)
    assert ran.returncode == 0, ran.stderr
    probe = "from forest_cli import main; import os; print(os.environ['FOREST_HOST'])"
    shown = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, env=env,
                           timeout=60)
    assert shown.stdout.strip() == "http://127.0.0.1:8000", shown.stderr


def _server_url(name: str) -> str:
    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{name}"


def test_a_missing_postgresql_database_is_created():
    name = f"forest_localenv_{uuid.uuid4().hex[:8]}"
    url = _server_url(name)
    try:
        ready, message = localenv.database_ready(url)
        assert ready and f"Created PostgreSQL database {name}" in message
        again = localenv.database_ready(url)
        assert again[0] and "is there" in again[1]
    finally:
        with psycopg.connect(_server_url("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


def test_a_database_that_cannot_be_created_gets_the_command_to_run():
    def no_create(url, **kwargs):
        if url.endswith("/postgres"):
            raise psycopg.OperationalError("permission denied to create database")
        raise psycopg.OperationalError('connection failed: FATAL:  database "shop" does not exist')

    ready, message = localenv.database_ready("postgres://app@db.internal:6543/shop", connect=no_create)
    assert not ready and "createdb -h db.internal -p 6543 -U app shop" in message


def test_the_local_agent_keeps_one_identity_per_database():
    assert localenv.database_key("sqlite:///var/forest.sqlite3") != localenv.database_key(
        "postgres://postgres@127.0.0.1:5432/forest")
    assert localenv.database_key("x") == localenv.database_key("x")
    script = (ROOT / "scripts/local-agent.sh").read_text()
    assert "database_key" in script


@pytest.mark.django_db
def test_users_and_teams_commands_create_what_roles_and_teams_name(capsys):
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from apps.accounts.models import AuditEvent, Team

    call_command("roles", "sync")
    call_command("teams", "create", "ml", "--name", "Machine learning")
    call_command("users", "create", "ana", "--email", "ana@example.com", "--role", "submitter", "--team", "ml")
    user = get_user_model().objects.get(username="ana")
    assert {g.name for g in user.groups.all()} == {"submitter"}
    assert Team.objects.get(slug="ml").members.filter(pk=user.pk).exists()
    assert {"user.create", "team.create", "role.grant", "team.member_add"} <= set(
        AuditEvent.objects.values_list("action", flat=True))
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="user_exists"):
        call_command("users", "create", "ana")
    call_command("users", "list")
    assert "ana: roles submitter; teams ml" in capsys.readouterr().out


def test_the_ports_are_kept_and_what_follows_them_never_goes_stale(tmp_path):
    target = tmp_path / "forest.env"
    first = localenv.write(target, environ={})
    assert (first["PORT"], first["FOREST_HOST"], first["FOREST_PUBLIC_URL"]) == (
        "8000", "http://127.0.0.1:8000", "http://127.0.0.1:8000")
    assert (first["FOREST_EDGE_HTTP_LISTEN"], first["FOREST_EDGE_HTTPS_LISTEN"]) == ("127.0.0.1:8081",
                                                                                     "127.0.0.1:8443")
    moved = localenv.write(target, environ={"PORT": "9000", "FOREST_EDGE_HTTPS_PORT": "9443"})
    assert moved["FOREST_HOST"] == moved["FOREST_PUBLIC_URL"] == "http://127.0.0.1:9000"
    assert moved["FOREST_EDGE_HTTPS_LISTEN"] == "127.0.0.1:9443"
    # Remembered: the next run with nothing exported keeps 9000, and the URLs with it.
    again = localenv.write(target, environ={})
    assert (again["PORT"], again["FOREST_HOST"], again["FOREST_EDGE_HTTPS_PORT"]) == (
        "9000", "http://127.0.0.1:9000", "9443")
    # An exported URL still wins over the one the port implies.
    assert localenv.write(target, environ={"FOREST_HOST": "https://forest.example"})["FOREST_HOST"] == \
        "https://forest.example"


@pytest.mark.parametrize(("ports", "says"), [
    ({"PORT": "http"}, "PORT='http' is not a port"),
    ({"PORT": "70000"}, "is not a port"),
    ({"PORT": "8443"}, "FOREST_EDGE_HTTPS_PORT and PORT are both 8443"),
])
def test_a_port_make_run_cannot_use_stops_it_before_anything_starts(tmp_path, ports, says):
    with pytest.raises(localenv.PortError, match=says):
        localenv.write(tmp_path / "forest.env", environ=ports)
    assert not (tmp_path / "forest.env").exists()
    env = _clean_env(FOREST_ENV_FILE=str(tmp_path / "forest.env"), **ports)
    ran = subprocess.run([sys.executable, "-m", "apps.core.localenv"], cwd=ROOT, capture_output=True, text=True,
                         env=env, timeout=60)
    assert ran.returncode == 1 and says.split("=")[0] in ran.stderr, ran.stderr


def test_get_prints_what_make_run_and_the_local_agent_use(tmp_path):
    target = tmp_path / "forest.env"
    localenv.write(target, environ={"PORT": "9100", "FOREST_LOCAL_PROXY_PORT": "9480"})
    argv = [sys.executable, "-m", "apps.core.localenv", "--get", "PORT", "FOREST_HOST", "FOREST_LOCAL_PROXY_PORT"]
    from_file = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60,
                               env=_clean_env(FOREST_ENV_FILE=str(target)))
    assert from_file.stdout.split() == ["9100", "http://127.0.0.1:9100", "9480"], from_file.stderr
    exported = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60,
                              env=_clean_env(FOREST_ENV_FILE=str(target), PORT="9200"))
    assert exported.stdout.split()[:2] == ["9200", "http://127.0.0.1:9200"]
    defaults = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60,
                              env=_clean_env(FOREST_ENV_FILE=""))
    assert defaults.stdout.split() == ["8000", "http://127.0.0.1:8000", "8480"]


def test_the_local_grove_name_is_already_a_slug():
    assert localenv.local_grove_name("Box_1.example.com") == "local-box-1"
    assert localenv.local_grove_name("mac-mini") == "local-mac-mini"
    assert localenv.local_grove_name("...") == "local-machine"
