"""The local settings file ``make run`` writes (``var/forest.env``: secret, debug, database and broker URLs,
the CLI's Host URL), read by every process started from this checkout — ``manage.py``, Celery, uvicorn and the
``forest`` CLI — so each README command works in a new shell with nothing exported. The environment wins over
the file (``python-dotenv`` with ``override=False``); ``FOREST_ENV_FILE`` names another file, or none when
empty (the test settings do that).

``python -m apps.core.localenv`` writes (or updates) the file, then makes sure a PostgreSQL database named
by ``DATABASE_URL`` exists: it creates a missing one, or says exactly what to run; ``--get KEY...`` prints
what a process would see (the Makefile and scripts/local-agent.sh take their ports from it). Django-free, so
it runs before any settings exist.
"""
from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urlsplit

from dotenv import dotenv_values, load_dotenv

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "var" / "forest.env"
# What `make run` keeps; anything else in the file is left as the person wrote it.
DEFAULTS = {"DEBUG": "1", "DATABASE_URL": "sqlite:///var/forest.sqlite3", "CELERY_BROKER_URL": "filesystem://"}
# The ports `make run` listens on (all on 127.0.0.1): Host's web, the edge's HTTP and HTTPS, the local agent's
# mesh proxy. Kept like DEFAULTS, so two checkouts with different ports (and their own var/ and database)
# run side by side.
PORTS = {"PORT": "8000", "FOREST_EDGE_HTTP_PORT": "8081", "FOREST_EDGE_HTTPS_PORT": "8443",
         "FOREST_LOCAL_PROXY_PORT": "8480"}


def following_ports(ports: dict[str, str]) -> dict[str, str]:
    """What follows from the ports, rewritten on every `make run` (unless exported) so it never goes stale:
    the URL the CLI and the agent use, the one Host puts in bundle links, and the edge's listen addresses."""
    web = f"http://127.0.0.1:{ports['PORT']}"
    return {"FOREST_HOST": web, "FOREST_PUBLIC_URL": web,
            "FOREST_EDGE_HTTP_LISTEN": f"127.0.0.1:{ports['FOREST_EDGE_HTTP_PORT']}",
            "FOREST_EDGE_HTTPS_LISTEN": f"127.0.0.1:{ports['FOREST_EDGE_HTTPS_PORT']}"}


class PortError(ValueError):
    """A port setting `make run` cannot use; the message names the setting and what to change."""


def check_ports(ports: dict[str, str]) -> None:
    seen: dict[int, str] = {}
    for key, value in ports.items():
        if not value.isdigit() or not 1 <= int(value) <= 65535:
            raise PortError(f"{key}={value!r} is not a port (1-65535); export another or edit var/forest.env.")
        if int(value) in seen:
            raise PortError(f"{key} and {seen[int(value)]} are both {value}; each of "
                            f"{', '.join(PORTS)} needs its own port.")
        seen[int(value)] = key


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


def write(target: Path = DEFAULT, *, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Write ``target``: the values already there, the caller's exported ``DATABASE_URL`` /
    ``CELERY_BROKER_URL`` / ``DEBUG`` and ports over them (so `PORT=... make run` is remembered), defaults for
    the rest, what follows from the ports (``following_ports``), and a random ``SECRET_KEY`` made once.
    Raises ``PortError`` before writing anything when a port is unusable. Returns what it wrote."""
    environ = os.environ if environ is None else environ
    values = {key: value for key, value in (dotenv_values(target) if target.is_file() else {}).items()
              if value is not None}
    for key, default in {**DEFAULTS, **PORTS}.items():
        values[key] = environ.get(key) or values.get(key) or default
    check_ports({key: values[key] for key in PORTS})
    for key, value in following_ports(values).items():
        values[key] = environ.get(key) or value
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


def local_grove_name(hostname: str | None = None) -> str:
    """The name (already a valid slug, so also the slug) `make run`'s agent enrolls this machine as."""
    import re
    import socket

    short = (hostname or socket.gethostname()).split(".")[0].lower()
    return "local-" + (re.sub(r"[^a-z0-9-]+", "-", short).strip("-") or "machine")


def get(*keys: str) -> list[str]:
    """The values a process started by `make run` sees for ``keys`` (environment over the file, then the
    defaults): the Makefile and scripts/local-agent.sh read ports and URLs through this, never a literal."""
    exported = dict(os.environ)
    load()
    ports = {key: os.environ.get(key) or default for key, default in PORTS.items()}
    # What follows the ports is recomputed from them (the file's copy may predate an exported PORT); only a
    # value exported in the environment itself wins, as in write().
    following = {key: exported.get(key) or value for key, value in following_ports(ports).items()}
    known = {**DEFAULTS, **ports, **following, "FOREST_LOCAL_GROVE": local_grove_name()}
    return [following.get(key) or os.environ.get(key) or known.get(key, "") for key in keys]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--get"]:
        print(" ".join(get(*argv[1:])))
        return 0
    try:
        values = write(path() or DEFAULT)
    except PortError as exc:
        print(exc, file=sys.stderr)
        return 1
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
