"""C1M for Forest: a million requirements placed and persisted on 5,000 Groves, beside Nomad's C1M and a floor.

    .venv/bin/python bench/c1m.py [--count 1000000] [--groves 5000] [--batch 5000] [--modes api,inprocess]

Loads ``--groves`` mixed Groves into a database of its own (Kubernetes and native, linux/amd64, linux/arm64
and darwin/arm64 in several orders, some with NVIDIA or Apple GPUs, one to four units each), keeps them
heartbeating during the run (one UPDATE of every Grove's liveness every 20 s from a thread of its own, as
a live fleet would), then places ``--count`` subjects in batches of ``--batch``:

* ``api`` (the figure to read): through the HTTP batch API, ``POST /api/forest/v1/placements/batch``, served
  by the Procfile's server (uvicorn, ``--workers`` processes, default 2 as the Procfile's ``WEB_CONCURRENCY``)
  with a CI user's API token, as many batches in flight as there are workers (one worker decides while
  another's rows go into PostgreSQL; ``--workers 1`` sends one batch at a time), each batch on a connection
  of its own (a kept-alive one stays with the worker that accepted it); each worker's CPU is printed.
  ``--balanced``: the same server command as ``--workers`` single-worker processes, each on its own port, each
  sender keeping one connection to its own — a load balancer with an upstream per worker (docs/deploy.md):
  no two batches share a worker, as they can when the workers share one socket.
  A full batch of 5,000 items is ~1.7 MB of JSON: the endpoint's own body limit
  (``PLACEMENT_BATCH_MAX_BODY_BYTES``, 4 MiB by default) holds it, the rest of the API keeps 1 MiB.
* ``inprocess`` (the second figure): ``apps.placement.batch.place_batch`` called in this process, on a
  fresh database, to show what the HTTP layer costs.

Either way each batch is one snapshot read, decisions in memory with the scoring chooser and the assume
cache, the unit rows it places on locked and re-verified, the ledger, shared verdicts and placements written (``COPY``)
in one transaction. The bench runs ``ANALYZE`` on the placement table as autovacuum would (when the rows
written since the last analyze pass 50 + 10% of the table), so a plan never rests on the statistics of
an empty table; the existence check probes only the unique index whatever the statistics say.
A mix of requirements is cycled: containers on amd64 / arm64 / any platform, native darwin work, untrusted
work, one NVIDIA GPU (one in ``--gpu-every``), in four CPU/memory sizes; the fleet has room for all of it
(2,500 GPU jobs on 4,000-odd GPUs: a ``no_capacity`` refusal means CPU work took the room of a GPU's unit;
the last ``fleet_changed`` ones are subjects whose nearly full Groves collided on every decide attempt).

Prints progress, then per mode the end-to-end time and rate (subjects placed or refused per second, every
one a stored row or a per-subject error code), Nomad C1M's published rate (1,000,000 containers on 5,000
hosts in under 5 minutes: 3,750/s), and the floor: a bare ``COPY`` of the very rows this run wrote into a
table with the same columns and indexes, in the same run, split over as many connections at once as ours
had busy server processes (ours / floor is the ratio to read; the target is 0.35; until issue 40 the floor
had one connection against our two workers, which flattered us about 2x). CPU per row is printed for both
sides: ours is the server workers' CPU (this process's, in process) plus the database's client backends'
(``/proc`` via psutil), the floor's its COPY client plus its backends'. Every unit's placed CPU and memory
is checked against its reported free counts at the end (it must never overcommit), and the spread of the
compute work is shown (largest Grove share / mean).

``--count 20000`` is a run of about a minute (the smoke test runs ``--count 60 --groves 20``). Needs
PostgreSQL and Redis: a scratch database and broker keys of its own (bench/_common.py: ``--database-url``,
``--broker-url``), re-created for each mode.
"""
from __future__ import annotations

import argparse
import io
import itertools
import json
import logging
import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import _common as common  # noqa: E402

ENV = {"LOG_LEVEL": "ERROR", "FLAGS_CACHE_TTL_S": "5", "PLACEMENT_FLEET_REFRESH_S": "1"}
TARGET: common.Target | None = None  # the run's scratch database, set by main()
GIB, MIB = 1024**3, 1024**2
NOMAD_C1M_RATE = 3750  # Nomad C1M (2016): a million containers on 5,000 hosts in under five minutes, 3,750/s
HEARTBEAT_EVERY_S = 20
SIZES = ((250, 256 * MIB), (500, 512 * MIB), (500, GIB), (1000, 2 * GIB))  # (CPU milli, memory bytes)


def prepare_database() -> None:
    """The scratch database afresh, empty (the caller migrates it)."""
    TARGET.drop_database()
    TARGET.create_database()


def load_fleet(n: int, rnd: random.Random) -> None:
    """N Groves as a heartbeat leaves them (rows, indexed capabilities, units, inventory)."""
    from django.utils import timezone

    from apps.groves.models import AcceleratorInventoryItem, Grove, GroveCapability, PlacementUnit
    from bench.fleet_rows import grove_rows

    now = timezone.now()
    groves, units, items, caps = [], [], [], []
    for index in range(n):
        native = rnd.random() < 0.35
        if native:
            platforms = rnd.choice([["linux/amd64"], ["linux/arm64"], ["darwin/arm64"]])
            kinds, isolation, roles = ["native.job", "native.workload"], ["host_process"], ["build", "compute"]
        else:
            platforms = rnd.choice([["linux/amd64"], ["linux/arm64"], ["linux/amd64", "linux/arm64"],
                                    ["linux/arm64", "linux/amd64"]])
            kinds, isolation = ["k8s.job", "k8s.build_job", "k8s.deployment"], ["container"]
            roles = ["build", "runtime", "compute"]
        accelerators = []
        if native and platforms == ["darwin/arm64"]:
            accelerators = [{"id": "apple-gpu-0", "vendor": "apple", "model": "Apple M3 Max", "apis": ["metal"],
                             "memory_bytes": 48 * GIB, "memory_kind": "unified", "memory_enforced": False,
                             "share_mode": "cooperative"}]
        elif not native and rnd.random() < 0.1:
            accelerators = [{"id": f"GPU-{i}", "vendor": "nvidia", "model": "H100", "apis": ["cuda"],
                             "memory_bytes": 80 * GIB, "memory_kind": "dedicated", "memory_enforced": True,
                             "share_mode": "exclusive"} for i in range(8)]
        report_units = []
        for u in range(1 if native else rnd.randint(2, 4)):
            cpu, memory = 64000, 256 * GIB
            slots = [{"inventory_id": a["id"], "allocatable": 1, "free": 1} for a in accelerators if u == 0]
            report_units.append({"id": f"node-{u}", "cpu_milli": {"allocatable": cpu, "free": cpu},
                                 "memory_bytes": {"allocatable": memory, "free": memory}, "accelerators": slots})
        grove_rows(index, native=native, roles=roles, platforms=platforms, isolation=isolation, kinds=kinds,
                   report_units=report_units, accelerators=accelerators, now=now, into=(groves, caps, units, items))
    Grove.objects.bulk_create(groves, batch_size=2000)
    GroveCapability.objects.bulk_create(caps, batch_size=5000)
    PlacementUnit.objects.bulk_create(units, batch_size=5000)
    AcceleratorInventoryItem.objects.bulk_create(items, batch_size=5000)


def requirements() -> list:
    from apps.pipelines.rules import node_requirement

    image = "registry.example/app@sha256:" + "b" * 64
    # (node, run kind, share of the mix in twelfths, sizes): native darwin work is a small share in small
    # sizes, as a fleet's Mac capacity is.
    nodes = [
        ({"id": "build", "kind": "build_image", "platform": ["linux/amd64"]}, "build", 3, SIZES),
        ({"id": "test", "kind": "exec", "image": image, "platform": ["linux/arm64"]}, "build", 2, SIZES),
        ({"id": "web", "kind": "deploy", "image": image}, "deploy", 2, SIZES),
        ({"id": "sign", "kind": "exec", "runtime": "native", "platform": ["darwin/arm64"]}, "build", 1, SIZES[:2]),
        ({"id": "fuzz", "kind": "exec", "image": image, "trust": "untrusted"}, "compute", 2, SIZES),
        ({"id": "job", "kind": "exec", "image": image}, "compute", 2, SIZES),
    ]
    mix = []
    for node, kind, share, sizes in nodes:
        made = [node_requirement({**node, "resources": {"cpu_milli": cpu, "memory_bytes": memory}}, run_kind=kind)
                for cpu, memory in sizes]
        mix.extend(made[n % len(made)] for n in range(share * 4))
    random.Random(2).shuffle(mix)
    gpu = node_requirement({"id": "train", "kind": "exec", "image": image, "platform": ["linux/amd64"],
                            "accelerators": {"count": 1, "vendor": "nvidia"}}, run_kind="compute")
    return mix, gpu


class Heartbeats(threading.Thread):
    """The fleet stays alive: every Grove's liveness stamped every ``HEARTBEAT_EVERY_S`` (its own connection)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
            while not self.stop.wait(HEARTBEAT_EVERY_S):
                # Live and ready, as agents that heartbeat and poll for work keep their Groves.
                conn.execute("UPDATE groves_grove SET last_heartbeat_at = now(), last_polled_at = now()")


def backend_cpu() -> dict[int, float]:
    """CPU seconds so far of each client backend on this run's database (``/proc`` through psutil; the
    server runs on this machine): PostgreSQL's share of a side's CPU. Autovacuum, the checkpointer and the
    WAL writer are no backend of the database and are left out on both sides."""
    import psutil
    import psycopg

    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        pids = [row[0] for row in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend' "
            "AND pid <> pg_backend_pid()")]
    seconds = {}
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        seconds[pid] = times.user + times.system
    return seconds


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU between two ``backend_cpu``-shaped samples (a process first seen in ``after`` started at 0)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def copy_floor(rows_sql: str, connections: int) -> dict:
    """A bare COPY of the rows this run wrote, into a table with the same columns and indexes, split over
    ``connections`` connections at once (as many as ours had busy server processes): its seconds, and the
    CPU it took (this process's, and the COPY backends')."""
    import psutil
    import psycopg

    from apps.placement.writes import COLUMNS

    columns = ", ".join(COLUMNS)
    url = os.environ["DATABASE_URL"]
    with psycopg.connect(url, autocommit=True) as conn:
        buffer = io.BytesIO()
        with conn.cursor().copy(f"COPY ({rows_sql}) TO STDOUT") as copy:
            for chunk in copy:
                buffer.write(chunk)
        conn.execute("DROP TABLE IF EXISTS bench_floor")
        conn.execute("CREATE TABLE bench_floor (LIKE placement_executionplacement INCLUDING ALL)")
        # The run's dirty buffers and WAL written out first, so the floor does not pay for our run's checkpoint
        # (the floor as strong as it can be; its own COPY still checkpoints as its WAL passes max_wal_size).
        conn.execute("CHECKPOINT")
        lines = buffer.getvalue().splitlines(keepends=True)
        parts = [b"".join(lines[i::connections]) for i in range(connections)]
        copiers = [psycopg.connect(url, autocommit=True) for _ in range(connections)]
        try:
            pids = [copier.execute("SELECT pg_backend_pid()").fetchone()[0] for copier in copiers]

            def backends() -> float:
                return sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids)

            def load(copier, data: bytes) -> None:
                with copier.transaction(), copier.cursor().copy(f"COPY bench_floor ({columns}) FROM STDIN") as copy:
                    view = memoryview(data)
                    for start in range(0, len(view), 1 << 20):
                        copy.write(view[start:start + (1 << 20)])

            cpu0, own0, t0 = backends(), time.process_time(), time.perf_counter()
            with ThreadPoolExecutor(max_workers=connections) as copying:
                list(copying.map(load, copiers, parts))
            elapsed = time.perf_counter() - t0
            cpu = backends() - cpu0 + time.process_time() - own0
        finally:
            for copier in copiers:
                copier.close()
        conn.execute("DROP TABLE bench_floor")
    return {"seconds": elapsed, "cpu": cpu, "connections": connections}


def overcommitted() -> int:
    """Units whose placed CPU or memory exceeds their reported free counts (counted in SQL): must be 0."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("""
            SELECT count(*) FROM (
                SELECT p.grove_id, p.decision->>'unit' AS unit_id,
                       sum((p.requirement->'resources'->>'cpu_milli')::bigint) AS cpu,
                       sum((p.requirement->'resources'->>'memory_bytes')::bigint) AS memory
                FROM placement_executionplacement p WHERE p.decision->>'unit' IS NOT NULL
                GROUP BY 1, 2) used
            JOIN groves_placementunit u ON u.grove_id = used.grove_id AND u.unit_id = used.unit_id
            WHERE used.cpu > u.cpu_milli_free OR used.memory > u.memory_bytes_free""")
        return cursor.fetchone()[0]


ANALYZE_THRESHOLD, ANALYZE_SCALE = 50, 0.1  # autovacuum_analyze_threshold / _scale_factor defaults


class Analyzer:
    """``ANALYZE`` of the placement table whenever autovacuum would: rows written since the last one past
    50 + 10% of the table. Timed apart from nothing: it is part of the run, as it is in production."""

    def __init__(self) -> None:
        self.rows_at_last, self.pending, self.runs = 0, 0, 0

    def written(self, rows: int) -> None:
        from django.db import connection

        self.pending += rows
        if self.pending > ANALYZE_THRESHOLD + ANALYZE_SCALE * self.rows_at_last:
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE placement_executionplacement")
            self.rows_at_last += self.pending
            self.pending, self.runs = 0, self.runs + 1


def start_web(workers: int = 1) -> tuple:
    """The Procfile's server (uvicorn, ``workers`` processes) on this bench's database; its URL."""
    import socket
    import subprocess

    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "ALLOWED_HOSTS": "127.0.0.1,localhost", "LOG_LEVEL": "ERROR"}
    proc = subprocess.Popen([str(ROOT / ".venv/bin/uvicorn"), "forest_host.asgi:application", "--host", "127.0.0.1",
                             "--port", str(port), "--workers", str(workers), "--log-level", "warning",
                             "--no-access-log"],
                            cwd=ROOT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            httpx.get(f"{url}/healthz", timeout=1)
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    stop_web(proc)
    raise SystemExit("the web server did not come up")


def stop_web(proc) -> None:
    common.stop_group(proc)


def workers_cpu(procs: list) -> list[float]:
    """CPU seconds each server worker has used (how evenly the batches were spread over them), largest first."""
    return sorted(workers_cpu_by_pid(procs).values(), reverse=True)


def workers_cpu_by_pid(procs: list) -> dict[int, float]:
    """CPU seconds so far of each server worker: the spawned workers of a multi-worker server, or the process
    itself when it serves alone (``--balanced``)."""
    import psutil

    seconds = {}
    for proc in procs:
        process = psutil.Process(proc.pid)
        workers = [child for child in process.children() if "spawn_main" in " ".join(child.cmdline())]
        for worker in workers or [process]:
            try:
                times = worker.cpu_times()
                seconds[worker.pid] = times.user + times.system
            except psutil.Error:
                continue
    return seconds


_SENDER = threading.local()
_SENDERS = itertools.count()  # next() on it is one bytecode call: safe across the sender threads


def _sender_client(clients: list):
    """The client this sender thread keeps (``--balanced``: the n-th thread to send, the n-th server; else
    the one client, which opens a connection per batch)."""
    client = getattr(_SENDER, "client", None)
    if client is None:
        client = _SENDER.client = clients[next(_SENDERS) % len(clients)]
    return client


def ci_token() -> str:
    """An API token of a CI user who may place (``placement.add_executionplacement``)."""
    from django.contrib.auth import get_user_model

    from apps.accounts.services import api_token_create

    user = get_user_model().objects.create_user(username="c1m", is_staff=True, is_superuser=True)
    return api_token_create(user=user, name="c1m")[1]


def spread_of_compute() -> float:
    """Largest per-Grove count of the compute-family placements over the mean (1.0 is perfectly even)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("""SELECT max(n)::float / avg(n) FROM (
            SELECT grove_id, count(*) AS n FROM placement_executionplacement
             WHERE requirement->>'family' = 'compute' AND requirement->'accelerators' IS NULL
               AND requirement->'compatibility'->>'change_kind' = 'k8s.job' AND grove_id IS NOT NULL
             GROUP BY 1) per_grove""")
        return cursor.fetchone()[0] or 0.0


def run_mode(mode: str, args, size: int) -> dict:
    """One full run on a fresh database: load, place ``args.count`` subjects, measure the floor."""
    from django.db import connection

    prepare_database()
    connection.close()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from apps.placement import batch, snapshot

    t0 = time.perf_counter()
    load_fleet(args.groves, random.Random(1))
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    print(f"[{mode}] loaded {args.groves} Groves in {time.perf_counter() - t0:.1f} s", flush=True)
    mix, gpu = requirements()
    mix_json = [requirement.to_json() for requirement in mix]
    gpu_json = gpu.to_json()
    webs: list = []
    clients: list = []
    worker_cpu: list[float] = []
    if mode == "api":
        import httpx

        token = ci_token()
        headers = {"Authorization": f"Token {token}"}
        if args.balanced:
            # A load balancer with one upstream per worker: one single-worker server per port, and each
            # sender keeps one connection to its own (every batch in flight has a worker to itself).
            for _ in range(args.workers):
                web, url = start_web(1)
                webs.append(web)
                clients.append(httpx.Client(base_url=url, headers=headers, timeout=600))
        else:
            web, url = start_web(args.workers)
            webs.append(web)
            # A connection per batch, as a fleet of CI callers opens them: the workers share one listening
            # socket and a kept-alive connection stays with the worker that accepted it, so one client's two
            # pooled connections could both land on the first worker up and leave the other idle (seen: 89% /
            # 1% CPU). A new connection is accepted by a worker that is not busy (most often); the handshake is
            # ~0.1 ms of a ~1 s batch.
            clients.append(httpx.Client(base_url=url, headers=headers, timeout=600,
                                        limits=httpx.Limits(max_keepalive_connections=0)))
    else:
        snapshot.fleet_refresh(full=True)
    beats = Heartbeats()
    beats.start()
    analyzer = Analyzer()
    # Our side's CPU: the server workers (or this process, in process) and the database's backends.
    own_cpu0 = workers_cpu_by_pid(webs) if webs else {}
    process_cpu0 = time.process_time()
    run_cpu: list[float] = []  # each server worker's CPU during the run (its start-up left out)
    db_cpu0 = backend_cpu()
    placed = refused = 0
    codes: dict[str, int] = {}
    start = time.perf_counter()
    last = start
    # The client's side of a batch is bytes: each item is the same JSON an encoder would write for
    # {"subject_type", "subject_id", "requirement"}, built from the requirements encoded once (a CI caller
    # runs elsewhere; here its encoder would take the server's cores).
    mix_text = [json.dumps(body, separators=(",", ":")) for body in mix_json]
    gpu_text = json.dumps(gpu_json, separators=(",", ":"))

    def send(numbers: range) -> list[str]:
        """One batch through the API; the error codes of its results."""
        body = ('{"items":[' + ",".join(
            f'{{"subject_type":"compute_step","subject_id":"c1m-{i}","requirement":'
            f'{gpu_text if i % args.gpu_every == args.gpu_every - 1 else mix_text[i % len(mix)]}}}'
            for i in numbers) + "]}").encode()
        client = _sender_client(clients)
        response = client.post("/api/forest/v1/placements/batch", content=body,
                               headers={"Content-Type": "application/json"})
        if response.status_code != 200:
            raise SystemExit(f"batch API answered {response.status_code}: {response.text[:300]}")
        return [r["error"]["code"] for r in response.json()["results"] if r["status"] == "error"]

    def place(numbers: range) -> list[str]:
        items = [batch.BatchItem(subject_type="compute_step", subject_id=f"c1m-{i}",
                                 requirement=gpu if i % args.gpu_every == args.gpu_every - 1
                                 else mix[i % len(mix)]) for i in numbers]
        return [o.error.code for o in batch.place_batch(items) if o.error is not None]

    batches = [range(first, min(first + size, args.count)) for first in range(0, args.count, size)]
    # Through the API, as many batches in flight as the server has workers (a CI fleet's clients do not
    # wait for each other): one worker decides while another's rows go into PostgreSQL.
    pool = ThreadPoolExecutor(max_workers=args.in_flight or args.workers) if mode == "api" else None
    try:
        for numbers, errors in zip(batches, pool.map(send, batches) if pool else map(place, batches),
                                   strict=True):
            placed += len(numbers) - len(errors)
            refused += len(errors)
            for code in errors:
                codes[code] = codes.get(code, 0) + 1
            analyzer.written(len(numbers) - len(errors))
            now = time.perf_counter()
            if now - last >= 10 or numbers.stop >= args.count:
                done = placed + refused
                print(f"  [{mode}] {done:>9,} decided ({placed:,} placed, {refused:,} refused) in "
                      f"{now - start:6.1f} s: {done / (now - start):,.0f}/s", flush=True)
                last = now
    finally:
        beats.stop.set()
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        db_cpu = cpu_spent(db_cpu0, backend_cpu())  # before the server stops: its backends end with it
        if webs:
            for client in clients:
                client.close()
            worker_cpu = workers_cpu(webs)
            run_cpu = [seconds - own_cpu0.get(pid, 0.0) for pid, seconds in workers_cpu_by_pid(webs).items()]
            own_cpu = sum(run_cpu)
            for web in webs:
                stop_web(web)
        else:
            own_cpu = time.process_time() - process_cpu0
    elapsed = time.perf_counter() - start
    from apps.placement.writes import COLUMNS

    # The floor gets a COPY connection per server process of ours that was busy during the run (a tenth of
    # the busiest's CPU or more); in process, ours is one process and so is the floor.
    busy = [seconds for seconds in run_cpu if seconds >= 0.1 * max(run_cpu)] if run_cpu else [0.0]
    floor = copy_floor(f"SELECT {', '.join(COLUMNS)} FROM placement_executionplacement", len(busy))
    return {"mode": mode, "placed": placed, "refused": refused, "codes": codes, "elapsed": elapsed,
            "floor": floor, "analyzes": analyzer.runs, "overcommitted": overcommitted(),
            "spread": spread_of_compute(), "worker_cpu": worker_cpu, "own_cpu": own_cpu, "db_cpu": db_cpu}


def report(result: dict, args, size: int) -> None:
    placed, refused, elapsed, floor = result["placed"], result["refused"], result["elapsed"], result["floor"]
    floor_s = floor["seconds"]
    codes = result["codes"]
    rate = (placed + refused) / elapsed
    how = ("through POST /api/forest/v1/placements/batch" if result["mode"] == "api"
           else "in process (place_batch)")
    print(f"\n[{result['mode']}] placed {placed:,} and refused {refused:,} "
          f"({', '.join(f'{n:,} {c}' for c, n in sorted(codes.items())) or 'none'}) of {args.count:,} on "
          f"{args.groves:,} Groves in {elapsed:.1f} s ({elapsed / 60:.2f} min), {how}")
    print(f"ours:                    {rate:>9,.0f} subjects/s end to end (batches of {size:,}, one transaction "
          f"each; {result['analyzes']} ANALYZE runs as autovacuum would)")
    print(f"Nomad C1M (published):   {NOMAD_C1M_RATE:>9,.0f}/s   ours / Nomad = {rate / NOMAD_C1M_RATE:.2f}")
    print(f"floor: bare COPY of the same {placed:,} rows (same columns and indexes) over {floor['connections']} "
          f"connection(s) at once, one per busy server process of ours: {floor_s:.1f} s = "
          f"{placed / floor_s:,.0f} rows/s   ours / floor = {rate / (placed / floor_s):.2f} "
          f"(time x{elapsed / floor_s:.1f}; target >= 0.35)")
    ours_cpu = result["own_cpu"] + result["db_cpu"]
    if placed:
        side = "server workers" if result["mode"] == "api" else "this process"
        print(f"CPU per row: ours {1e6 * ours_cpu / placed:,.0f} us ({side} "
              f"{result['own_cpu']:.1f} s + PostgreSQL backends {result['db_cpu']:.1f} s), floor "
              f"{1e6 * floor['cpu'] / placed:,.0f} us (COPY client + backends {floor['cpu']:.1f} s)   "
              f"floor / ours = {floor['cpu'] / max(ours_cpu, 1e-9):.2f}")
    if result["worker_cpu"]:
        print(f"server workers' CPU: {', '.join(f'{seconds:.0f} s' for seconds in result['worker_cpu'])}")
    print(f"units overcommitted (counted in SQL): {result['overcommitted']}; compute spread: largest Grove "
          f"share / mean = {result['spread']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--count", type=int, default=1_000_000, help="requirements to place (default 1,000,000)")
    parser.add_argument("--groves", type=int, default=5000, help="Groves in the fleet (default 5,000)")
    parser.add_argument("--batch", type=int, default=None, help="subjects per batch (default MAX_BATCH_SIZE)")
    parser.add_argument("--gpu-every", type=int, default=400, help="one GPU requirement in this many (default 400)")
    parser.add_argument("--modes", default="api,inprocess", help="api and/or inprocess, in that order")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn workers, and batches in flight through the "
                        "API (default 2: the Procfile's WEB_CONCURRENCY)")
    parser.add_argument("--in-flight", type=int, default=None, help="batches in flight through the API (default: "
                        "--workers; more keeps a worker deciding one batch while its other one is in PostgreSQL)")
    parser.add_argument("--balanced", action="store_true", help="one single-worker server per worker on its own "
                        "port, one kept-alive connection each (a load balancer with an upstream per worker) instead "
                        "of one server whose workers share a socket")
    common.add_options(parser)
    args = parser.parse_args()
    global TARGET
    TARGET = common.prepare(args, "c1m", env=ENV, migrate=False)
    print(f"uptime: {common.uptime()}", flush=True)
    import django

    django.setup()
    logging.getLogger("apps.placement").setLevel(logging.ERROR)
    from apps.placement.vocabulary import MAX_BATCH_SIZE

    size = args.batch or MAX_BATCH_SIZE
    results = [run_mode(mode.strip(), args, size) for mode in args.modes.split(",") if mode.strip()]
    for result in results:
        report(result, args, size)
    if len(results) == 2:
        print(f"\napi / in-process rate: {results[1]['elapsed'] / results[0]['elapsed']:.2f}")


if __name__ == "__main__":
    main()
