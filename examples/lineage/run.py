"""Run the lineage example against a live Host: the writer job, then the checker job that consumes the
writer's output by reference, then the lineage of that artifact, all through the HTTP API.

    FOREST_HOST=http://127.0.0.1:8000 FOREST_TOKEN=... python examples/lineage/run.py [--grove SLUG]

Needs ``host.deploy.forest_compute_jobs`` on and a native Grove that runs jobs (``make run`` enrolls the
local agent as ``local-<hostname>`` with native jobs on). Exits non-zero if either job fails."""
from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from jobs import checker, writer

from forest_cli.client import TERMINAL, ForestClient


def _wait(client: ForestClient, job: dict, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while job["status"] not in TERMINAL:
        if time.monotonic() > deadline:
            raise SystemExit(f"job {job['id']} still {job['status']} after {timeout_s:.0f}s")
        time.sleep(1)
        job = client.compute_get(job["id"])
    step = job["steps"][0]
    print(f"{job['name']}: {job['status']} (step {step['name']}: {step['status']} {step['reason']})")
    for line in step["log_tail"]:
        print(f"  | {line}")
    if job["status"] != "succeeded":
        raise SystemExit(1)
    return job


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grove", default=f"local-{socket.gethostname()}", help="a native Grove's slug")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    client = ForestClient(os.environ.get("FOREST_HOST"), os.environ.get("FOREST_TOKEN"))
    first = _wait(client, client.compute_submit(writer(grove=args.grove)), args.timeout)
    result = next(o for o in first["steps"][0]["outputs"] if o["name"].endswith("/result"))
    print(f"writer produced artifact #{result['artifact_id']} {result['digest']} ({result['size']} bytes)")
    _wait(client, client.compute_submit(checker(grove=args.grove, artifact_id=result["artifact_id"],
                                                digest=result["digest"])), args.timeout)
    lineage = client.artifact_lineage(result["artifact_id"])
    for role, uses in (("produced by", lineage["producers"]), ("consumed by", lineage["consumers"])):
        for use in uses:
            print(f"{role}: run {use['run_id']} node {use['node']} ({use['name']})")
    host = os.environ.get("FOREST_HOST", "").rstrip("/")
    print(f"staff page: {host}/staff/artifacts/{result['artifact_id']}/  "
          f"CLI: forest artifacts lineage {result['artifact_id']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
