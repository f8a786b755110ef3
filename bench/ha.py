"""Host HA under process loss: two web processes, two Celery workers and beat on one PostgreSQL and Redis,
N jobs run by simulated Groves over the wire API, with faults injected mid-run.

    .venv/bin/python bench/ha.py [--jobs 1000] [--groves 4] [--sweep-s 2] [--resend-s 5] [--no-baseline]

Simulated Groves are plain HTTP clients speaking the wire contract (heartbeat, ``changes`` long-poll,
claim, report) against either web process, switching to the other when one does not answer. Every
terminal report is delivered three times (to alternating web processes). About 5% of runs are cancelled
by Host mid-run; their Groves still report success, late. During the faulty run, at fixed shares of the
runs finished: SIGKILL one web process (restarted a second later), SIGKILL one Celery worker (restarted),
and empty the broker once (every key of the run's own: its queued messages). At the end, counted from the
database:

Faults fire at 10%, 20% and 30% of the first half of the runs finished; the second half is created
right before the flush, so the flush certainly drops queued messages.

* **lost**: a run that never finished, or a node still waiting on a job that ended;
* **doubled**: a node with more than one terminal transition (a tail applied twice), or two Grove jobs
  for one node attempt;
* **revived**: a cancelled node that later succeeded;

plus report -> tail p50/p99 (first terminal report sent -> the node's ``finished_at``) beside the same run
without faults (``--no-baseline`` skips it), and the recovery time after the broker flush: until every
node whose message the flush may have dropped has moved on. The sweep interval and the resume resend
delay come from ``PIPELINE_SWEEP_INTERVAL_S`` / ``PIPELINE_RESUME_RESEND_AFTER_S`` (``--sweep-s``,
``--resend-s``); recovery is bounded by their sum plus a sweep's run.

Needs PostgreSQL and Redis: a scratch database and broker keys under a prefix of its own
(bench/_common.py: ``--database-url``, ``--broker-url``); the broker "flush" deletes only those keys.
Smoke size: ``--jobs 6 --groves 2 --no-baseline``.
tests/e2e/test_ha.py runs the same harness with a handful of jobs.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import _common as common  # noqa: E402

V1 = "/api/forest/v1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] if ordered else float("nan")


class Proc:
    """One Host process (web, worker or beat) in its own session, restartable, logging to a file."""

    def __init__(self, name: str, args: list[str], env: dict, log_dir: Path) -> None:
        self.name, self.args, self.env, self.log_dir, self.proc = name, args, env, log_dir, None

    def start(self) -> Proc:
        log = open(self.log_dir / f"{self.name}.log", "ab")  # noqa: SIM115 - lives with the process
        self.proc = subprocess.Popen(self.args, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=20)


@dataclass
class Cluster:
    """Two webs, two workers, one beat, on ``env`` (DATABASE_URL, broker, settings module...)."""

    env: dict
    log_dir: Path
    webs: list[Proc] = field(default_factory=list)
    workers: list[Proc] = field(default_factory=list)
    beat: Proc | None = None
    urls: list[str] = field(default_factory=list)

    def start(self) -> Cluster:
        venv = ROOT / ".venv/bin"
        for i in range(2):
            port = free_port()
            self.urls.append(f"http://127.0.0.1:{port}")
            self.webs.append(Proc(f"web{i}", [str(venv / "uvicorn"), "forest_host.asgi:application", "--host",
                                              "127.0.0.1", "--port", str(port), "--log-level", "warning",
                                              "--no-access-log"], self.env, self.log_dir).start())
            queue = self.env.get("FOREST_TEST_QUEUE")
            extra = ["-Q", queue] if queue else []
            self.workers.append(Proc(f"worker{i}", [str(venv / "celery"), "-A", "forest_host", "worker", "-c", "2",
                                                    "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
                                                    "--without-heartbeat", "-n", f"ha{i}-{os.getpid()}@%h", *extra],
                                     self.env, self.log_dir).start())
        self.beat = Proc("beat", [str(venv / "celery"), "-A", "forest_host", "beat", "--loglevel", "WARNING",
                                  "-s", str(self.log_dir / "celerybeat-schedule")], self.env, self.log_dir).start()
        import httpx

        deadline = time.monotonic() + 60
        for url in self.urls:
            while True:
                try:
                    httpx.get(f"{url}/healthz", timeout=1)
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"web at {url} did not come up (see {self.log_dir})") from None
                    time.sleep(0.2)
        return self

    def stop(self) -> None:
        for proc in [*self.webs, *self.workers, *([self.beat] if self.beat else [])]:
            proc.kill(signal.SIGTERM)


class Groves:
    """Simulated Groves: each heartbeats, long-polls ``changes``, claims what it is given and reports
    every terminal state three times; a cancellation is acknowledged with a (late) success report."""

    def __init__(self, urls: list[str], groves: list[tuple[str, str]], body: dict) -> None:
        self.urls, self.groves, self.body = urls, groves, body
        self.first_terminal: dict[str, float] = {}
        self.stop = threading.Event()
        self.errors = 0
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _call(self, http, method: str, path: str, credential: str, **kw):
        import httpx

        deadline = time.monotonic() + 60
        n = random.randrange(len(self.urls))
        while True:
            url = self.urls[n % len(self.urls)]
            try:
                response = await http.request(method, f"{url}{V1}{path}", headers={
                    "Authorization": f"Bearer {credential}"}, timeout=30, **kw)
                if response.status_code < 500:
                    return response
            except httpx.TransportError:
                pass
            self.errors += 1
            if time.monotonic() > deadline:
                raise RuntimeError(f"no web process answered {method} {path} for 60 s")
            n += 1
            await asyncio.sleep(0.2)

    async def _job(self, http, grove_id: str, credential: str, job: dict) -> None:
        job_id = job["job_id"]
        claim = await self._call(http, "POST", f"/groves/{grove_id}/jobs/{job_id}/claim", credential)
        if claim.status_code != 200:
            return
        await self._call(http, "POST", f"/groves/{grove_id}/jobs/{job_id}/report", credential,
                         json={"state": "running"})
        await asyncio.sleep(random.uniform(0, 0.3))
        outcome = {"state": "succeeded", "exit_code": 0} if random.random() > 0.1 else {"state": "failed",
                                                                                         "exit_code": 1}
        self.first_terminal.setdefault(job_id, time.time())
        for gap in (0, 0.05, 0.5):  # every terminal report delivered three times
            await asyncio.sleep(gap)
            await self._call(http, "POST", f"/groves/{grove_id}/jobs/{job_id}/report", credential, json=outcome)

    async def _grove(self, grove_id: str, credential: str) -> None:
        import httpx

        tasks: set = set()
        beat_at = 0.0
        async with httpx.AsyncClient() as http:
            while not self.stop.is_set():
                if time.monotonic() > beat_at:
                    await self._call(http, "POST", f"/groves/{grove_id}/heartbeat", credential, json=self.body)
                    beat_at = time.monotonic() + 5
                response = await self._call(http, "GET", f"/groves/{grove_id}/changes?wait=1", credential)
                if response.status_code != 200:
                    continue
                changes = response.json()
                for job in changes["jobs"]:
                    task = asyncio.create_task(self._job(http, grove_id, credential, job))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                for job_id in changes["cancel"]:  # acknowledged with a late success: must not revive
                    await self._call(http, "POST", f"/groves/{grove_id}/jobs/{job_id}/report", credential,
                                     json={"state": "succeeded", "exit_code": 0})
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _main(self) -> None:
        await asyncio.gather(*(self._grove(g, c) for g, c in self.groves))

    def start(self) -> Groves:
        self.thread.start()
        return self


def enroll_groves(count: int, tag: str) -> tuple[list[tuple[str, str]], dict]:
    from apps.groves import services as groves
    from tests.factories import heartbeat_body

    body, out = heartbeat_body(substrate="kubernetes"), []
    for n in range(count):
        _, token = groves.enrollment_token_create(roles=["compute"], substrate="kubernetes")
        grove, credential = groves.grove_enroll(body={"token": token, "name": f"ha {tag} {n}",
                                                      "substrate": "kubernetes", "platforms": ["linux/amd64"],
                                                      "version": "ha"})
        groves.grove_heartbeat_record(grove=grove, body=body)
        out.append((str(grove.id), credential))
    return out, body


def counts(run_ids: list) -> dict:
    """lost / doubled / revived, counted from the database."""
    from django.db.models import Count

    from apps.dispatch.models import GroveJob
    from apps.pipelines.models import PipelineNode, PipelineNodeEvent, PipelineRun

    terminal_runs = ("succeeded", "failed", "cancelled")
    unfinished = PipelineRun.objects.filter(pk__in=run_ids).exclude(status__in=terminal_runs).count()
    stranded = PipelineNode.objects.filter(run_id__in=run_ids, status="awaiting",
                                           current_job__status__in=["succeeded", "failed", "cancelled",
                                                                    "timed_out"]).count()
    ends = ("succeeded", "failed", "timed_out", "cancelled", "skipped")
    twice = (PipelineNodeEvent.objects.filter(node__run_id__in=run_ids, to_status__in=ends).values("node_id")
             .annotate(n=Count("id")).filter(n__gt=1).count())
    double_jobs = (GroveJob.objects.filter(run_id__in=run_ids).values("node_id", "attempt").annotate(n=Count("id"))
                   .filter(n__gt=1).count())
    revived = 0
    for node_id in (PipelineNodeEvent.objects.filter(node__run_id__in=run_ids, to_status="cancelled")
                    .values_list("node_id", flat=True)):
        first = PipelineNodeEvent.objects.filter(node_id=node_id, to_status="cancelled").order_by("at").first()
        revived += PipelineNodeEvent.objects.filter(node_id=node_id, to_status="succeeded", at__gt=first.at).exists()
    return {"lost": unfinished + stranded, "unfinished_runs": unfinished, "stranded_nodes": stranded,
            "doubled": twice + double_jobs, "revived": revived}


def run(*, jobs: int, groves: int, env: dict, log_dir: Path, faults: bool, flush, tag: str,
        timeout_s: float = 900, say=print) -> dict:
    """One run of ``jobs`` single-node compute runs through a fresh cluster; faults injected if asked.
    ``flush()`` empties the broker (the run's own keys, or the test's private queue)."""
    from django.db import transaction

    from apps.groves.models import Grove
    from apps.pipelines import services as pipelines
    from apps.pipelines.models import PipelineNode, PipelineOutbox, PipelineRun

    cluster = Cluster(env=env, log_dir=log_dir).start()
    enrolled, body = enroll_groves(groves, tag)
    sim = Groves(cluster.urls, enrolled, body).start()
    image = "registry.example/ha@sha256:" + "a" * 64
    graph = {"nodes": [{"id": "step", "kind": "exec", "image": image, "command": ["true"], "reuse": "never"}]}
    run_ids, cancelled = [], []
    started = time.time()
    recovery, events = None, []
    try:
        environment = env["PIPELINE_DETACHED_WAIT_ENVIRONMENT_IDS"]

        def create(count: int) -> None:
            for _ in range(count):
                with transaction.atomic():
                    run_ids.append(pipelines.pipeline_run_create(graph=graph, kind="compute",
                                                                 environment=environment).id)

        # Runs are created a batch per tick while the Groves work, so faults and cancellations land mid-run.
        # With faults, the second half is held back and created just before the broker is flushed, so the
        # flush drops messages for certain (their nodes' execute tasks) and the sweep must recover them.
        first_wave = jobs - jobs // 2 if faults else jobs
        plan = [(0.10, "kill web"), (0.20, "kill worker"), (0.30, "flush broker")] if faults else []
        cancel_target = max(1, jobs // 20)
        deadline = time.monotonic() + timeout_s
        while True:
            if len(run_ids) < first_wave:
                create(min(25, first_wave - len(run_ids)))
            runs = PipelineRun.objects.filter(pk__in=run_ids)
            done = runs.filter(status__in=("succeeded", "failed", "cancelled")).count()
            if len(cancelled) < cancel_target and done >= jobs * 0.05:
                for run_id in runs.filter(status="running").exclude(pk__in=cancelled).values_list(
                        "pk", flat=True)[: cancel_target - len(cancelled)]:
                    pipelines.pipeline_run_cancel(run_id=run_id, reason="ha-bench")
                    cancelled.append(run_id)
            while plan and done >= jobs * plan[0][0]:
                _, what = plan.pop(0)
                at = time.time()
                if what == "kill web":
                    cluster.webs[0].kill()
                    time.sleep(1)
                    cluster.webs[0].start()
                elif what == "kill worker":
                    cluster.workers[0].kill()
                    cluster.workers[0].start()
                else:
                    create(jobs - len(run_ids))
                    flush()
                    recovery = {"at": at, "nodes": set(
                        PipelineNode.objects.filter(run_id__in=run_ids, status__in=["queued", "awaiting"])
                        .values_list("pk", flat=True)), "outbox": set(
                        PipelineOutbox.objects.filter(node__run_id__in=run_ids, done_at__isnull=True)
                        .values_list("pk", flat=True))}
                events.append((round(at - started, 1), what, done))
                say(f"  t={at - started:5.1f}s {what} ({done}/{jobs} runs finished)", flush=True)
            if recovery is not None and "s" not in recovery:
                stuck = (PipelineNode.objects.filter(pk__in=recovery["nodes"], status="queued",
                                                     queued_at__lte=_dt(recovery["at"])).count()
                         + PipelineOutbox.objects.filter(pk__in=recovery["outbox"], done_at__isnull=True).count())
                if stuck == 0:
                    recovery["s"] = time.time() - recovery["at"]
            if done >= jobs:
                break
            if time.monotonic() > deadline:
                say(f"  ! timed out with {done}/{jobs} runs finished")
                break
            time.sleep(0.5)
        elapsed = time.time() - started
        time.sleep(1.0)  # the last repeated reports land
    finally:
        sim.stop.set()
        sim.thread.join(30)
        cluster.stop()
        # Nobody serves these Groves any more: a later run must not place work on them.
        Grove.objects.filter(pk__in=[g for g, _ in enrolled]).update(enabled=False)
    result = counts(run_ids)
    tails = dict(PipelineNode.objects.filter(run_id__in=run_ids, current_job_id__isnull=False)
                 .values_list("current_job_id", "finished_at"))
    latencies = [(tails[uuid_of(j)].timestamp() - t) * 1000 for j, t in sim.first_terminal.items()
                 if tails.get(uuid_of(j)) is not None]
    result.update(jobs=jobs, elapsed_s=elapsed, rate=jobs / elapsed, p50=pct(latencies, 50), p99=pct(latencies, 99),
                  cancelled=len(cancelled), client_retries=sim.errors, events=events,
                  recovery_s=None if recovery is None else recovery.get("s"))
    return result


def uuid_of(text: str):
    import uuid

    return uuid.UUID(text)


def _dt(ts: float):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--groves", type=int, default=4)
    parser.add_argument("--sweep-s", type=float, default=2.0, help="PIPELINE_SWEEP_INTERVAL_S")
    parser.add_argument("--resend-s", type=float, default=5.0, help="PIPELINE_RESUME_RESEND_AFTER_S")
    parser.add_argument("--no-baseline", action="store_true", help="skip the same run without faults")
    common.add_options(parser)
    args = parser.parse_args()
    print(f"uptime: {common.uptime()}", flush=True)
    log_dir = Path(tempfile.mkdtemp(prefix="forest-ha-"))
    target = common.prepare(args, "ha", env={
        "FOREST_VAR_DIR": str(log_dir), "PIPELINE_DETACHED_WAIT_ENVIRONMENT_IDS": "ha",
        "PIPELINE_SWEEP_INTERVAL_S": str(args.sweep_s), "PIPELINE_RESUME_RESEND_AFTER_S": str(args.resend_s),
        "FLAGS_CACHE_TTL_S": "1", "DATABASE_POOL_MAX_SIZE": "4", "PYTHONPATH": str(ROOT)})
    env = {**os.environ}
    import django

    django.setup()
    from apps.flags.services import flag_override_set

    flag_override_set(name="host.pipeline_detached_wait", enabled=True, reason="ha bench")
    rows = []
    if not args.no_baseline:
        print(f"baseline: {args.jobs} jobs, no faults ...", flush=True)
        rows.append(("no faults", run(jobs=args.jobs, groves=args.groves, env=env, log_dir=log_dir, faults=False,
                                      flush=target.delete_keys, tag="base")))
    print(f"faults: {args.jobs} jobs, SIGKILL a web and a worker, flush the broker once ...", flush=True)
    rows.append(("faults", run(jobs=args.jobs, groves=args.groves, env=env, log_dir=log_dir, faults=True,
                               flush=target.delete_keys, tag="faults")))
    print(f"\nHA: 2 webs (uvicorn), 2 workers (prefork x2) + beat; {args.groves} simulated Groves; sweep every "
          f"{args.sweep_s:g}s, resend after {args.resend_s:g}s; {common.uptime()}")
    print(f"{'':10}{'lost':>5}{'doubled':>8}{'revived':>8}{'cancelled':>10}{'jobs/s':>8}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'retries':>8}{'recovery s':>11}")
    for label, r in rows:
        rec = "-" if r["recovery_s"] is None else f"{r['recovery_s']:.1f}"
        print(f"{label:10}{r['lost']:>5}{r['doubled']:>8}{r['revived']:>8}{r['cancelled']:>10}{r['rate']:>8.1f}"
              f"{r['p50']:>9.0f}{r['p99']:>9.0f}{r['client_retries']:>8}{rec:>11}")
    if len(rows) == 2:
        print(f"p99 report -> tail with faults / without: {rows[1][1]['p99'] / rows[0][1]['p99']:.2f}x (target <= 2x)")
    print(f"recovery bound: sweep {args.sweep_s:g}s + resend {args.resend_s:g}s (+ one sweep's run); logs in {log_dir}")
    for at, what, done in rows[-1][1]["events"]:
        print(f"  fault at t={at}s: {what} ({done} runs finished)")


if __name__ == "__main__":
    main()
