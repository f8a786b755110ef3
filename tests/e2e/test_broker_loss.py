"""Host survives its broker, end to end (issue 34): bench/broker_loss.py's stack (uvicorn, a Celery worker, the
runner pool and beat with the Procfile's flags) on a PostgreSQL and a Redis the bench starts for itself,
a stream of compute runs worked by simulated Groves over the wire API; each round restarts that PostgreSQL
(``pg_ctl restart -m fast``) and kills that Redis, starting it again empty. Round 1: the worker must never
die. Round 2 also SIGKILLs the worker while Redis is down and starts a new one: every run whose task died with
it must resume through the sweep with nobody's help. Both: every run settled, 0 lost, 0 doubled, and every
role live on /healthz afterwards. The shared PostgreSQL and Redis are never touched. Nothing is faked.

Two short rounds here; ``bench/broker_loss.py --rounds 10`` repeats it (figures in docs/decisions.md)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_postgres_restart_and_redis_kill_under_a_stream_of_runs_settle_every_run_once():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "broker_loss.py"), "--rounds", "2", "--runs", "12",
                           "--kill-worker-rounds", "1", "--timeout-s", "180", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=580, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    kept, replaced = report["rounds"]
    logs = Path(report["log_dir"])

    def tail(name: str) -> str:
        return (logs / name).read_text(errors="replace")[-3000:]

    for r in (kept, replaced):
        assert [what for what, _ in r["faults"]] == ["pg restart", "redis kill"]
        assert r["settled"] == r["runs"] and r["lost"] == 0, (r, tail("worker.log"))
        assert r["doubled"] == 0, r
        assert r["exits"] == [], (r, tail("worker.log"))  # no worker, runner or beat process died on its own
        assert r["processes"] == {"worker": "live", "runner": "live", "beat": "live"}, r
    assert not kept["replaced"] and replaced["replaced"]
    assert "Unrecoverable error" not in (logs / "worker.log").read_text(errors="replace")
