"""What every bench shares: where its PostgreSQL and Redis are, and a database and broker keys of its own.

``--database-url`` names a PostgreSQL server (default ``$DATABASE_URL``); the bench creates a scratch
database there, named after the URL's database plus the bench and a random suffix (``forest`` ->
``forest_heartbeat_3fa2c1``), and drops it when it ends, so two runs never share or clobber one.
``--broker-url`` names a Redis (default ``$CELERY_BROKER_URL``); everything the bench and its Host
processes put there is under a key prefix of the run's own (Celery's ``global_keyprefix``, from
``CELERY_BROKER_KEY_PREFIX``), and only those keys are deleted at the end: no bench flushes a database.
"""
from __future__ import annotations

import argparse
import atexit
import os
import re
import secrets
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/forest"
DEFAULT_BROKER_URL = "redis://127.0.0.1:6379/0"


def add_options(parser: argparse.ArgumentParser) -> None:
    """``--database-url``, ``--broker-url`` and ``--keep-database``, defaulting to the environment."""
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL,
                        help="PostgreSQL server; the bench creates (and drops) a scratch database named after this "
                             "URL's database (default: $DATABASE_URL)")
    parser.add_argument("--broker-url", default=os.environ.get("CELERY_BROKER_URL") or DEFAULT_BROKER_URL,
                        help="Redis for the broker; only keys under the run's own prefix are written and deleted, "
                             "nothing is flushed (default: $CELERY_BROKER_URL)")
    parser.add_argument("--keep-database", action="store_true", help="leave the scratch database behind")
    parser.add_argument("--template-database", default="",
                        help="copy this migrated database instead of migrating afresh (the smoke test's)")


@dataclass
class Target:
    """The run's scratch database and broker prefix, and the environment Host processes run with."""

    database_url: str
    admin_url: str
    database: str
    broker_url: str
    key_prefix: str
    template: str = ""
    env: dict[str, str] = field(default_factory=dict)

    def create_database(self) -> None:
        """The scratch database, empty or as a copy of the template (then already migrated)."""
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            template = f' TEMPLATE "{self.template}"' if self.template else ""
            conn.execute(f'CREATE DATABASE "{self.database}"{template}')

    def migrate(self) -> None:
        if self.template:
            return
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, check=True,
                       env={**os.environ, **self.env, "PYTHONPATH": os.pathsep.join(filter(None, [
                           str(ROOT), str(ROOT / "agent" / "src"), os.environ.get("PYTHONPATH", "")]))})

    def recreate(self) -> None:
        """A fresh, migrated scratch database under the same name (close Django's connection first)."""
        self.drop_database()
        self.create_database()
        self.migrate()

    def drop_database(self) -> None:
        import psycopg

        close_django_connections()  # else the drop ends the pool's connections under it
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')

    def delete_keys(self) -> None:
        """Delete the run's own broker keys (its prefix), nothing else."""
        import redis

        client = redis.Redis.from_url(self.broker_url)
        try:
            batch = []
            for key in client.scan_iter(match=f"{self.key_prefix}*", count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    client.delete(*batch)
                    batch = []
            if batch:
                client.delete(*batch)
        finally:
            client.close()


def close_django_connections() -> None:
    """This process's Django connections and their pools closed, when Django is set up at all."""
    if "django.apps" not in sys.modules:
        return
    from django.apps import apps

    if not apps.ready:
        return
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        conn.close()
        if getattr(conn, "pool", None) is not None:
            conn.close_pool()


def scratch_name(base: str, bench: str) -> str:
    """``<base>_<bench>_<6 hex>``, a legal PostgreSQL name within its 63 bytes."""
    suffix = f"_{bench}_{secrets.token_hex(3)}"
    base = re.sub(r"[^a-z0-9_]", "_", (base or "forest").lower())
    return base[: 63 - len(suffix)] + suffix


def prepare(args: argparse.Namespace, bench: str, *, env: dict[str, str] | None = None,
            migrate: bool = True) -> Target:
    """Create the scratch database (migrated unless ``migrate`` is false; a copy of ``--template-database``
    when one is named), put the run's environment into
    ``os.environ`` (for this process, Django and any Host process it starts), and arrange for the database
    and the run's broker keys to go when the process ends (normally, by an exception or by SIGTERM)."""
    parts = urlsplit(args.database_url)
    # ``reuse``: a database an earlier run kept (--keep-database), measured again as it is, never dropped.
    reuse = getattr(args, "reuse", "")
    name = reuse or scratch_name(parts.path.lstrip("/"), bench)
    target = Target(database_url=urlunsplit(parts._replace(path=f"/{name}")),
                    admin_url=urlunsplit(parts._replace(path="/postgres")), database=name,
                    broker_url=args.broker_url, key_prefix=f"{name}:", template=args.template_database)
    if not reuse:
        target.create_database()
        if not args.keep_database:
            atexit.register(target.drop_database)
    atexit.register(target.delete_keys)
    # SIGTERM (a test's timeout, a killed run) ends through the atexit handlers too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    target.env = {
        "DATABASE_URL": target.database_url, "CELERY_BROKER_URL": target.broker_url,
        "CELERY_BROKER_KEY_PREFIX": target.key_prefix, "REDIS_URL": target.broker_url,
        "SECRET_KEY": "bench-secret-key", "DEBUG": "0", "SECURE_SSL_REDIRECT": "0",
        "ALLOWED_HOSTS": "127.0.0.1,localhost", "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "forest_host.settings",
        **(env or {}),
    }
    os.environ.update(target.env)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    if migrate or reuse:
        target.migrate()
    print(f"scratch database {name} on {parts.hostname}:{parts.port or 5432}; broker keys {target.key_prefix}*",
          flush=True)
    return target


def uptime() -> str:
    """The load average line, printed with every figure: on a shared box only same-run ratios compare."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def hash_floor_argv(path: Path | None = None) -> list[str]:
    """The floor's hash of ``path`` (standard input when None) with the implementation Forest hashes with:
    OpenSSL's SHA-256, through ``openssl dgst`` when the tool is there, else through ``hashlib`` (OpenSSL's
    too). Coreutils' ``sha256sum`` is several times slower than OpenSSL and flattered every ratio against it."""
    import shutil

    if shutil.which("openssl"):
        return ["openssl", "dgst", "-sha256", "-r", *([str(path)] if path is not None else [])]
    script = ("import hashlib,sys\nh=hashlib.sha256()\n"
              "f=open(sys.argv[1],'rb') if len(sys.argv)>1 else sys.stdin.buffer\n"
              "for b in iter(lambda: f.read(1<<20), b''): h.update(b)\nprint(h.hexdigest())")
    return [sys.executable, "-c", script, *([str(path)] if path is not None else [])]


def hash_floor_name() -> str:
    """How the floor hashes, for the figures' label."""
    import shutil

    return "openssl dgst -sha256" if shutil.which("openssl") else "hashlib (OpenSSL) sha256"


def hash_and_copy_floor(src: Path, dest: Path) -> float:
    """Seconds to hash ``src`` as Forest does (OpenSSL) and copy it with ``cp``: the floor of every path that
    verifies and stores the same bytes. ``dest`` is removed afterwards."""
    import time

    started = time.perf_counter()
    subprocess.run(hash_floor_argv(src), check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cp", str(src), str(dest)], check=True)
    elapsed = time.perf_counter() - started
    dest.unlink()
    return elapsed


def stop_group(proc: subprocess.Popen) -> None:
    """Stop a server a bench started in a session of its own (``start_new_session``): its whole process group,
    SIGTERM, then SIGKILL after 15 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
