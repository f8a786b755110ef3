"""Spread and bin-pack quality through the HTTP batch API: where do identical jobs land on equal Groves?

    .venv/bin/python bench/spread.py [--jobs 1000] [--groves 10] [--batch 250]

Two runs, each on a fresh database with ``--groves`` equal Groves (one 64-CPU, 256 GiB unit each) and
``--jobs`` identical quarter-CPU, 256 MiB compute jobs posted to ``POST /api/forest/v1/placements/batch`` (uvicorn,
one worker, a CI user's token) in batches of ``--batch``:

* *spread* (the default policy for compute work): the floor is the perfectly even share (jobs / Groves);
  printed: the largest Grove's share over the mean (target <= 1.2) and the smallest's;
* *bin-pack* (``PLACEMENT_POLICY=compute=binpack``, one env var for the server): the Groves must fill in
  order: no Grove gets work while an earlier-filled one still has room. Printed: Groves used against the
  fewest that hold the jobs (ratio 1.0 is perfect packing), and whether they filled in order.

Needs PostgreSQL and Redis: a scratch database (re-created for each run) and broker keys of its own
(bench/_common.py: ``--database-url``, ``--broker-url``).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import _common as common  # noqa: E402

ENV = {"LOG_LEVEL": "ERROR", "FLAGS_CACHE_TTL_S": "1", "PLACEMENT_FLEET_REFRESH_S": "1"}
GIB = 1024**3
CPU_PER_GROVE = 64000
JOB_CPU = 250


def prepare(target: common.Target) -> None:
    """The scratch database afresh, migrated."""
    target.recreate()


def load(groves: int) -> None:
    from django.utils import timezone

    from apps.groves.models import Grove, GroveCapability, PlacementUnit
    from bench.fleet_rows import grove_rows

    now = timezone.now()
    rows, caps, units, items = [], [], [], []
    for index in range(groves):
        grove_rows(index, native=False, roles=["compute"], platforms=["linux/amd64"], isolation=["container"],
                   kinds=["k8s.job"], report_units=[{
                       "id": "node-0", "cpu_milli": {"allocatable": CPU_PER_GROVE, "free": CPU_PER_GROVE},
                       "memory_bytes": {"allocatable": 256 * GIB, "free": 256 * GIB}, "accelerators": []}],
                   accelerators=[], now=now, into=(rows, caps, units, items))
    Grove.objects.bulk_create(rows)
    GroveCapability.objects.bulk_create(caps)
    PlacementUnit.objects.bulk_create(units)


def run(policy: str, args, target: common.Target) -> list[str]:
    """Place the jobs through the API under ``policy``; the Grove slug of each, in order."""
    import httpx

    from bench.c1m import ci_token, start_web, stop_web

    prepare(target)
    load(args.groves)
    token = ci_token()
    os.environ["PLACEMENT_POLICY"] = f"build=spread,runtime=spread,compute={policy},accelerators=binpack"
    web, url = start_web()
    placed = []
    requirement = {"family": "compute", "resources": {"cpu_milli": JOB_CPU, "memory_bytes": GIB // 4},
                   "compatibility": {"platform": {"allowed": ["linux/amd64"], "sources": ["bench"]},
                                     "artifact_kind": "oci_image", "change_kind": "k8s.job",
                                     "isolation": "container"}}
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Token {token}"}, timeout=600) as client:
            for first in range(0, args.jobs, args.batch):
                items = [{"subject_type": "compute_step", "subject_id": f"{policy}-{i}", "requirement": requirement}
                         for i in range(first, min(first + args.batch, args.jobs))]
                response = client.post("/api/forest/v1/placements/batch", json={"items": items})
                response.raise_for_status()
                placed += [r.get("grove_slug") or r["error"]["code"] for r in response.json()["results"]]
    finally:
        stop_web(web)
    return placed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--groves", type=int, default=10)
    parser.add_argument("--batch", type=int, default=250)
    common.add_options(parser)
    args = parser.parse_args()
    target = common.prepare(args, "spread", env=ENV, migrate=False)
    print(f"uptime: {common.uptime()}", flush=True)
    import django

    django.setup()
    started = time.perf_counter()
    spread = Counter(run("spread", args, target))
    mean = args.jobs / args.groves
    largest, smallest = max(spread.values()), min(spread.values()) if len(spread) == args.groves else 0
    print(f"spread:   {args.jobs} identical jobs on {args.groves} equal Groves; floor (even share) {mean:.1f} each;"
          f" largest {largest} = {largest / mean:.2f}x the mean (target <= 1.20), smallest {smallest} = "
          f"{smallest / mean:.2f}x; Groves used {len(spread)}/{args.groves}")
    order = run("binpack", args, target)
    used = Counter(order)
    per_grove = CPU_PER_GROVE // JOB_CPU
    fewest = -(-args.jobs // per_grove)
    seen, in_order = [], True
    for slug in order:
        if slug not in seen:
            # A new Grove may start only when every Grove already used is full.
            in_order = in_order and all(used_so_far >= per_grove for used_so_far in
                                        (Counter(order[:order.index(slug)])[s] for s in seen))
            seen.append(slug)
    print(f"bin-pack: Groves used {len(used)} against the fewest that hold the jobs {fewest} (ratio "
          f"{fewest / len(used):.2f}; 1.00 is perfect packing); filled in order: {'yes' if in_order else 'NO'}; "
          f"per Grove in fill order: {[used[s] for s in seen]}")
    print(f"(both runs in {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
