"""Resume latency and throughput against a floor measured in the same run, and sweep cost vs history.

    .venv/bin/python bench/resume.py [--jobs 1000] [--concurrency 16] [--history 10000,100000,1000000]

With a real Celery worker (prefork, 4 processes) on Redis and Host under uvicorn on PostgreSQL:
* **resume**: N single-node compute runs are dispatched detached on one Grove and claimed; then the Grove
  reports each terminal over HTTP (``--concurrency`` at a time). Latency = the node's success tail
  committed (``finished_at``, written in the tail's transaction) minus the moment the report's HTTP
  response arrived. Throughput = N / (last tail - first report sent).
* **floor**: an empty Celery task (``bench.ping``, loaded into the worker from ``bench/floor_tasks.py``)
  sent N times on the same broker to the same worker; latency = task ran minus send returned. The ratio
  our/floor is what the resume path adds.
* **sweep**: ``pipeline_sweep()`` wall time with 10k, 100k and 1M historical (finished) node rows, each
  with a finished job and a done outbox row; it must stay flat (it reads live rows through partial indexes).

Needs PostgreSQL and Redis on 127.0.0.1 (``scripts/services-up.sh``); uses database ``forest_bench_resume``
and Redis db 13.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DB_NAME = "forest_bench_resume"
ADMIN_URL = os.environ.get("BENCH_ADMIN_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
ENV = {
    "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DB_NAME}", "SECRET_KEY": "bench-secret-key", "DEBUG": "0",
    "SECURE_SSL_REDIRECT": "0", "ALLOWED_HOSTS": "127.0.0.1,localhost", "LOG_LEVEL": "ERROR",
    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/13", "PIPELINE_DETACHED_WAIT_ENVIRONMENT_IDS": "bench",
    "FLAGS_CACHE_TTL_S": "5", "DJANGO_SETTINGS_MODULE": "forest_host.settings",
    # The worker imports the bench's floor task from bench/ (not an installed package).
    "PYTHONPATH": str(ROOT),
}
os.environ.update(ENV)


def prepare_database() -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB_NAME}")
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, check=True)
    import redis

    redis.Redis.from_url(ENV["CELERY_BROKER_URL"]).flushdb()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LOG_DIR = Path(os.environ.get("BENCH_LOG_DIR", "/tmp"))


def start(name: str, args: list[str]) -> subprocess.Popen:
    log = open(LOG_DIR / f"bench-resume-{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def wait(predicate, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def measure_floor(n: int) -> dict:
    import redis

    from bench.floor_tasks import ping

    client, key = redis.Redis.from_url(ENV["CELERY_BROKER_URL"]), f"bench-ping-{uuid.uuid4().hex}"
    for _ in range(20):  # warm the worker's processes
        ping.delay(key)
    wait(lambda: client.llen(key) >= 20, "warm-up pings")
    client.delete(key)
    sent = []
    started = time.time()
    for _ in range(n):
        ping.delay(key)
        sent.append(time.time())
    wait(lambda: client.llen(key) >= n, "pings")
    ran = sorted(float(x) for x in client.lrange(key, 0, -1))
    latencies = [(r - s) * 1000 for s, r in zip(sent, ran, strict=True)]  # FIFO queue, so order pairs them
    return {"p50": pct(latencies, 50), "p99": pct(latencies, 99), "rate": n / (ran[-1] - started)}


def measure_resume(n: int, concurrency: int, base_url: str) -> dict:
    import httpx
    from django.db import transaction

    from apps.dispatch import services as dispatch
    from apps.dispatch.models import GroveJob
    from apps.flags.services import flag_override_set
    from apps.groves import services as groves
    from apps.pipelines import services as pipelines
    from apps.pipelines.models import PipelineNode
    from tests.factories import heartbeat_body

    flag_override_set(name="host.pipeline_detached_wait", enabled=True, reason="bench")
    _, token = groves.enrollment_token_create(roles=["compute"], substrate="kubernetes")
    grove, credential = groves.grove_enroll(body={"token": token, "name": "bench", "substrate": "kubernetes",
                                                  "platforms": ["linux/amd64"], "version": "bench"})
    groves.grove_heartbeat_record(grove=grove, body=heartbeat_body(substrate="kubernetes"))
    image = "registry.example/bench@sha256:" + "b" * 64
    graph = {"nodes": [{"id": "step", "kind": "exec", "image": image, "command": ["true"], "reuse": "never"}]}
    for _ in range(n):
        with transaction.atomic():
            pipelines.pipeline_run_create(graph=graph, kind="compute", environment="bench")
    wait(lambda: GroveJob.objects.filter(grove=grove).count() >= n, "dispatch of every node", timeout=600)
    assert PipelineNode.objects.filter(wait_mode="detached").count() == n, "every node must wait detached"
    job_ids = list(GroveJob.objects.filter(grove=grove).values_list("pk", flat=True))
    for job_id in job_ids:
        dispatch.grove_job_claim(grove=grove, job_id=job_id)
    responded: dict[str, float] = {}
    errors: list[str] = []

    async def report_all() -> float:
        headers = {"Authorization": f"Bearer {credential}"}
        queue: asyncio.Queue = asyncio.Queue()
        for job_id in job_ids:
            queue.put_nowait(job_id)
        async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60) as client:
            async def one_worker():
                while not queue.empty():
                    job_id = queue.get_nowait()
                    for _ in range(3):  # a 5xx is counted and retried (the report is idempotent)
                        response = await client.post(f"/api/forest/v1/groves/{grove.id}/jobs/{job_id}/report",
                                                     json={"state": "succeeded", "exit_code": 0})
                        if response.status_code == 200:
                            break
                        errors.append(response.text[:200])
                    responded[str(job_id)] = time.time()
                    assert response.status_code == 200, response.text
            first = time.time()
            await asyncio.gather(*(one_worker() for _ in range(concurrency)))
            return first

    first_sent = asyncio.run(report_all())
    wait(lambda: PipelineNode.objects.filter(status="succeeded").count() >= n, "every success tail", timeout=600)
    finished = dict(PipelineNode.objects.values_list("current_job_id", "finished_at"))
    latencies = [(finished[uuid.UUID(j)].timestamp() - t) * 1000 for j, t in responded.items()]
    last = max(ts.timestamp() for ts in finished.values())
    return {"p50": pct(latencies, 50), "p99": pct(latencies, 99), "rate": n / (last - first_sent),
            "report_rate": n / (max(responded.values()) - first_sent), "errors": errors}


def add_history(total: int, done: int) -> None:
    """Bring the historical (finished) node rows to ``total``, each with a finished job and a done outbox row."""
    from django.db import connection

    from apps.groves.models import Grove
    from apps.pipelines.models import PipelineGraph, PipelineRun

    graph, _ = PipelineGraph.objects.get_or_create(digest="sha256:history", defaults={"canonical": {"nodes": []}})
    run, _ = PipelineRun.objects.get_or_create(graph=graph, kind="compute", environment="history",
                                               defaults={"status": "succeeded"})
    grove = Grove.objects.get(slug="bench")
    with connection.cursor() as cursor:
        cursor.execute("""
            INSERT INTO pipelines_pipelinenode (run_id, node_id, kind, runtime, spec, node_digest, position, needs,
                reuse, trust, timeout_s, plan_warnings, status, reason, detail, attempt, dedup_decision, wait_mode,
                exit_code, outputs, finished_at, queued_at)
            SELECT %s, 'n' || i, 'exec', 'container', '{}', 'sha256:h' || i, i, '[]', 'never', 'trusted', 60, '[]',
                   'succeeded', '', '', 1, '', 'detached', 0, '{}', now(), now()
            FROM generate_series(%s, %s) AS i""", [run.id, done + 1, total])
        cursor.execute("""
            INSERT INTO pipelines_grovejob (id, run_id, node_id, grove_id, change_kind, payload, idempotency_key,
                attempt, status, reason, outputs, log_tail, created_at, finished_at, deadline_at)
            SELECT gen_random_uuid(), run_id, id, %s, 'k8s.job', '{}', 'h:' || id, 1, 'succeeded', '', '{}', '[]',
                   now(), now(), now()
            FROM pipelines_pipelinenode WHERE run_id = %s AND position > %s""", [grove.id, run.id, done])
        cursor.execute("""
            UPDATE pipelines_pipelinenode n SET current_job_id = j.id FROM pipelines_grovejob j
            WHERE j.node_id = n.id AND n.run_id = %s AND n.position > %s""", [run.id, done])
        cursor.execute("""
            INSERT INTO pipelines_pipelineoutbox (kind, node_id, job_id, created_at, next_send_at, sends, done_at)
            SELECT 'pipeline.node_resume', id, current_job_id, now(), now(), 1, now()
            FROM pipelines_pipelinenode WHERE run_id = %s AND position > %s""", [run.id, done])
        cursor.execute("ANALYZE pipelines_pipelinenode; ANALYZE pipelines_grovejob; ANALYZE pipelines_pipelineoutbox")


def measure_sweep(repeats: int = 30) -> float:
    from apps.pipelines.services import pipeline_sweep

    pipeline_sweep()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        pipeline_sweep()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--history", default="10000,100000,1000000")
    args = parser.parse_args()

    prepare_database()
    import django

    django.setup()
    port = free_port()
    web = start("web", [str(ROOT / ".venv/bin/uvicorn"), "forest_host.asgi:application", "--host", "127.0.0.1",
                 "--port", str(port), "--workers", "2", "--log-level", "warning"])
    worker = start("worker", [str(ROOT / ".venv/bin/celery"), "-A", "forest_host", "worker", "-c", "4", "--loglevel",
                    "WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat",
                    "-I", "bench.floor_tasks"])
    try:
        import httpx

        wait(lambda: _up(httpx, port), "uvicorn")
        floor = measure_floor(args.jobs)
        ours = measure_resume(args.jobs, args.concurrency, f"http://127.0.0.1:{port}")
        print(f"resume over {args.jobs} jobs, report concurrency {args.concurrency}, worker prefork x4, Redis broker")
        print(f"{'':28}{'p50 ms':>10}{'p99 ms':>10}{'jobs/s':>10}")
        print(f"{'floor: empty task':28}{floor['p50']:>10.1f}{floor['p99']:>10.1f}{floor['rate']:>10.0f}")
        print(f"{'report -> tail committed':28}{ours['p50']:>10.1f}{ours['p99']:>10.1f}{ours['rate']:>10.0f}")
        print(f"{'(reports answered)':28}{'':>10}{'':>10}{ours['report_rate']:>10.0f}")
        if ours["errors"]:
            print(f"report errors retried: {len(ours['errors'])}, first: {ours['errors'][0]}")
        print(f"{'ratio our/floor':28}{ours['p50'] / floor['p50']:>10.1f}{ours['p99'] / floor['p99']:>10.1f}"
              f"{ours['rate'] / floor['rate']:>10.2f}")
    finally:
        stop(web)
        stop(worker)
    print("\nsweep with no due rows (median of 30 runs)")
    done, baseline = 0, None
    for total in (int(x) for x in args.history.split(",")):
        add_history(total, done)
        done = total
        ms = measure_sweep()
        baseline = baseline or ms
        print(f"  {total:>9,} historical nodes: {ms:6.2f} ms  (x{ms / baseline:.2f} of the smallest)")


def _up(httpx, port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code < 500
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
