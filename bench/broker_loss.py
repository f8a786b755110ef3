"""Host survives its broker (issue 34): a production-shaped Host (uvicorn, a Celery worker, the runner pool
and beat, as the Procfile starts them) on a PostgreSQL and a Redis of this run's own, a stream of compute runs
worked by simulated Groves over the wire API, and in every round PostgreSQL restarted (``pg_ctl restart -m
fast``) and then Redis SIGKILLed and started again empty on the same port.

    .venv/bin/python bench/broker_loss.py [--rounds 10] [--runs 40] [--groves 2] [--kill-worker-rounds 0] [--json]

Per round, counted from the database (bench/ha.py's ``counts``): **settled** runs (every run ended),
**lost** (a run never finished, or a node still waiting on a job that ended), **doubled** (a node ended twice,
or two Grove jobs for one attempt); plus whether the worker, runner and beat processes were still the ones
started (``exits``: how many of them exited), the recovery time from the Redis kill until every run settled,
and what ``/healthz`` said about the processes once it had. In the last ``--kill-worker-rounds`` rounds the
worker is also SIGKILLed while Redis is down and a new one started once Redis is back: runs whose tasks died
with it must resume through the sweep, with nobody's help (item 4).

Nothing is faked and the shared PostgreSQL and Redis are never touched: both servers are this run's own
(bench/own_servers.py), on free loopback ports, removed at the end. tests/e2e/test_broker_loss.py runs one
short round of this.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.ha import Groves, Proc, counts, enroll_groves, free_port  # noqa: E402
from bench.own_servers import OwnPostgres, OwnRedis  # noqa: E402

TERMINAL = ("succeeded", "failed", "cancelled")
ENVIRONMENT = "loss"


def _retrying(fn, *, deadline: float):
    """Run an ORM call, waiting out PostgreSQL's restart: close this process's connections and try again."""
    from django.db import InterfaceError, OperationalError

    from bench._common import close_django_connections

    while True:
        try:
            return fn()
        except (OperationalError, InterfaceError):
            close_django_connections()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class Stack:
    """PostgreSQL, Redis, and web + worker + runner + beat on them; the bench process's Django uses the same
    database."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir, self.pg, self.redis = log_dir, OwnPostgres(), OwnRedis()
        self.procs: dict[str, Proc] = {}
        self.url = ""

    def start(self) -> Stack:
        import httpx

        self.pg.start()
        self.pg.createdb()
        self.redis.start()
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "DATABASE_URL": self.pg.url, "CELERY_BROKER_URL": self.redis.url,
               "REDIS_URL": self.redis.url, "DJANGO_SETTINGS_MODULE": "tests.settings", "FLAGS_CACHE_TTL_S": "0",
               "LOG_LEVEL": "WARNING", "FOREST_VAR_DIR": str(self.log_dir), "DATABASE_POOL_MAX_SIZE": "4",
               "DATABASE_POOL_TIMEOUT_S": "3", "FOREST_OUTAGE_RETRY_AFTER_S": "1",
               "PIPELINE_DETACHED_WAIT_ENVIRONMENT_IDS": ENVIRONMENT, "PIPELINE_SWEEP_INTERVAL_S": "1",
               "PIPELINE_RESUME_RESEND_AFTER_S": "2", "FOREST_LIVENESS_PROBE_S": "2",
               "FOREST_LIVENESS_WITHIN_S": "15", "PYTHONPATH": str(ROOT)}
        os.environ.update({k: env[k] for k in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL",
                                               "DJANGO_SETTINGS_MODULE", "FLAGS_CACHE_TTL_S",
                                               "PIPELINE_DETACHED_WAIT_ENVIRONMENT_IDS", "DATABASE_POOL_MAX_SIZE",
                                               "FOREST_LIVENESS_WITHIN_S")})
        os.environ.pop("DATABASE_TEST_NAME", None)
        os.environ["LOG_LEVEL"] = "WARNING"  # this process's Django: the per-run INFO lines drown the figures
        import subprocess

        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env,
                       check=True)
        venv = Path(sys.executable).parent  # the console scripts beside this interpreter, wherever the checkout is
        # The Procfile's four, with its flags (the worker keeps gossip, mingle and heartbeats).
        commands = {
            "web": [str(venv / "uvicorn"), "forest_host.asgi:application", "--host", "127.0.0.1", "--port",
                    str(port), "--log-level", "warning", "--no-access-log"],
            "worker": [str(venv / "celery"), "-A", "forest_host", "worker", "--loglevel", "INFO", "--concurrency",
                       "2"],
            "runner": [str(venv / "python"), "manage.py", "pipeline_runner", "--loglevel", "INFO"],
            "beat": [str(venv / "celery"), "-A", "forest_host", "beat", "--loglevel", "INFO", "-s",
                     str(self.log_dir / "celerybeat-schedule")],
        }
        self.procs = {name: Proc(name, command, env, self.log_dir).start() for name, command in commands.items()}
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"web did not come up (see {self.log_dir}/web.log)")
            time.sleep(0.2)
        import django

        django.setup()
        import logging

        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per Grove request otherwise
        from apps.flags.services import flag_override_set

        flag_override_set(name="host.pipeline_detached_wait", enabled=True, reason="broker loss bench")
        return self

    def exited(self) -> list[str]:
        return [name for name, proc in self.procs.items() if name != "web" and proc.proc.poll() is not None]

    def stop(self) -> None:
        import signal

        for proc in self.procs.values():
            proc.kill(signal.SIGTERM)
        self.redis.stop()
        self.pg.remove()


def round_(stack: Stack, *, runs: int, timeout_s: float, kill_worker: bool, say=print) -> dict:
    """One round: ``runs`` single-step compute runs created in small batches; a third of the way in PostgreSQL
    restarts, two thirds of the way in Redis is killed and started again empty."""
    import httpx
    from django.db import transaction

    from apps.pipelines import services as pipelines
    from apps.pipelines.models import PipelineRun

    image = "registry.example/loss@sha256:" + "b" * 64
    graph = {"nodes": [{"id": "step", "kind": "exec", "image": image, "command": ["true"], "reuse": "never"}]}
    run_ids: list = []
    deadline = time.monotonic() + timeout_s
    started = time.monotonic()

    def create(count: int) -> None:
        for _ in range(count):
            def one():
                with transaction.atomic():
                    return pipelines.pipeline_run_create(graph=graph, kind="compute", environment=ENVIRONMENT).id
            run_ids.append(_retrying(one, deadline=deadline))

    faults, redis_killed_at, replaced = [], None, False
    while len(run_ids) < runs:
        create(min(4, runs - len(run_ids)))
        if not faults and len(run_ids) >= runs / 3:
            stack.pg.restart()
            faults.append(("pg restart", round(time.monotonic() - started, 1)))
        elif len(faults) == 1 and len(run_ids) >= 2 * runs / 3:
            stack.redis.stop()
            if kill_worker:  # the worker dies with tasks in hand while the broker is gone
                stack.procs["worker"].kill()
            time.sleep(1.0)
            stack.redis.start()
            if kill_worker:
                stack.procs["worker"].start()
                replaced = True
            redis_killed_at = time.monotonic()
            faults.append(("redis kill", round(redis_killed_at - started, 1)))
        time.sleep(0.3)

    def unsettled() -> int:
        return PipelineRun.objects.filter(pk__in=run_ids).exclude(status__in=TERMINAL).count()

    left = _retrying(unsettled, deadline=deadline)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = _retrying(unsettled, deadline=deadline)
    recovery_s = time.monotonic() - redis_killed_at if redis_killed_at else None
    time.sleep(1.0)  # the Groves' repeated terminal reports land
    result = _retrying(lambda: counts(run_ids), deadline=time.monotonic() + 30)
    # After recovery every background role has shown life again: the worker and runner consumed a probe sent
    # after the faults, which beat sent.
    health: dict = {}
    while time.monotonic() < deadline + 60:
        try:
            health = httpx.get(f"{stack.url}/healthz", timeout=5).json()
        except httpx.HTTPError:
            health = {}
        if health.get("status") == "ok":
            break
        time.sleep(0.5)
    result.update(runs=runs, settled=runs - left, exits=stack.exited(), replaced=replaced, faults=faults,
                  recovery_s=None if recovery_s is None or left else round(recovery_s, 1),
                  processes=health.get("processes"))
    say(f"  settled {result['settled']}/{runs}  lost {result['lost']}  doubled {result['doubled']}  "
        f"exits {result['exits'] or 0}  recovery {result['recovery_s']} s  processes {result['processes']}",
        flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=40, help="compute runs per round")
    parser.add_argument("--groves", type=int, default=2)
    parser.add_argument("--timeout-s", type=float, default=240, help="per round, for every run to settle")
    parser.add_argument("--kill-worker-rounds", type=int, default=0,
                        help="in this many last rounds, also SIGKILL the worker while Redis is down and start "
                             "a new one")
    parser.add_argument("--json", action="store_true", help="print one JSON line of the rounds at the end")
    args = parser.parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="forest-broker-loss-"))
    say = (lambda *a, **k: print(*a, file=sys.stderr, **k)) if args.json else print
    stack = Stack(log_dir)
    rounds = []
    try:
        stack.start()
        enrolled, body = _retrying(lambda: enroll_groves(args.groves, "loss"), deadline=time.monotonic() + 60)
        sim = Groves([stack.url], enrolled, body).start()
        try:
            for n in range(args.rounds):
                kill_worker = n >= args.rounds - args.kill_worker_rounds
                say(f"round {n + 1}/{args.rounds}: {args.runs} runs, PostgreSQL restart, Redis kill"
                    + (", worker SIGKILL + restart" if kill_worker else ""), flush=True)
                rounds.append(round_(stack, runs=args.runs, timeout_s=args.timeout_s, kill_worker=kill_worker,
                                     say=say))
        finally:
            sim.stop.set()
            sim.thread.join(30)
    finally:
        stack.stop()
    if args.json:
        print(json.dumps({"rounds": rounds, "log_dir": str(log_dir)}))
        return
    print(f"\n{'round':>5}{'settled':>9}{'lost':>6}{'doubled':>9}{'exits':>7}{'worker':>10}{'recovery s':>12}")
    for n, r in enumerate(rounds, 1):
        recovery = "-" if r["recovery_s"] is None else r["recovery_s"]
        print(f"{n:>5}{r['settled']:>6}/{r['runs']:<3}{r['lost']:>5}{r['doubled']:>9}{len(r['exits']):>7}"
              f"{'replaced' if r['replaced'] else 'kept':>10}{recovery:>12}")
    print(f"logs in {log_dir}")


if __name__ == "__main__":
    main()
