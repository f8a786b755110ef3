"""The local settings file ``make run`` writes (``var/forest.env``: secret, debug, database and broker URLs,
the CLI's Host URL), read by every process started from this checkout — ``manage.py``, Celery, uvicorn and the
``forest`` CLI — so each README command works in a new shell with nothing exported. The environment wins over
the file (``python-dotenv`` with ``override=False``); ``FOREST_ENV_FILE`` names another file, or none when
empty (the test settings do that).

``python -m apps.core.localenv`` writes (or updates) the file, then makes sure a PostgreSQL database named
by ``DATABASE_URL`` exists: it creates a missing one, or says exactly what to run. Django-free, so it runs
before any settings exist.
"""
from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

from dotenv import dotenv_values, load_dotenv

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "var" / "forest.env"
# What `make run` keeps; anything else in the file is left as the person wrote it.
DEFAULTS = {"DEBUG": "1", "DATABASE_URL": "sqlite:///var/forest.sqlite3", "CELERY_BROKER_URL": "filesystem://",
            "FOREST_HOST": "http://127.0.0.1:8000"}


def path() -> Path | None:
    named = os.environ.get("FOREST_ENV_FILE")
    if named is not None:
        return Path(named) if named else None
    return DEFAULT


def load() -> None:
    """Fill the environment from the local settings file, never overriding what is already set."""
    found = path()
    if found is not None and found.is_file():
        load_dotenv(found, override=False)


def write(target: Path = DEFAULT, *, environ: dict | None = None) -> dict:
    """Write ``target``: the values already there, the caller's exported ``DATABASE_URL`` /
    ``CELERY_BROKER_URL`` / ``DEBUG`` over them (so `DATABASE_URL=... make run` is remembered), defaults for
    the rest, and a random ``SECRET_KEY`` made once. Returns what it wrote."""
    environ = os.environ if environ is None else environ
    values = {key: value for key, value in (dotenv_values(target) if target.is_file() else {}).items()
              if value is not None}
    for key, default in DEFAULTS.items():
        values[key] = environ.get(key) or values.get(key) or default
    values.setdefault("SECRET_KEY", secrets.token_urlsafe(48))
    target.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# Written by `make run` (apps/core/localenv.py); read by manage.py, the workers and the forest CLI.",
             "# The environment wins over this file; edit it or export a value to change one."]
    lines += [f"{key}={_quote(value)}" for key, value in sorted(values.items())]
    target.write_text("\n".join(lines) + "\n")
    target.chmod(0o600)  # it holds the secret key
    return values


def _quote(value: str) -> str:
    return f'"{value}"' if any(ch in value for ch in " #'\"$") else value


def database_ready(url: str, *, connect=None) -> tuple[bool, str]:
    """(ready, message) for a PostgreSQL ``url``: connects; a missing database is created (through the
    ``postgres`` maintenance database, as the same user); when that is not possible the message says exactly
    what to run. Any other URL is ready as it is (SQLite makes its own file)."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql", "pgsql"):
        return True, ""
    import psycopg

    connect = connect or psycopg.connect
    name = unquote(parts.path.lstrip("/")) or "postgres"
    host, port, user = parts.hostname or "127.0.0.1", parts.port or 5432, unquote(parts.username or "postgres")
    createdb = f"createdb -h {host} -p {port} -U {user} {name}"
    try:
        connect(url, connect_timeout=5).close()
        return True, f"PostgreSQL database {name} on {host}:{port} is there."
    except psycopg.OperationalError as exc:
        if f'database "{name}" does not exist' not in str(exc):
            return False, (f"Cannot reach PostgreSQL at {host}:{port} as {user}: {str(exc).strip()}\n"
                           f"Start it (or fix DATABASE_URL), then run `make run` again; the database itself is "
                           f"created for you (or run: {createdb}).")
    maintenance = parts._replace(path="/postgres").geturl()
    try:
        with connect(maintenance, connect_timeout=5, autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    except psycopg.Error as exc:
        return False, (f"PostgreSQL database {name} does not exist and could not be created "
                       f"({str(exc).strip()}). Run:\n    {createdb}\nthen `make run` again.")
    return True, f"Created PostgreSQL database {name} on {host}:{port}."


def main() -> int:
    values = write(path() or DEFAULT)
    print(f"Local settings: {path() or DEFAULT} (database {values['DATABASE_URL'].split('@')[-1]}, "
          f"broker {values['CELERY_BROKER_URL'].split('@')[-1]})")
    ready, message = database_ready(values["DATABASE_URL"])
    if message:
        print(message, file=sys.stdout if ready else sys.stderr)
    return 0 if ready else 1



def database_key(url: str | None = None) -> str:
    """A short stable name for a database URL: the local agent keeps one identity per database
    (``var/agent/<key>``), so a Grove enrolled against SQLite is never presented to PostgreSQL (where it is
    unknown) and the other way round."""
    import hashlib

    if url is None:
        load()
        url = os.environ.get("DATABASE_URL") or DEFAULTS["DATABASE_URL"]
    return hashlib.sha256(url.encode()).hexdigest()[:12]


if __name__ == "__main__":
    sys.exit(main())
