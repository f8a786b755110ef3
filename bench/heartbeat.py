"""Heartbeat throughput and latency against two floors measured in the same run, and long-poll memory.

    .venv/bin/python bench/heartbeat.py [--groves 1000,10000] [--seconds 8] [--concurrency 32] [--clients 2]
                                        [--workers 2] [--workloads steady,stamped,free] [--longpoll 10000]

For each N, N simulated Groves (enrolled with real credentials and realistic capacity reports) heartbeat
against Host served as a deployment serves it (docker/host-entrypoint.sh and the Procfile: uvicorn,
``--workers $WEB_CONCURRENCY`` (2), ``--proxy-headers --no-access-log``; uvloop and httptools) on PostgreSQL.
The load comes from ``--clients`` processes with ``--concurrency`` keep-alive connections among them (raw
asyncio sockets, requests encoded beforehand, so many heartbeats and several lean-route batches are in
flight per web process). Consecutive requests of a connection name consecutive Groves of its process's
share, so no two in-flight heartbeats are for one Grove (a real Grove heartbeats one at a time): the bench
measures scale, not lock contention on a few rows. Workloads:

* *steady*: capacity unchanged since the last report (the common case);
* *free*: only free counts differ (a busy Grove: one unit's free CPU changes on every beat);
* *stamped*: steady bodies, but every beat is past the touch window (``forest.grove_liveness_touch_s``
  set to 0 for the run), so each one also stamps ``updated_at`` (an indexed column: not HOT). A real
  Grove beating every I seconds stamps one beat in W/I (W the window, 30 s: one in three at 10 s);
  *steady* is the other beats;
* *changing* (not by default): the inventory differs, so every beat takes Django's full path (units,
  inventory, capabilities and history rewritten); its pgbench floor writes nothing, read the HTTP ratio.

Before each measured run every Grove's liveness is stamped once (one UPDATE of all rows, then VACUUM),
as a live fleet's would be: otherwise at 10,000 Groves, where a few seconds give each Grove only one or
two beats, the run would measure the first beat past the window of every Grove, i.e. *stamped*.

Floors, same run, same concurrency:

* *pgbench*: PostgreSQL's own C client (``pgbench -M prepared -c C -j 2 -T s``) running the very statement
  the lean route runs (``apps.groves.services.heartbeat_sql()``, imported) with the same rows the route
  would build for the same Groves and bodies (``heartbeat_fast_row``: credential check, digests, free
  counts), read by primary key from a side table with the time set to ``now()`` (that lookup makes the
  floor a little slower than the bare statement). The lean route group-commits (``HeartbeatBatch``: the
  heartbeats that arrive while a statement runs go in the next one), so the floor batches too: each
  pgbench statement carries B distinct Groves of its client's share, B being the heartbeats per committed
  transaction that our run of the same setting just measured (heartbeats answered over the database's
  ``xact_commit`` delta, printed as ``rows/tx``; any other transaction the web processes commit only
  lowers B, i.e. weakens the floor). Floor and ours alternate per setting (A/B). The floor keeps our C
  connections, so it has up to B x C heartbeats in flight where ours has C: the strongest honest floor,
  what PostgreSQL does with the same statement and batch at the same connection count. Its rate is rows
  (heartbeats) per second, tps x B. Target: ours >= 0.5x pgbench. (Until issue 40 the floor wrote one
  heartbeat per statement, 1.2-3.6x slower than this one: the ratio flattered us.)
* *empty HTTP*: ``bench/empty_asgi.py``, a bare ASGI app under the same server and workers, driven by the
  same client with the same bodies: what HTTP and this client alone cost.

The table prints the ratios and the share of the Grove row's UPDATEs that were HOT, the clients' CPU
(a share of one core) and the web processes' CPU per request. ``--longpoll N`` then holds N ``changes``
long-polls open at once and prints the web processes' RSS growth per waiting Grove.

Needs PostgreSQL (and ``pgbench``) and Redis: a scratch database and broker keys of its own
(bench/_common.py: ``--database-url``, ``--broker-url``). ``uptime`` is printed with the figures: on a
shared box only same-run ratios compare. Smoke size: ``--groves 8 --seconds 1 --concurrency 4
--longpoll 4 --longpoll-wait 1``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
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
from bench import _common as common  # noqa: E402

PGBENCH = shutil.which("pgbench") or "/usr/bin/pgbench"
TARGET: common.Target | None = None  # the run's scratch database, set by main()
GIB = 1024**3


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

    with psycopg.connect(TARGET.database_url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE groves_grove, groves_grovecredential, groves_placementunit")


def restamp() -> None:
    """Every Grove's liveness stamped now (what a live fleet's last beats did): the measured beats fall
    within the touch window unless the workload says otherwise."""
    import psycopg

    with psycopg.connect(TARGET.database_url, autocommit=True) as conn:
        conn.execute("UPDATE groves_grove SET last_heartbeat_at = now()")  # the touch trigger stamps each


def set_touch_window(seconds: int | None) -> None:
    """The liveness touch window of the scratch database (read when a connection starts)."""
    import psycopg

    with psycopg.connect(TARGET.admin_url, autocommit=True) as conn:
        if seconds is None:
            conn.execute(f'ALTER DATABASE "{TARGET.database}" RESET forest.grove_liveness_touch_s')
        else:
            conn.execute(f'ALTER DATABASE "{TARGET.database}" SET forest.grove_liveness_touch_s = \'{seconds}\'')


def db_counters() -> tuple[int, int, int]:
    """(UPDATEs of the Grove row, of which HOT, transactions committed in the database), once the web
    processes' backends have flushed their statistics: a backend flushes them when idle, within about a
    second, so the counters are read until they stop moving (bounded). All reads run in one transaction
    that is rolled back, so this reader adds no commit of its own to the count."""
    import psycopg

    sql = ("SELECT t.n_tup_upd, t.n_tup_hot_upd, d.xact_commit FROM pg_stat_user_tables t, pg_stat_database d "
           "WHERE t.relname = 'groves_grove' AND d.datname = current_database()")
    with psycopg.connect(TARGET.database_url) as conn:
        last = conn.execute(sql).fetchone()
        deadline, steady_since = time.monotonic() + 15, time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.25)
            conn.execute("SELECT pg_stat_clear_snapshot()")  # else the transaction sees its first snapshot
            now = conn.execute(sql).fetchone()
            if now != last:
                last, steady_since = now, time.monotonic()
            elif time.monotonic() - steady_since >= 1.5:
                break
        conn.rollback()
    return last[0], last[1], last[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

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


def start_server(app: str, workers: int) -> tuple[subprocess.Popen, str]:
    """``app`` under uvicorn as docker/host-entrypoint.sh and the Procfile run Host (the deployment's
    server configuration: ``--workers``, ``--proxy-headers``, ``--no-access-log``)."""
    port = free_port()
    args = [str(ROOT / ".venv/bin/uvicorn"), app, "--host", "127.0.0.1", "--port", str(port),
            "--workers", str(workers), "--proxy-headers", "--no-access-log", "--log-level", "warning"]
    proc = subprocess.Popen(args, cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), str(ROOT / "agent" / "src"), os.environ.get("PYTHONPATH", "")])}, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code < 500:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    stop(proc)
    raise SystemExit(f"uvicorn did not come up for {app}")


def _requests(groves: list[tuple[str, str]], bodies: list[dict]) -> list[list[bytes]]:
    """Per Grove, one encoded HTTP/1.1 request per body (the client only writes bytes)."""
    encoded = [json.dumps(b, separators=(",", ":")).encode() for b in bodies]
    out = []
    for grove_id, credential in groves:
        head = (f"POST /api/forest/v1/groves/{grove_id}/heartbeat HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {credential}\r\nContent-Type: application/json\r\n")
        out.append([f"{head}Content-Length: {len(b)}\r\n\r\n".encode() + b for b in encoded])
    return out


_LENGTH = re.compile(rb"\r\ncontent-length: *(\d+)", re.I)


def _client(url: str, requests: list[list[bytes]], connections: int, start_at: float, seconds: float, out) -> None:
    """One client process: ``connections`` keep-alive connections, each sending its next heartbeat as soon
    as the last one is answered, from ``start_at`` for ``seconds``; puts (answered, errors, latencies,
    CPU seconds) on ``out``. Connection c beats Groves c, c + connections, ... of this process's share."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    host, port = url.removeprefix("http://").split(":")
    latencies: list[float] = []
    errors = 0

    async def connection(c: int) -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection(host, int(port))
        await asyncio.sleep(max(0.0, start_at - time.time()))
        deadline = time.perf_counter() + seconds
        n = 0
        while True:
            grove = c + (n * connections)
            grove_requests = requests[grove % len(requests)]
            request = grove_requests[(grove // len(requests)) % len(grove_requests)]
            n += 1
            started = time.perf_counter()
            if started > deadline:
                break
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            match = _LENGTH.search(head)
            await reader.readexactly(int(match.group(1)) if match else 0)
            latencies.append(time.perf_counter() - started)
            if head[9:12] != b"200" or match is None:
                errors += 1
        writer.close()

    async def run() -> None:
        await asyncio.gather(*(connection(c) for c in range(connections)))

    cpu = time.process_time()
    asyncio.run(run())
    out.put((len(latencies), errors, latencies[:: max(1, len(latencies) // 20000)], time.process_time() - cpu))


def run_clients(url: str, groves: list[tuple[str, str]], bodies: list[dict], concurrency: int, clients: int,
                seconds: float, server: subprocess.Popen | None = None) -> dict:
    """``clients`` processes, ``concurrency`` connections among them; process p beats Groves p, p + clients, ..."""
    clients = max(1, min(clients, concurrency))
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    start_at = time.time() + 1.0  # every connection open before the clock starts
    procs = []
    for p in range(clients):
        share = groves[p::clients]
        connections = concurrency // clients + (1 if p < concurrency % clients else 0)
        procs.append(context.Process(target=_client, args=(url, _requests(share, bodies), connections, start_at,
                                                           seconds, out)))
    for proc in procs:
        proc.start()
    cpu = server_cpu(server)
    results = [out.get(timeout=seconds + 120) for _ in procs]
    cpu = server_cpu(server) - cpu
    for proc in procs:
        proc.join()
    answered = sum(r[0] for r in results)
    latencies = sorted(x for r in results for x in r[2])
    if not latencies:
        raise SystemExit(f"no heartbeat answered at {url}")
    return {"rps": answered / seconds, "answered": answered, "p50": statistics.median(latencies) * 1000,
            "p99": latencies[max(0, int(len(latencies) * 0.99) - 1)] * 1000, "errors": sum(r[1] for r in results),
            "client_cpu": sum(r[3] for r in results) / seconds, "server_ms": 1000 * cpu / max(1, answered)}


def pgbench_rows(groves: list[tuple[str, str]], bodies: list[dict]) -> None:
    """The side table the pgbench floor reads its rows from: the rows the lean route builds for these
    Groves and bodies (``heartbeat_fast_row``), row g * len(bodies) + v for Grove g and body v."""
    import psycopg

    from apps.groves.services import heartbeat_fast_row

    with psycopg.connect(TARGET.database_url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_heartbeat_rows")
        conn.execute("CREATE TABLE bench_heartbeat_rows (n integer PRIMARY KEY, row jsonb NOT NULL)")
        with conn.cursor().copy("COPY bench_heartbeat_rows (n, row) FROM STDIN") as copy:
            for g, (grove_id, credential) in enumerate(groves):
                for v, b in enumerate(bodies):
                    row = heartbeat_fast_row(grove_id=grove_id, presented=credential, body=b)
                    copy.write_row((g * len(bodies) + v, json.dumps(row)))
        conn.execute("VACUUM ANALYZE bench_heartbeat_rows")


def pgbench_script(variants: int) -> str:
    """``heartbeat_sql()`` as pgbench runs it: its one parameter, the batch, is ``:batch`` consecutive Groves
    of the client's own share (from a random one), each with a random body, read from the side table."""
    from apps.groves.services import heartbeat_sql

    statement = heartbeat_sql()
    rows = ("(SELECT jsonb_agg(r.row || jsonb_build_object('at', now())) FROM generate_series(0, :batch - 1) i "
            "JOIN bench_heartbeat_rows r ON r.n = (:client_id + :clients * ((:start + i) % :per_client)) "
            "* :variants + (:v + i) % :variants)")
    if "%(rows)s::jsonb" not in statement:
        raise SystemExit("heartbeat_sql() no longer takes %(rows)s::jsonb: update bench/heartbeat.py's floor")
    return (f"\\set variants {variants}\n"
            "\\set start random(0, :per_client - 1)\n"
            "\\set v random(0, :variants - 1)\n"
            + statement.strip().replace("%(rows)s::jsonb", rows) + ";\n")


def run_pgbench(groves: int, variants: int, concurrency: int, batch: int, seconds: float, work: Path) -> dict:
    """The floor: pgbench, ``concurrency`` connections, each beating its own share of the Groves ``batch``
    at a time (at most its share: a statement never names one Grove twice)."""
    per_client = groves // concurrency
    batch = max(1, min(batch, per_client))
    script = work / "heartbeat.sql"
    script.write_text(pgbench_script(variants))
    started = os.times()
    done = subprocess.run([PGBENCH, "-n", "-M", "prepared", "-f", str(script), "-c", str(concurrency),
                           "-j", str(min(2, concurrency)), "-T", str(max(1, round(seconds))),
                           "-D", f"clients={concurrency}", "-D", f"per_client={per_client}",
                           "-D", f"batch={batch}", TARGET.database_url], capture_output=True, text=True)
    ended = os.times()
    if done.returncode:
        raise SystemExit(f"pgbench failed ({done.returncode}): {done.stderr[-2000:]}")
    tps = re.search(r"^tps = ([0-9.]+)", done.stdout, re.M)
    latency = re.search(r"^latency average = ([0-9.]+) ms", done.stdout, re.M)
    failed = re.search(r"^number of failed transactions: (\d+)", done.stdout, re.M)
    if tps is None:
        raise SystemExit(f"pgbench gave no tps:\n{done.stdout}\n{done.stderr}")
    cpu = (ended.children_user + ended.children_system) - (started.children_user + started.children_system)
    return {"rps": float(tps.group(1)) * batch, "batch": batch,
            "latency": float(latency.group(1)) if latency else float("nan"),
            "errors": int(failed.group(1)) if failed else 0, "client_cpu": cpu / max(1, round(seconds))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groves", default="1000,10000", help="fleet sizes, comma-separated (the size option)")
    parser.add_argument("--seconds", type=float, default=8, help="length of each measurement")
    parser.add_argument("--concurrency", type=int, default=32,
                        help="connections in flight, ours and pgbench's (at most N / 2)")
    parser.add_argument("--clients", type=int, default=2, help="client processes sharing the connections")
    parser.add_argument("--workers", type=int, default=int(os.environ.get("WEB_CONCURRENCY", "2")),
                        help="uvicorn workers (default $WEB_CONCURRENCY or 2, as deployed)")
    parser.add_argument("--workloads", default="steady,stamped,free")
    parser.add_argument("--batches-in-flight", default="2",
                        help="FOREST_HEARTBEAT_BATCHES_IN_FLIGHT values to compare in the same run (e.g. 1,2)")
    parser.add_argument("--longpoll", type=int, default=10000, help="long-polls held at once (0: skip)")
    parser.add_argument("--longpoll-wait", type=int, default=20, help="seconds each long-poll waits")
    common.add_options(parser)
    args = parser.parse_args()
    sizes = [int(n) for n in args.groves.split(",")]
    print(f"uptime: {common.uptime()}", flush=True)
    global TARGET
    TARGET = common.prepare(args, "heartbeat", env={"LOG_LEVEL": "WARNING"})
    import django

    django.setup()
    work = Path(tempfile.mkdtemp(prefix="forest-bench-heartbeat-"))
    in_flight = [int(k) for k in args.batches_in_flight.split(",")]
    server, url = None, None

    def serve(k: int) -> None:
        """Host afresh (a touch window set on the database is read when a connection starts)."""
        nonlocal server, url
        if server is not None:
            stop(server)
        os.environ["FOREST_HEARTBEAT_BATCHES_IN_FLIGHT"] = str(k)
        server, url = start_server("forest_host.asgi:application", args.workers)

    empty, empty_url = start_server("bench.empty_asgi:app", args.workers)
    rows, longpoll = [], None
    try:
        for size in sizes:
            print(f"N={size}: creating Groves ...", flush=True)
            groves = make_groves(size)[:size]
            random.Random(size).shuffle(groves)
            concurrency = max(1, min(args.concurrency, size // 2))
            for label in args.workloads.split(","):
                bodies = WORKLOADS[label]
                pgbench_rows(groves, bodies)
                if label == "stamped":
                    set_touch_window(0)
                try:
                    runs = []
                    for k in in_flight:  # each setting, then its floor at the batch it measured (A/B)
                        serve(k)
                        restamp()
                        vacuum()
                        print(f"N={size}: {label} heartbeats for {args.seconds}s, {concurrency} connections, "
                              f"{k} batch(es) in flight per process ...", flush=True)
                        upd, hot, commits = db_counters()
                        ours = run_clients(url, groves, bodies, concurrency, args.clients, args.seconds, server)
                        upd2, hot2, commits2 = db_counters()
                        # Heartbeats per committed transaction: what ours group-commits, the floor's batch.
                        ours["per_tx"] = ours["answered"] / max(1, commits2 - commits)
                        restamp()
                        vacuum()
                        floor = run_pgbench(size, len(bodies), concurrency, max(1, round(ours["per_tx"])),
                                            args.seconds, work)
                        runs.append((k, ours, (hot2 - hot) / max(1, upd2 - upd), floor))
                finally:
                    if label == "stamped":
                        set_touch_window(None)
                http = run_clients(empty_url, groves, bodies, concurrency, args.clients, args.seconds)
                rows += [(size, label, k, concurrency, ours, floor, http, hot_share)
                         for k, ours, hot_share, floor in runs]
        if args.longpoll:
            if server is None or args.workloads.split(",")[-1] == "stamped":  # not on the touch window of 0
                serve(in_flight[-1])
            groves = make_groves(max([*sizes, args.longpoll]))[: args.longpoll]
            print(f"holding {len(groves)} changes long-polls ...", flush=True)
            longpoll = asyncio.run(hold_longpolls(url, groves, args.longpoll_wait, server))
    finally:
        if server is not None:
            stop(server)
        stop(empty)
        shutil.rmtree(work, ignore_errors=True)

    print(f"\nserver: uvicorn x{args.workers} workers (docker/host-entrypoint.sh's flags); ours: {args.clients} "
          f"client processes; floor: pgbench -M prepared -j 2, batched as ours; {common.uptime()}")
    print(f"{'N':>6} {'load':<9} {'k':>2} {'conn':>4} | {'ours rps':>8} {'p50 ms':>7} {'p99 ms':>7} {'err':>4} "
          f"{'HOT':>5} {'rows/tx':>7} | "
          f"{'pgbench rows/s':>14} {'B':>3} {'avg ms':>7} | {'HTTP rps':>8} {'p50 ms':>7} | {'/pgbench':>8} "
          f"{'/HTTP':>6} {'cl cpu':>6} {'pgb cpu':>7} {'web ms/req':>10}")
    for size, label, k, conc, ours, floor, http, hot in rows:
        print(f"{size:>6} {label:<9} {k:>2} {conc:>4} | {ours['rps']:>8.0f} {ours['p50']:>7.2f} {ours['p99']:>7.2f} "
              f"{ours['errors']:>4} {hot:>5.0%} {ours['per_tx']:>7.1f} | {floor['rps']:>14.0f} {floor['batch']:>3} "
              f"{floor['latency']:>7.2f} | "
              f"{http['rps']:>8.0f} {http['p50']:>7.2f} | {ours['rps'] / floor['rps']:>7.2f}x "
              f"{ours['rps'] / http['rps']:>5.2f}x {ours['client_cpu']:>6.0%} {floor['client_cpu']:>7.0%} "
              f"{ours['server_ms']:>10.2f}")
    print("\nratio: /pgbench, /HTTP = our heartbeats/s over the floor's (target >= 0.5x pgbench running the same "
          "statement with B heartbeats each, B = our rows/tx rounded); rows/tx = our heartbeats per committed "
          "transaction;\nk = heartbeat statements in flight per web process;\nHOT = share of the Grove row's UPDATEs "
          "that were heap-only; cl cpu / pgb cpu = the clients' "
          "CPU as a share of one core; web ms/req = CPU of the web processes per request.")
    if longpoll:
        print(f"\nlong-poll: {longpoll['n']} Groves waiting at once (opened in {longpoll['open_s']:.1f}s): server RSS "
              f"{longpoll['before'] / 2**20:.0f} -> {longpoll['during'] / 2**20:.0f} MiB, "
              f"{longpoll['per_grove'] / 1024:.1f} KiB per waiting Grove; {longpoll['answered']} answered 200")


if __name__ == "__main__":
    main()
