"""A PostgreSQL cluster and a Redis server of a test's or bench run's own, on free loopback ports, to stop,
kill and restart without touching the shared servers on 5432 / 6379 that everyone else uses.

PostgreSQL: ``initdb`` into a temporary folder (outside pytest's tmp_path, which is private to root while the
server runs as ``postgres``), ``pg_ctl`` start / stop / restart. Redis: ``redis-server`` with no persistence,
so a restart comes back empty, as a lost broker does.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from bench.ha import free_port

PG_BIN = next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin"))), None) if Path("/usr/lib/postgresql").exists() \
    else None
REDIS = shutil.which("redis-server")


def as_postgres(args: list[str]) -> list[str]:
    # initdb and the server refuse to run as root; CI runs the suite as root.
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


class OwnPostgres:
    def __init__(self) -> None:
        if PG_BIN is None:
            raise RuntimeError("PostgreSQL server binaries are required (scripts/services-up.sh)")
        self.data, self.port = Path(tempfile.mkdtemp(prefix="forest-own-pg-")), free_port()
        if os.geteuid() == 0:
            shutil.chown(self.data, "postgres")
        subprocess.run(as_postgres([str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                                    "--no-sync"]), check=True, capture_output=True)
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/forest"

    def _options(self) -> str:
        return f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"

    def start(self) -> None:
        subprocess.run(as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", self._options(), "-w", "-l",
                                    str(self.data / "server.log"), "start"]), check=True, capture_output=True)

    def createdb(self, name: str = "forest") -> None:
        subprocess.run(as_postgres([str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U",
                                    "postgres", name]), check=True, capture_output=True)

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every connection is closed, the server is back when this returns."""
        subprocess.run(as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", self._options(), "-m",
                                    "fast", "-w", "-l", str(self.data / "server.log"), "restart"]), check=True,
                       capture_output=True)

    def stop(self) -> None:
        # immediate: connections are cut as in a crash, not drained
        subprocess.run(as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"]),
                       check=False, capture_output=True)

    def accepting(self) -> bool:
        return subprocess.run([str(PG_BIN / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"],
                              check=False).returncode == 0

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.data, ignore_errors=True)


class OwnRedis:
    def __init__(self) -> None:
        if REDIS is None:
            raise RuntimeError("redis-server is required (scripts/services-up.sh)")
        self.port, self.proc = free_port(), None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen([REDIS, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                                      "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        client = redis.Redis.from_url(self.url)
        for _ in range(200):
            try:
                client.ping()
                return
            except redis.ConnectionError:
                threading.Event().wait(0.05)
        raise RuntimeError("own redis did not start")

    def stop(self) -> None:
        """SIGKILL: the broker is lost, not shut down, and comes back empty on the next start."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None
