"""Heartbeat throughput and latency against a floor measured in the same run.

    .venv/bin/python bench/heartbeat.py [--groves 10,100,1000,10000] [--requests 3000] [--concurrency 32]

For each N, N simulated Groves (enrolled with real credentials and realistic capacity reports) heartbeat
against Host under gunicorn on PostgreSQL. Two workloads: *steady* (capacity unchanged since the last
report: the common case) and *changing* (free counts differ on every beat, so units, inventory and
history are rewritten). The floor is a bare single-row ``UPDATE ... WHERE id = $1`` through psycopg on
the same database with the same concurrency. Prints requests/s, p50/p99 and our/floor ratios.

Needs PostgreSQL on 127.0.0.1 (``scripts/services-up.sh``); uses a ``forest_bench`` database.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DB_NAME = "forest_bench"
ADMIN_URL = os.environ.get("BENCH_ADMIN_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
DB_URL = os.environ.get("BENCH_DATABASE_URL", f"postgres://postgres@127.0.0.1:5432/{DB_NAME}")
ENV = {
    "DATABASE_URL": DB_URL, "SECRET_KEY": "bench-secret-key", "DEBUG": "0", "SECURE_SSL_REDIRECT": "0",
    "ALLOWED_HOSTS": "127.0.0.1,localhost", "CELERY_BROKER_URL": "redis://127.0.0.1:6379/14",
    "LOG_LEVEL": "WARNING",
}
GIB = 1024**3


def capacity(gpus: int, jitter: int = 0) -> dict:
    """A realistic native Grove report: one machine unit, ``gpus`` NVIDIA devices."""
    accelerators = [{"id": f"GPU-{i}", "kind": "gpu", "vendor": "nvidia", "model": "NVIDIA H100 80GB HBM3",
                     "apis": ["cuda"], "memory_bytes": 80 * GIB, "memory_kind": "dedicated",
                     "memory_enforced": True, "share_mode": "exclusive"} for i in range(gpus)]
    slots = [{"inventory_id": a["id"], "allocatable": 1, "free": 1} for a in accelerators]
    return {"placement_units": [{"id": "machine", "cpu_milli": {"allocatable": 64000, "free": 64000 - jitter},
                                 "memory_bytes": {"allocatable": 512 * GIB, "free": 512 * GIB - jitter * GIB},
                                 "accelerators": slots}],
            "accelerators": accelerators}


def body(gpus: int, jitter: int = 0) -> dict:
    return {"version": "forest-agent 0.1.0", "change_kinds": ["native.job"], "isolation": ["host_process"],
            "capacity": capacity(gpus, jitter), "log_tail": ["heartbeat ok"]}


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
    """Create ``count`` enrolled Groves in bulk; returns (grove id, credential) pairs."""
    from apps.groves import rules, secrets
    from apps.groves.models import Grove, GroveCredential
    from apps.groves.services import grove_heartbeat_record

    existing = Grove.objects.count()
    groves, creds, out = [], [], []
    for n in range(existing, count):
        grove = Grove(slug=f"bench-{n}", name=f"bench {n}", roles=["compute"], substrate="native",
                      platforms=["linux/amd64"])
        groves.append(grove)
    Grove.objects.bulk_create(groves, batch_size=2000)
    for grove in Grove.objects.order_by("slug"):
        presented, key_id, secret_hash = secrets.new_secret(secrets.CREDENTIAL_PREFIX)
        creds.append(GroveCredential(grove=grove, key_id=key_id, secret_hash=secret_hash))
        out.append((str(grove.id), presented))
    GroveCredential.objects.all().delete()
    GroveCredential.objects.bulk_create(creds, batch_size=2000)
    # One real heartbeat for a sample, then copy its digest: the rest start in the steady state.
    sample = Grove.objects.filter(capacity_digest="").first()
    if sample is not None:
        report = body(gpus=2)
        grove_heartbeat_record(grove=sample, body=report)
        data = rules.heartbeat(report, substrate="native")
        digest = rules.capacity_digest(data["capacity"], data["change_kinds"], data["isolation"])
        Grove.objects.filter(capacity_digest="").update(capacity=data["capacity"], capacity_digest=digest,
                                                        change_kinds=["native.job"], isolation_modes=["host_process"])
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(workers: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [str(ROOT / ".venv/bin/gunicorn"), "forest_host.wsgi:application", "-b", f"127.0.0.1:{port}",
         "-w", str(workers), "--log-level", "warning"],
        cwd=ROOT, env={**os.environ, **ENV, "DATABASE_CONN_MAX_AGE": "600"},
    )
    url = f"http://127.0.0.1:{port}"
    import httpx

    for _ in range(100):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("gunicorn did not come up")


def summarise(latencies: list[float], elapsed: float) -> dict:
    latencies.sort()
    return {"rps": len(latencies) / elapsed, "p50": statistics.median(latencies) * 1000,
            "p99": latencies[int(len(latencies) * 0.99) - 1] * 1000}


async def run_http(url: str, groves: list[tuple[str, str]], requests: int, concurrency: int,
                   changing: bool) -> dict:
    import httpx

    latencies: list[float] = []
    counter = iter(range(requests))
    errors = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal errors
        for n in counter:
            grove_id, credential = groves[n % len(groves)]
            payload = body(gpus=2, jitter=(n % 7) if changing else 0)
            started = time.perf_counter()
            response = await client.post(f"{url}/api/forest/v1/groves/{grove_id}/heartbeat", json=payload,
                                         headers={"Authorization": f"Bearer {credential}"})
            latencies.append(time.perf_counter() - started)
            if response.status_code != 200:
                errors += 1

    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        started = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    if errors:
        print(f"  ! {errors} heartbeats did not answer 200", file=sys.stderr)
    return summarise(latencies, elapsed)


async def run_floor(groves: list[tuple[str, str]], requests: int, concurrency: int) -> dict:
    import psycopg

    latencies: list[float] = []
    counter = iter(range(requests))

    async def worker() -> None:
        async with await psycopg.AsyncConnection.connect(DB_URL, autocommit=True) as conn:
            for n in counter:
                grove_id = groves[n % len(groves)][0]
                started = time.perf_counter()
                await conn.execute("UPDATE groves_grove SET last_heartbeat_at = now() WHERE id = %s", (grove_id,))
                latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return summarise(latencies, time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groves", default="10,100,1000,10000")
    parser.add_argument("--requests", type=int, default=3000, help="heartbeats per measurement")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    args = parser.parse_args()
    sizes = [int(n) for n in args.groves.split(",")]

    print(f"preparing database {DB_NAME} ...", flush=True)
    prepare_database()
    server, url = start_server(args.workers)
    rows = []
    try:
        for size in sizes:
            print(f"N={size}: creating Groves ...", flush=True)
            groves = make_groves(size)[:size]
            random.Random(size).shuffle(groves)
            for label, changing in (("steady", False), ("changing", True)):
                print(f"N={size}: {args.requests} {label} heartbeats, concurrency {args.concurrency} ...", flush=True)
                ours = asyncio.run(run_http(url, groves, args.requests, args.concurrency, changing))
                floor = asyncio.run(run_floor(groves, args.requests, args.concurrency))
                rows.append((size, label, ours, floor))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)

    print()
    print(f"{'N':>6} {'workload':<9} {'ours rps':>9} {'p50 ms':>7} {'p99 ms':>7} | {'floor rps':>9} {'p50 ms':>7} "
          f"{'p99 ms':>7} | {'rps ratio':>9} {'p50 ratio':>9}")
    for size, label, ours, floor in rows:
        print(f"{size:>6} {label:<9} {ours['rps']:>9.0f} {ours['p50']:>7.2f} {ours['p99']:>7.2f} | "
              f"{floor['rps']:>9.0f} {floor['p50']:>7.2f} {floor['p99']:>7.2f} | "
              f"{floor['rps'] / ours['rps']:>8.1f}x {ours['p50'] / floor['p50']:>8.1f}x")
    print("\nratio = how many times cheaper the floor is (floor rps / ours; ours p50 / floor p50).")


if __name__ == "__main__":
    main()
