"""Report -> resume latency and throughput against a floor measured in the same run, and sweep cost vs history.

    .venv/bin/python bench/resume.py [--jobs 1000] [--concurrency 16] [--steady-jobs 300] [--rate 20]
                                     [--history 10000,100000,1000000] [--modes inline,celery]

With a real Celery worker (prefork, 4 processes) on Redis and Host under uvicorn (2 workers) on PostgreSQL:
* **resume**, for each mode: ``inline`` (the tail commits with the terminal report; the default) and
  ``celery`` (``PIPELINE_INLINE_TAIL=0``: the outbox row and the ``pipeline.node_resume`` task, the path
  before issue 15 and still the fall-back). N single-node compute runs are dispatched detached on one
  Grove (kept fresh by a heartbeat every 5 s for the whole run) and claimed; then the Grove reports each
  terminal over HTTP, two ways: a *burst* (``--concurrency`` reports in flight until all N are sent) and a
  *steady* offered load (``--steady-jobs`` reports sent open-loop at ``--rate`` per second). Latency =
  the node's tail committed (``finished_at``, written in the tail's transaction) minus the moment its
  report was sent. Throughput = N / (last tail - first report sent).
* **floor**: the cheapest way to do what the inline path does, without Forest's code
  (``bench/resume_floor_asgi.py``): a bare ASGI app under the same uvicorn (2 workers) takes the same report
  from the same client for jobs made the same way, and commits the same rows in one statement on a kept
  pool (the job ended, its node tailed with its event row, the run ended, the wake-up's read of what waits
  for the Grove). Measured the same way (latency = the node's ``finished_at`` minus sent), right after
  ours for each load while the same Host keeps the Grove fresh (A/B). Until issue 40 the floor was an
  empty Celery task, which the inline path never sends: it flattered nothing that ours does.
* **sweep**: ``pipeline_sweep()`` wall time with 10k, 100k and 1M historical (finished) node rows, each
  with a finished job and a done outbox row; it must stay flat (it reads live rows through partial indexes).

Fails fast, naming the cause, when dispatch stalls or nodes are refused (no waiting out a timeout).
Needs PostgreSQL and Redis: a scratch database and broker keys under a prefix of its own (bench/_common.py:
``--database-url``, ``--broker-url``; nothing is flushed). Smoke size: ``--jobs 4 --steady-jobs 2
--concurrency 2 --rate 50 --history 10,20``.
"""
from __future__ import annotations

import argparse
import functools
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import _common as common  # noqa: E402

ENV = {
    "LOG_LEVEL": "ERROR", "PIPELINE_DETACHED_WAIT_ENVIRONMENT_IDS": "bench", "FLAGS_CACHE_TTL_S": "5",
    # The worker imports the bench's floor task from bench/ (not an installed package).
    "PYTHONPATH": str(ROOT),
}
TARGET: common.Target | None = None  # the run's scratch database and broker prefix, set by main()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LOG_DIR = Path(os.environ.get("BENCH_LOG_DIR", "/tmp"))


def start(name: str, args: list[str]) -> subprocess.Popen:
    log = open(LOG_DIR / f"bench-resume-{os.getpid()}-{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    common.stop_group(proc)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def wait(predicate, what: str, timeout: float = 300, progress=None, stall_s: float = 90) -> None:
    """Wait for ``predicate``; fail at ``timeout``, or earlier when ``progress()`` (a count) has not moved
    for ``stall_s`` seconds."""
    deadline, last, moved = time.monotonic() + timeout, None, time.monotonic()
    while not predicate():
        now = time.monotonic()
        if progress is not None:
            value = progress()
            if value != last:
                last, moved = value, now
            elif now - moved > stall_s:
                raise SystemExit(f"no progress for {stall_s:.0f}s waiting for {what} (stuck at {value})")
        if now > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def offered(n: int, rate: float | None, concurrency: int, send) -> list[float]:
    """Call ``send(i)`` for i in range(n): ``concurrency`` at a time (burst), or open-loop at ``rate`` per
    second (steady: each at its scheduled time, whether or not the earlier ones are done). Returns the
    send times."""
    sent = [0.0] * n
    if rate is None:
        cursor = iter(range(n))
        lock = threading.Lock()

        def loop():
            while True:
                with lock:
                    i = next(cursor, None)
                if i is None:
                    return
                sent[i] = time.time()
                send(i)

        threads = [threading.Thread(target=loop) for _ in range(concurrency)]
    else:
        start = time.time() + 0.2

        def one(i):
            delay = start + i / rate - time.time()
            if delay > 0:
                time.sleep(delay)
            sent[i] = time.time()
            send(i)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sent


@functools.cache
def floor_sql() -> str:
    """The floor's one statement (bench/resume_floor_asgi.py), its names from the models' metadata: what the
    inline path commits for a succeeded report on a one-node run, and the wake-up's read."""
    from apps.core.db import sql_from_meta
    from apps.dispatch.models import GroveJob
    from apps.pipelines.models import PipelineNode, PipelineNodeEvent, PipelineNodeWaitGrove, PipelineRun

    return sql_from_meta("""
WITH job AS (
    UPDATE {j} j SET {j.status} = 'succeeded', {j.exit_code} = %(exit_code)s, {j.outputs} = %(outputs)s::jsonb,
                     {j.finished_at} = now()
    WHERE j.{j.id} = %(job)s AND j.{j.grove} = %(grove)s AND j.{j.status} IN ('claimed', 'running')
    RETURNING j.{j.id} AS id, j.{j.node_id} AS node_id
), node AS (
    UPDATE {n} n SET {n.status} = 'succeeded', {n.exit_code} = %(exit_code)s, {n.outputs} = %(outputs)s::jsonb,
                     {n.reason} = 'job_succeeded', {n.awaiting_job_id} = NULL, {n.finished_at} = now()
    FROM job WHERE n.{n.id} = job.node_id AND n.{n.status} = 'awaiting' AND n.{n.current_job_id} = job.id
    RETURNING n.{n.id} AS id, n.{n.run} AS run_id
), event AS (
    INSERT INTO {e} ({e.node}, {e.from_status}, {e.to_status}, {e.reason}, {e.at})
    SELECT id, 'awaiting', 'succeeded', 'job_succeeded', now() FROM node
), run AS (
    UPDATE {r} r SET {r.status} = 'succeeded', {r.finished_at} = now() FROM node WHERE r.{r.id} = node.run_id
    RETURNING r.{r.id}
)
SELECT (SELECT count(*) FROM run), EXISTS (SELECT 1 FROM {w} w WHERE w.{w.grove_id} = %(grove)s)
""", j=GroveJob, n=PipelineNode, e=PipelineNodeEvent, r=PipelineRun, w=PipelineNodeWaitGrove)


class Bench:
    """One Grove kept fresh for the whole run, and the jobs it is handed."""

    def __init__(self, base_url: str) -> None:
        from apps.flags.services import flag_override_set
        from apps.groves import services as groves
        from tests.factories import heartbeat_body

        flag_override_set(name="host.pipeline_detached_wait", enabled=True, reason="bench")
        _, token = groves.enrollment_token_create(roles=["compute"], substrate="kubernetes")
        self.grove, self.credential = groves.grove_enroll(body={
            "token": token, "name": "bench", "substrate": "kubernetes", "platforms": ["linux/amd64"],
            "version": "bench"})
        self.base_url, self.body = base_url, heartbeat_body(substrate="kubernetes")
        self.stop, self.procs = threading.Event(), []
        groves.grove_heartbeat_record(grove=self.grove, body=self.body)
        groves.grove_poll_record(grove=self.grove)  # ready for dispatch, as an agent's first poll makes it
        self.beater = threading.Thread(target=self._beat, daemon=True)
        self.beater.start()

    def _beat(self) -> None:
        import httpx

        with httpx.Client(timeout=30) as http:
            while not self.stop.wait(5):
                try:  # base_url moves when the bench restarts the web server
                    auth = {"Authorization": f"Bearer {self.credential}"}
                    grove_url = f"{self.base_url}/api/forest/v1/groves/{self.grove.id}"
                    http.post(f"{grove_url}/heartbeat", json=self.body, headers=auth)
                    http.get(f"{grove_url}/changes", params={"wait": 0}, headers=auth)  # stays ready
                except httpx.HTTPError as exc:
                    print(f"  ! heartbeat failed: {exc}", file=sys.stderr)

    def jobs(self, n: int) -> list:
        """Create n single-node runs, wait for every node to be dispatched to our Grove, claim them all."""
        from django.db import transaction

        from apps.dispatch import services as dispatch
        from apps.dispatch.models import GroveJob
        from apps.pipelines import services as pipelines
        from apps.pipelines.models import PipelineNode

        image = "registry.example/bench@sha256:" + "b" * 64
        graph = {"nodes": [{"id": "step", "kind": "exec", "image": image, "command": ["true"], "reuse": "never"}]}
        before = set(GroveJob.objects.values_list("pk", flat=True))
        runs = []
        for _ in range(n):
            with transaction.atomic():
                runs.append(pipelines.pipeline_run_create(graph=graph, kind="compute", environment="bench").id)
        nodes = PipelineNode.objects.filter(run_id__in=runs)

        def refused():
            bad = nodes.exclude(status__in=["queued", "awaiting", "pending"])
            if bad.exists():
                first = bad.first()
                raise SystemExit(f"{bad.count()} of {n} nodes ended before their report ({first.status}: "
                                 f"{first.reason} {first.detail[:200]}); is the Grove fresh, the worker up?")
            return nodes.filter(status="awaiting").count()

        wait(lambda: nodes.filter(status="awaiting").count() >= n, f"dispatch of {n} nodes", timeout=900,
             progress=refused)
        if nodes.exclude(wait_mode="detached").exists():
            raise SystemExit("every node must wait detached (flag host.pipeline_detached_wait, environment 'bench')")
        job_ids = [j for j in nodes.values_list("current_job_id", flat=True) if j not in before]
        for job_id in job_ids:
            dispatch.grove_job_claim(grove=self.grove, job_id=job_id)
        return job_ids


def cpu_seconds(procs: list) -> dict:
    """CPU seconds so far of the web and worker process trees, each PostgreSQL process, and this client."""
    import psutil

    def tree(proc) -> float:
        total = 0.0
        try:
            parent = psutil.Process(proc.pid)
            for p in [parent, *parent.children(recursive=True)]:
                times = p.cpu_times()
                total += times.user + times.system
        except psutil.Error:
            pass
        return total

    # Per process: one that ended between two samples (a backend closed) must not subtract its whole CPU.
    postgres = {}
    for p in psutil.process_iter(["name", "cpu_times"]):
        if p.info["name"] == "postgres" and p.info["cpu_times"] is not None:
            postgres[p.pid] = p.info["cpu_times"].user + p.info["cpu_times"].system
    own = os.times()
    return {"web": tree(procs[0]), "worker": tree(procs[1]), "postgres": postgres, "client": own.user + own.system}


def measure_resume(bench: Bench, n: int, *, rate: float | None, concurrency: int, report_url: str = "") -> dict:
    """N jobs made and claimed, their terminal reports sent (to Host, or to ``report_url``: the floor)."""
    import queue

    import httpx

    from apps.pipelines.models import PipelineNode

    job_ids = bench.jobs(n)
    errors: list[str] = []
    # Clients made before the clock starts (making one costs milliseconds), shared by the sending threads.
    clients: queue.Queue = queue.Queue()
    for _ in range(concurrency):
        clients.put(httpx.Client(base_url=report_url or bench.base_url, timeout=60,
                                 headers={"Authorization": f"Bearer {bench.credential}"}))

    def send(i: int) -> None:
        http = clients.get()
        try:
            url = f"/api/forest/v1/groves/{bench.grove.id}/jobs/{job_ids[i]}/report"
            for _ in range(3):  # a 5xx is counted and retried (the report is idempotent)
                response = http.post(url, json={"state": "succeeded", "exit_code": 0})
                if response.status_code == 200:
                    return
                errors.append(response.text[:200])
            raise SystemExit(f"report refused three times: {errors[-1]}")
        finally:
            clients.put(http)

    cpu = cpu_seconds(bench.procs)
    sent = offered(n, rate, concurrency, send)
    nodes = PipelineNode.objects.filter(current_job_id__in=job_ids)
    wait(lambda: nodes.filter(status="succeeded").count() >= n, "every success tail", timeout=600,
         progress=lambda: nodes.filter(status="succeeded").count())
    after = cpu_seconds(bench.procs)
    used = {key: (sum(value[pid] - cpu[key].get(pid, 0.0) for pid in value) if isinstance(value, dict)
                  else value - cpu[key]) * 1000 / n for key, value in after.items()}
    while not clients.empty():
        clients.get().close()
    finished = dict(nodes.values_list("current_job_id", "finished_at"))
    latencies = [(finished[j].timestamp() - t) * 1000 for j, t in zip(job_ids, sent, strict=True)]
    last = max(ts.timestamp() for ts in finished.values())
    return {"p50": pct(latencies, 50), "p99": pct(latencies, 99), "rate": n / (last - min(sent)), "errors": errors,
            "cpu_ms": used}


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
            FROM generate_series(%s::int, %s::int) AS i""", [run.id, done + 1, total])
        cursor.execute("""
            INSERT INTO dispatch_grovejob (id, run_id, node_id, grove_id, change_kind, payload, idempotency_key,
                attempt, status, reason, outputs, log_tail, created_at, finished_at, deadline_at)
            SELECT gen_random_uuid(), run_id, id, %s, 'k8s.job', '{}', 'h:' || id, 1, 'succeeded', '', '{}', '[]',
                   now(), now(), now()
            FROM pipelines_pipelinenode WHERE run_id = %s AND position > %s""", [grove.id, run.id, done])
        cursor.execute("""
            UPDATE pipelines_pipelinenode n SET current_job_id = j.id FROM dispatch_grovejob j
            WHERE j.node_id = n.id AND n.run_id = %s AND n.position > %s""", [run.id, done])
        cursor.execute("""
            INSERT INTO pipelines_pipelineoutbox (kind, node_id, job_id, created_at, next_send_at, sends, done_at)
            SELECT 'pipeline.node_resume', id, current_job_id, now(), now(), 1, now()
            FROM pipelines_pipelinenode WHERE run_id = %s AND position > %s""", [run.id, done])
        cursor.execute("ANALYZE pipelines_pipelinenode; ANALYZE dispatch_grovejob; ANALYZE pipelines_pipelineoutbox")


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
    parser.add_argument("--jobs", type=int, default=1000, help="jobs in the burst")
    parser.add_argument("--concurrency", type=int, default=16, help="reports in flight during the burst")
    parser.add_argument("--steady-jobs", type=int, default=300)
    parser.add_argument("--rate", type=float, default=20, help="reports per second at the steady load")
    parser.add_argument("--modes", default="inline,celery")
    parser.add_argument("--history", default="10000,100000,1000000")
    common.add_options(parser)
    args = parser.parse_args()
    print(f"uptime: {common.uptime()}", flush=True)

    global TARGET
    TARGET = common.prepare(args, "resume", env=ENV)
    import django

    django.setup()
    worker = start("worker", [str(ROOT / ".venv/bin/celery"), "-A", "forest_host", "worker", "-c", "4",
                              "--loglevel", "WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat"])
    floor_web, floor_port = serve({"RESUME_FLOOR_SQL": floor_sql()}, app="bench.resume_floor_asgi:app", name="floor")
    floor_url = f"http://127.0.0.1:{floor_port}"
    rows, bench = [], None
    floor_burst = floor_steady = None
    try:
        for mode in args.modes.split(","):
            web, port = serve({"PIPELINE_INLINE_TAIL": "1" if mode == "inline" else "0"})
            try:
                if bench is None:
                    bench = Bench(f"http://127.0.0.1:{port}")
                bench.base_url = f"http://127.0.0.1:{port}"
                # Ours, then the floor on jobs made the same way while this Host keeps the Grove fresh (A/B);
                # the floor once, against the first mode's runs.
                bench.procs = [web, worker]
                burst = measure_resume(bench, args.jobs, rate=None, concurrency=args.concurrency)
                if floor_burst is None:
                    bench.procs = [floor_web, worker]
                    floor_burst = measure_resume(bench, args.jobs, rate=None, concurrency=args.concurrency,
                                                 report_url=floor_url)
                    rows.append(("floor: same commit, burst", floor_burst, None))
                bench.procs = [web, worker]
                steady = measure_resume(bench, args.steady_jobs, rate=args.rate, concurrency=args.concurrency)
                if floor_steady is None:
                    bench.procs = [floor_web, worker]
                    floor_steady = measure_resume(bench, args.steady_jobs, rate=args.rate,
                                                  concurrency=args.concurrency, report_url=floor_url)
                    rows.append(("floor: same commit, steady", floor_steady, None))
            finally:
                stop(web)
            rows += [(f"{mode}: report -> tail, burst", burst, floor_burst),
                     (f"{mode}: report -> tail, steady", steady, floor_steady)]
    finally:
        if bench is not None:
            bench.stop.set()
        stop(floor_web)
        stop(worker)
    print(f"\nresume: burst of {args.jobs} jobs ({args.concurrency} reports in flight), steady {args.steady_jobs} "
          f"jobs at {args.rate:g}/s; worker prefork x4, uvicorn x2, Redis broker; {common.uptime()}")
    print(f"{'':34}{'p50 ms':>9}{'p99 ms':>9}{'jobs/s':>8} | {'p50/floor':>9}{'p99/floor':>10}"
          f"{'rate/floor':>11}")
    for label, row, floor in rows:
        ratios = "" if floor is None else (f"{row['p50'] / floor['p50']:>9.2f}{row['p99'] / floor['p99']:>10.2f}"
                                           f"{row['rate'] / floor['rate']:>11.2f}")
        print(f"{label:34}{row['p50']:>9.1f}{row['p99']:>9.1f}{row['rate']:>8.0f} | {ratios}")
        if row.get("cpu_ms"):
            print("  CPU ms per job: " + ", ".join(f"{k} {v:.2f}" for k, v in row["cpu_ms"].items())
                  + " (the bench's own process sends the reports and polls for the tails)")
        if row.get("errors"):
            print(f"  report errors retried: {len(row['errors'])}, first: {row['errors'][0]}")
    print("target (issue 15): report -> tail p50 <= 2x the floor's, throughput >= 0.5x, at 1,000 jobs in flight "
          "(the floor: the same commit from a bare ASGI app, issue 40)")
    print("\nsweep with no due rows (median of 30 runs)")
    done, baseline = 0, None
    for total in (int(x) for x in args.history.split(",")):
        add_history(total, done)
        done = total
        ms = measure_sweep()
        baseline = baseline or ms
        print(f"  {total:>9,} historical nodes: {ms:6.2f} ms  (x{ms / baseline:.2f} of the smallest)")


def serve(extra: dict, *, app: str = "forest_host.asgi:application", name: str = "web") -> tuple[subprocess.Popen, int]:
    import httpx

    port = free_port()
    os.environ.update(extra)
    web = start(name, [str(ROOT / ".venv/bin/uvicorn"), app, "--host", "127.0.0.1",
                 "--port", str(port), "--workers", "2", "--log-level", "warning", "--no-access-log"])
    wait(lambda: _up(httpx, port), "uvicorn", timeout=60)
    return web, port


def _up(httpx, port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code < 500
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
