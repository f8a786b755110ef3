"""Every bench runs at a tiny size (the smallest that exercises its seed, its side and its floor) and prints
its ratio line: a broken seed, a renamed column or a floor that no longer runs fails here rather than
when someone next measures. No time is asserted: the figures at this size mean nothing.

Each bench makes (and drops) a scratch database named after this run's test database, copied from one
migrated template per test process, and keeps its broker keys under a prefix of its own on the test Redis
(bench/_common.py)."""
from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from django.conf import settings as django_settings

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow]

OPENSSL_FLOOR = r"floor  (openssl dgst -sha256|hashlib \(OpenSSL\) sha256) \+ cp:"
# bench: (arguments for the tiny run, tools it needs, the line that shows both sides ran and were compared); a
# name with a "-" is a second run of the bench before it, with other arguments.
BENCHES = {
    "bundle_install": (["--size-mb", "1", "--rounds", "1", "--idle-seconds", "1"], ["tar"],
                       r"median ratio \d+\.\d+"),
    # The COPY floor over as many connections as ours had busy server processes, and CPU per row for both.
    "c1m": (["--count", "60", "--groves", "20", "--batch", "30", "--gpu-every", "20", "--modes", "api"], [],
            r"over \d+ connection\(s\) at once.* ours / floor = \d+\.\d+(?s:.*)^CPU per row: ours [\d,]+ us .* "
            r"floor [\d,]+ us"),
    # Two single-worker servers, each sent batches over its own kept-alive connection (--balanced).
    "c1m-balanced": (["--count", "60", "--groves", "20", "--batch", "10", "--gpu-every", "20", "--modes", "api",
                      "--balanced"], [], r"ours / floor = \d+\.\d+(?s:.*)^server workers' CPU: \d+ s, \d+ s$"),
    # Floors that hash with OpenSSL, as Forest does (not coreutils sha256sum).
    "cas_upload": (["--size-mb", "1", "--rounds", "1"], ["curl"],
                   OPENSSL_FLOOR + r"(?s:.*)ratio Host/floor\s+:\s+\d+\.\d+"),
    "data_path": (["--size-mb", "1", "--rounds", "1"], ["curl"],
                  OPENSSL_FLOOR + r"(?s:.*)upload\): .* ratio\s+\d+\.\d+"),
    "ha": (["--jobs", "4", "--groves", "2", "--no-baseline", "--sweep-s", "1", "--resend-s", "2"], [],
           r"^faults\s+\d+\s+\d+\s+\d+"),
    "heartbeat": (["--groves", "8", "--seconds", "1", "--concurrency", "4", "--workloads", "steady",
                   "--longpoll", "2", "--longpoll-wait", "1"], ["pgbench"],
                  # ours' heartbeats per commit, then the floor batched by as many (B)
                  r"^\s+8 steady\s+\d+\s+\d+ \|.*\d+%\s+\d+\.\d \|\s+\d+\s+\d+\s+[\d.]+ \|.* \d+\.\d+x\s+\d+\.\d+x"),
    "ingress": (["--requests", "40", "--concurrency", "2"], ["nginx"], r"ratio\s+rps \d+\.\d+x"),
    # The in-process line, then the figure to read: single placements through the API against its floor.
    "placement": (["--groves", "10", "--decisions", "20", "--queued", "20", "--events", "3", "--http-concurrency",
                   "2"], [], r"^\s+10\s+persisted\s+\d+ .*\d+\.\d+(?s:.*)^\s+10 place cold\s+\d+ .* \d+\.\d+x$"),
    "render": (["--objects", "20", "--jobs", "5"], [], r"controller, end to end .* ratio \d+\.\d+"),
    "resume": (["--jobs", "4", "--steady-jobs", "2", "--concurrency", "2", "--rate", "50", "--history", "10,20"], [],
               r"^floor: same commit, burst(?s:.*)inline: report -> tail, burst .*\|\s+\d+\.\d+\s+\d+\.\d+\s+\d+\.\d+"),
    "spread": (["--jobs", "40", "--groves", "4", "--batch", "20"], [], r"largest \d+ = \d+\.\d+x the mean"),
    "staff_pages": (["--groves", "20", "--placements", "200", "--runs", "20", "--repeat", "1", "--no-budget"], [],
                    r"^placements\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+\d+x"),
}
NO_DATABASE = {"bundle_install", "ingress", "render"}  # agent-side benches: no Host, no database, no broker


def _script(bench: str) -> str:
    return bench.split("-", 1)[0]


def _server_url(name: str) -> str:
    db = django_settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{name}"


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "agent" / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}


@pytest.fixture(scope="session")
def bench_base() -> str:
    """The name every scratch database of this test process starts with (the test database's own)."""
    db = django_settings.DATABASES["default"]
    test_name = (db.get("TEST") or {}).get("NAME") or f"test_{db['NAME']}"
    return f"{test_name}_{os.environ.get('PYTEST_XDIST_WORKER', 'gw')}"


@pytest.fixture(scope="session")
def bench_template(bench_base):
    """One migrated database per test process that the benches copy (CREATE DATABASE ... TEMPLATE)."""
    name = f"{bench_base}_tmpl_{secrets.token_hex(3)}"
    admin = _server_url("postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, check=True,
                       env={**_env(), "DATABASE_URL": _server_url(name), "SECRET_KEY": "bench-secret-key",
                            "DJANGO_SETTINGS_MODULE": "forest_host.settings", "DEBUG": "0"}, timeout=300)
        yield name
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.parametrize("bench", sorted(BENCHES))
def test_bench_runs_at_a_tiny_size_and_prints_its_ratio(bench, bench_base, bench_template, tmp_path):
    args, tools, ratio_line = BENCHES[bench]
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"bench/{_script(bench)}.py needs {', '.join(missing)}")
    if bench not in NO_DATABASE:
        args = [*args, "--database-url", _server_url(bench_base), "--broker-url", django_settings.CELERY_BROKER_URL,
                "--template-database", bench_template]
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / f"{_script(bench)}.py"), *args],
        cwd=ROOT, env={**_env(), "BENCH_TMP": str(tmp_path), "BENCH_LOG_DIR": str(tmp_path)},
        capture_output=True, text=True, timeout=280)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert re.search(ratio_line, done.stdout, re.M), done.stdout[-4000:]
    with psycopg.connect(_server_url("postgres"), autocommit=True) as conn:  # it dropped its scratch database
        left = conn.execute("SELECT datname FROM pg_database WHERE starts_with(datname, %s) AND datname <> %s",
                            [f"{bench_base}_", bench_template]).fetchall()
    assert left == []


@pytest.mark.parametrize("bench", sorted(BENCHES))
def test_bench_help_names_its_database_and_size_options(bench):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / f"{_script(bench)}.py"), "--help"], cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert BENCHES[bench][0][0] in done.stdout  # its size option
    if bench not in NO_DATABASE:
        assert "--database-url" in done.stdout and "--broker-url" in done.stdout


def test_staff_pages_exits_non_zero_naming_the_page_over_its_budget(bench_base, bench_template, tmp_path):
    """A budget no page can meet (1 microsecond) must fail the run and name the page with its p95: the same
    code path a page over 150 ms at full size takes. One page at the tiny size, to stay cheap."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "staff_pages.py"), "--groves", "20", "--placements", "200", "--runs",
         "20", "--repeat", "1", "--only", "placements", "--budget-ms", "0.001",
         "--database-url", _server_url(bench_base), "--broker-url", django_settings.CELERY_BROKER_URL,
         "--template-database", bench_template],
        cwd=ROOT, env={**_env(), "BENCH_TMP": str(tmp_path)}, capture_output=True, text=True, timeout=280)
    assert done.returncode == 1, (done.stdout + done.stderr)[-4000:]
    assert re.search(r"^staff_pages: OVER BUDGET: placements p95 [\d.]+ ms > 0\.001 ms$", done.stderr, re.M), \
        done.stderr[-4000:]
