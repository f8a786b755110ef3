"""Heartbeat throughput and latency against two floors measured in the same run, and long-poll memory.

    .venv/bin/python bench/heartbeat.py [--groves 1000,10000] [--seconds 8] [--concurrency 32]
                                        [--server uvicorn|gunicorn] [--workers 2] [--longpoll 10000]

Load comes from ``wrk`` (Debian: ``apt-get install -y wrk``), a C client whose own CPU use is printed: a
Python client on these 2 shared cores halves the figure it measures. For each N, N simulated Groves
(enrolled with real credentials and realistic capacity reports) heartbeat against Host under the
Procfile's server (uvicorn; ``--server gunicorn`` for the comparison in docs/decisions.md) on PostgreSQL.
Concurrency is ``min(--concurrency, N)`` and consecutive requests name consecutive Groves, so no two
in-flight heartbeats are for one Grove (a real Grove heartbeats one at a time): the bench measures scale,
not lock contention on a few rows. Workloads:

* *steady*: capacity unchanged since the last report (the common case);
* *free*: only free counts differ (a busy Grove: one unit's free CPU changes on every beat);
* *changing*: the inventory differs (units, inventory, capabilities and history are rewritten);
* *stamped*: steady bodies, but every beat is past the touch window (``forest.grove_liveness_touch_s``
  set to 0 for the run), so each one also stamps ``updated_at`` (an indexed column: not HOT). A real
  Grove beating every I seconds stamps one beat in W/I (W the window, 30 s: one in three at 10 s);
  *steady* is the other beats.

Before each measured run every Grove's liveness is stamped once (one UPDATE of all rows, then VACUUM),
as a live fleet's would be: otherwise at 10,000 Groves, where a few seconds give each Grove only one or
two beats, the run would measure the first beat past the window of every Grove, i.e. *stamped*.

Floors, same run, same concurrency: *bare UPDATE* (a single-row ``UPDATE ... WHERE id = $1`` through
psycopg from one asyncio process) and *empty HTTP* (``bench/empty_asgi.py``, a bare ASGI app under the
same server and workers, driven by the same wrk with the same body). The table prints ours/floor ratios
(target: ours >= 0.5x the bare-UPDATE floor) and the share of the Grove row's UPDATEs that were HOT.
Tables are vacuumed between sizes. ``--longpoll N`` then holds N ``changes`` long-polls open at once and
prints the web processes' RSS growth per waiting Grove.

Needs PostgreSQL and Redis on 127.0.0.1 (``scripts/services-up.sh``); uses database ``forest_bench_heartbeat``
and Redis db 4. ``uptime`` is printed first: figures on a shared box are only comparable within a run.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DB_NAME = os.environ.get("BENCH_DB_NAME", "forest_bench_heartbeat")
ADMIN_URL = os.environ.get("BENCH_ADMIN_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
DB_URL = os.environ.get("BENCH_DATABASE_URL", f"postgres://postgres@127.0.0.1:5432/{DB_NAME}")
ENV = {
    "DATABASE_URL": DB_URL, "SECRET_KEY": "bench-secret-key", "DEBUG": "0", "SECURE_SSL_REDIRECT": "0",
    "ALLOWED_HOSTS": "127.0.0.1,localhost", "CELERY_BROKER_URL": os.environ.get("BENCH_REDIS_URL",
                                                                                "redis://127.0.0.1:6379/4"),
    "LOG_LEVEL": "WARNING",
}
GIB = 1024**3
WRK = shutil.which("wrk")
LUA = r"""
local lines, bodies, n = {}, {}, 0
for line in io.lines(os.getenv("BENCH_TARGETS")) do
  local id, cred = line:match("(%S+) (%S+)")
  lines[#lines + 1] = {"/api/forest/v1/groves/" .. id .. "/heartbeat", "Bearer " .. cred}
end
for line in io.lines(os.getenv("BENCH_BODIES")) do bodies[#bodies + 1] = line end
function request()
  n = n + 1
  local target = lines[(n - 1) % #lines + 1]
  local body = bodies[(n - 1) % #bodies + 1]
  return wrk.format("POST", target[1], {["Authorization"] = target[2], ["Content-Type"] = "application/json"},
                    body)
end
done = function(summary, latency, requests)
  local errors = summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write
    + summary.errors.timeout
  io.write(string.format("BENCH %d %f %f %f %d\n", summary.requests, summary.duration / 1e6,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, errors))
end
"""


def capacity(gpus: int, jitter: int = 0, extra_gpu: bool = False) -> dict:
    """A realistic native Grove report: one machine unit, ``gpus`` NVIDIA devices."""
    count = gpus + (1 if extra_gpu else 0)
    accelerators = [{"id": f"GPU-{i}", "kind": "gpu", "vendor": "nvidia", "model": "NVIDIA H100 80GB HBM3",
                     "apis": ["cuda"], "memory_bytes": 80 * GIB, "memory_kind": "dedicated",
                     "memory_enforced": True, "share_mode": "exclusive"} for i in range(count)]
    slots = [{"inventory_id": a["id"], "allocatable": 1, "free": 1} for a in accelerators]
    return {"placement_units": [{"id": "machine", "cpu_milli": {"allocatable": 64000, "free": 64000 - jitter},
                                 "memory_bytes": {"allocatable": 512 * GIB, "free": 512 * GIB - jitter * GIB},
                                 "accelerators": slots}],
            "accelerators": accelerators}


def body(gpus: int = 2, jitter: int = 0, extra_gpu: bool = False) -> dict:
    return {"version": "forest-agent 0.1.0", "change_kinds": ["native.job"], "isolation": ["host_process"],
            "capacity": capacity(gpus, jitter, extra_gpu), "log_tail": ["heartbeat ok"]}


WORKLOADS = {
    "steady": [body()],
    "free": [body(jitter=j) for j in range(1, 8)],
    "changing": [body(extra_gpu=bool(j % 2), jitter=0) for j in range(2)],
    "stamped": [body()],
}


def prepare_database() -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB_NAME}")
    os.environ.update(ENV)
    os.environ["DJANGO_SETTINGS_MODULE"] = "forest_host.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def make_groves(count: int) -> list[tuple[str, str]]:
    """Create ``count`` enrolled Groves in bulk, each in the steady state; returns (id, credential) pairs."""
    from apps.groves import secrets
    from apps.groves.models import Grove, GroveCredential
    from apps.groves.services import grove_heartbeat_record

    existing = Grove.objects.count()
    Grove.objects.bulk_create([Grove(slug=f"bench-{n:06d}", name=f"bench {n}", roles=["compute"],
                                     substrate="native", platforms=["linux/amd64"])
                               for n in range(existing, count)], batch_size=2000)
    creds, out = [], []
    for grove in Grove.objects.order_by("slug"):
        presented, key_id, secret_hash = secrets.new_secret(secrets.CREDENTIAL_PREFIX)
        creds.append(GroveCredential(grove=grove, key_id=key_id, secret_hash=secret_hash))
        out.append((str(grove.id), presented))
    GroveCredential.objects.all().delete()
    GroveCredential.objects.bulk_create(creds, batch_size=2000)
    # A real full heartbeat for one Grove, then its stored state copied to the rest.
    sample = Grove.objects.order_by("slug").first()
    sample = grove_heartbeat_record(grove=sample, body=body())
    copied = {f.attname: getattr(sample, f.attname) for f in Grove._meta.concrete_fields
              if f.attname in {"capacity", "capacity_digest", "free_digest", "change_kinds", "isolation_modes",
                               "version", "log_tail", "last_heartbeat_at", "capacity_reported_at"}}
    Grove.objects.exclude(pk=sample.pk).update(**copied)
    from apps.groves.models import PlacementUnit

    units = PlacementUnit.objects.filter(grove=sample).values()
    PlacementUnit.objects.exclude(grove=sample).delete()
    rows = []
    for grove_id in Grove.objects.exclude(pk=sample.pk).values_list("pk", flat=True):
        for unit in units:
            rows.append(PlacementUnit(**{**unit, "id": None, "grove_id": grove_id}))
    PlacementUnit.objects.bulk_create(rows, batch_size=2000)
    return out


def vacuum() -> None:
    import psycopg

    with psycopg.connect(DB_URL, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE groves_grove, groves_grovecredential, groves_placementunit")


def restamp() -> None:
    """Every Grove's liveness stamped now (what a live fleet's last beats did): the measured beats fall
    within the touch window unless the workload says otherwise."""
    import psycopg

    with psycopg.connect(DB_URL, autocommit=True) as conn:
        conn.execute("UPDATE groves_grove SET last_heartbeat_at = now()")  # the touch trigger stamps each


def set_touch_window(seconds: int | None) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        if seconds is None:
            conn.execute(f"ALTER DATABASE {DB_NAME} RESET forest.grove_liveness_touch_s")
        else:
            conn.execute(f"ALTER DATABASE {DB_NAME} SET forest.grove_liveness_touch_s = '{seconds}'")


def hot_counters() -> tuple[int, int]:
    import psycopg

    with psycopg.connect(DB_URL, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        return conn.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                            "WHERE relname = 'groves_grove'").fetchone()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(kind: str, app: str, workers: int, extra_env: dict | None = None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    if kind == "uvicorn":
        args = [str(ROOT / ".venv/bin/uvicorn"), app, "--host", "127.0.0.1", "--port", str(port),
                "--workers", str(workers), "--log-level", "warning", "--no-access-log", "--backlog", "16384"]
    else:
        args = [str(ROOT / ".venv/bin/gunicorn"), app.replace("asgi:application", "wsgi:application"),
                "-b", f"127.0.0.1:{port}", "-w", str(workers), "--log-level", "warning"]
    proc = subprocess.Popen(args, cwd=ROOT, env={**os.environ, **ENV, **(extra_env or {})},
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    import httpx

    for _ in range(200):
        try:
            httpx.get(f"{url}/healthz", timeout=1)
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    stop(proc)
    raise SystemExit(f"{kind} did not come up for {app}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def server_cpu(proc: subprocess.Popen | None) -> float:
    import psutil

    if proc is None:
        return 0.0
    parent = psutil.Process(proc.pid)
    total = 0.0
    for p in [parent, *parent.children(recursive=True)]:
        times = p.cpu_times()
        total += times.user + times.system
    return total


def run_wrk(url: str, groves: list[tuple[str, str]], bodies: list[dict], concurrency: int, seconds: float,
            work: Path, server: subprocess.Popen | None = None) -> dict:
    targets, payloads, script = work / "targets.txt", work / "bodies.txt", work / "heartbeat.lua"
    targets.write_text("".join(f"{g} {c}\n" for g, c in groves))
    payloads.write_text("".join(json.dumps(b, separators=(",", ":")) + "\n" for b in bodies))
    script.write_text(LUA)
    started, cpu = os.times(), server_cpu(server)
    done = subprocess.run([WRK, "-t", "1", "-c", str(concurrency), "-d", f"{round(seconds)}s", "--timeout", "30s",
                           "-s", str(script), url], env={**os.environ, "BENCH_TARGETS": str(targets),
                                                         "BENCH_BODIES": str(payloads)},
                          capture_output=True, text=True)
    out = done.stdout
    if done.returncode:
        raise SystemExit(f"wrk failed ({done.returncode}): {done.stderr or out}")
    ended, cpu = os.times(), server_cpu(server) - cpu
    match = re.search(r"^BENCH (\d+) (\S+) (\S+) (\S+) (\d+)$", out, re.M)
    if match is None:
        raise SystemExit(f"wrk gave no summary:\n{out}")
    requests, duration, p50, p99, errors = match.groups()
    client_cpu = (ended.children_user + ended.children_system) - (started.children_user + started.children_system)
    return {"rps": int(requests) / float(duration), "p50": float(p50), "p99": float(p99), "errors": int(errors),
            "client_cpu": client_cpu / float(duration), "server_ms": 1000 * cpu / max(1, int(requests))}


async def run_floor(groves: list[tuple[str, str]], concurrency: int, seconds: float) -> dict:
    import psycopg

    latencies: list[float] = []
    counter = iter(range(10**9))
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        async with await psycopg.AsyncConnection.connect(DB_URL, autocommit=True, prepare_threshold=0) as conn:
            for n in counter:
                if time.perf_counter() > deadline:
                    return
                grove_id = groves[n % len(groves)][0]
                started = time.perf_counter()
                await conn.execute("UPDATE groves_grove SET last_heartbeat_at = now() WHERE id = %s", (grove_id,))
                latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {"rps": len(latencies) / elapsed, "p50": statistics.median(latencies) * 1000,
            "p99": latencies[int(len(latencies) * 0.99) - 1] * 1000, "errors": 0, "client_cpu": float("nan"),
            "server_ms": float("nan")}


def server_rss(proc: subprocess.Popen) -> int:
    import psutil

    parent = psutil.Process(proc.pid)
    return sum(p.memory_info().rss for p in [parent, *parent.children(recursive=True)])


async def hold_longpolls(url: str, groves: list[tuple[str, str]], wait_s: int, proc: subprocess.Popen) -> dict:
    """Open one ``changes?wait=`` long-poll per Grove (raw sockets: the client must stay small), measure
    the server's RSS while all wait, then read every answer."""
    host, port = url.removeprefix("http://").split(":")
    before = server_rss(proc)
    streams = []
    sem = asyncio.Semaphore(200)

    async def open_one(grove_id: str, credential: str):
        async with sem:
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write((f"GET /api/forest/v1/groves/{grove_id}/changes?wait={wait_s} HTTP/1.1\r\nHost: {host}\r\n"
                          f"Authorization: Bearer {credential}\r\nConnection: close\r\n\r\n").encode())
            await writer.drain()
            return reader, writer

    started = time.monotonic()
    streams = await asyncio.gather(*(open_one(g, c) for g, c in groves))
    opened = time.monotonic() - started
    await asyncio.sleep(min(5.0, wait_s / 3))  # every request has reached its wait
    during = server_rss(proc)
    answered = 0

    async def finish(reader, writer):
        nonlocal answered
        data = await reader.read()
        answered += data.startswith(b"HTTP/1.1 200")
        writer.close()

    await asyncio.gather(*(finish(r, w) for r, w in streams))
    return {"n": len(groves), "before": before, "during": during, "answered": answered, "open_s": opened,
            "per_grove": (during - before) / len(groves)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groves", default="1000,10000")
    parser.add_argument("--seconds", type=float, default=8, help="length of each measurement")
    parser.add_argument("--concurrency", type=int, default=32, help="at most; min(this, N) is used")
    parser.add_argument("--server", choices=["uvicorn", "gunicorn"], default="uvicorn")
    parser.add_argument("--workers", type=int, default=2, help="server worker processes (2 cores)")
    parser.add_argument("--workloads", default="steady,stamped,free,changing")
    parser.add_argument("--longpoll", type=int, default=10000, help="long-polls held at once (0: skip)")
    args = parser.parse_args()
    if WRK is None:
        raise SystemExit("bench/heartbeat.py drives load with wrk: apt-get install -y wrk (Debian package 'wrk')")
    sizes = [int(n) for n in args.groves.split(",")]
    print(f"uptime: {os.popen('uptime').read().strip()}", flush=True)
    print(f"preparing database {DB_NAME} ...", flush=True)
    prepare_database()
    work = Path(tempfile.mkdtemp(prefix="forest-bench-heartbeat-"))
    server, url = start_server(args.server, "forest_host.asgi:application", args.workers)
    empty, empty_url = start_server("uvicorn", "bench.empty_asgi:app", args.workers)
    rows, longpoll = [], None
    try:
        for size in sizes:
            print(f"N={size}: creating Groves ...", flush=True)
            groves = make_groves(size)[:size]
            random.Random(size).shuffle(groves)
            concurrency = min(args.concurrency, size)
            for label in args.workloads.split(","):
                restamp()
                vacuum()
                if label == "stamped":  # the setting is read when a connection starts: a fresh server
                    set_touch_window(0)
                    stop(server)
                    server, url = start_server(args.server, "forest_host.asgi:application", args.workers)
                print(f"N={size}: {label} heartbeats for {args.seconds}s, concurrency {concurrency} ...", flush=True)
                upd, hot = hot_counters()
                try:
                    ours = run_wrk(url, groves, WORKLOADS[label], concurrency, args.seconds, work, server)
                finally:
                    if label == "stamped":
                        set_touch_window(None)
                        stop(server)
                        server, url = start_server(args.server, "forest_host.asgi:application", args.workers)
                upd2, hot2 = hot_counters()
                floor = asyncio.run(run_floor(groves, concurrency, args.seconds))
                http = run_wrk(empty_url, groves, WORKLOADS[label], concurrency, args.seconds, work)
                hot_share = (hot2 - hot) / max(1, upd2 - upd)
                rows.append((size, label, concurrency, ours, floor, http, hot_share))
        if args.longpoll:
            groves = make_groves(max([*sizes, args.longpoll]))[: args.longpoll]
            print(f"holding {len(groves)} changes long-polls ...", flush=True)
            longpoll = asyncio.run(hold_longpolls(url, groves, 20, server))
    finally:
        stop(server)
        stop(empty)
        shutil.rmtree(work, ignore_errors=True)

    load = os.popen("uptime").read().strip()
    print(f"\nserver: {args.server} x{args.workers} workers; client: wrk (1 thread); {load}")
    print(f"{'N':>6} {'load':<9} {'conc':>4} | {'ours rps':>8} {'p50 ms':>7} {'p99 ms':>7} {'err':>4} {'HOT':>5} | "
          f"{'UPDATE rps':>10} {'p50 ms':>7} | {'HTTP rps':>8} {'p50 ms':>7} | {'/UPDATE':>7} {'/HTTP':>6} "
          f"{'wrk cpu':>7} {'web ms/req':>10}")
    for size, label, conc, ours, floor, http, hot in rows:
        print(f"{size:>6} {label:<9} {conc:>4} | {ours['rps']:>8.0f} {ours['p50']:>7.2f} {ours['p99']:>7.2f} "
              f"{ours['errors']:>4} {hot:>5.0%} | {floor['rps']:>10.0f} {floor['p50']:>7.2f} | "
              f"{http['rps']:>8.0f} {http['p50']:>7.2f} | {ours['rps'] / floor['rps']:>6.2f}x "
              f"{ours['rps'] / http['rps']:>5.2f}x {ours['client_cpu']:>6.0%} {ours['server_ms']:>10.2f}")
    print("\n/UPDATE, /HTTP = our req/s over the floor's (target >= 0.5x the bare UPDATE); HOT = share of the Grove "
          "row's UPDATEs that were heap-only;\nwrk cpu = the client's share of one core while driving ours; "
          "web ms/req = CPU of the web processes per request.")
    if longpoll:
        print(f"\nlong-poll: {longpoll['n']} Groves waiting at once (opened in {longpoll['open_s']:.1f}s): server RSS "
              f"{longpoll['before'] / 2**20:.0f} -> {longpoll['during'] / 2**20:.0f} MiB, "
              f"{longpoll['per_grove'] / 1024:.1f} KiB per waiting Grove; {longpoll['answered']} answered 200")


if __name__ == "__main__":
    main()
