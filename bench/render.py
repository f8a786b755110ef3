"""forest-controller's renderer and reconcile loop, against floors measured in the same run.

    .venv/bin/python bench/render.py [--objects 3000] [--jobs 1000]

1. Rendering: Grove jobs (a mix of plain, untrusted and NVIDIA jobs) -> Kubernetes objects per second,
   rendering alone and rendering + schema validation (kubernetes-validate, pinned version, plus our
   own checks). Floor: `json.dumps` of the same objects, the cheapest thing any executor must do
   with them. Ratio = floor time / our time (1.0 would be as cheap as serialising).
2. Reconcile: `--jobs` jobs through the real controller (poll -> apply suspended -> claim -> release
   -> watch -> report) against the stub Host and the fake API server over HTTP, Pods completed at
   once by the fake kubelet. Floor: the same number of server-side applies sent straight through the
   official client to the same fake server (one request per job, nothing else).
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "agent" / "tests"))

from forest_agent.kube.cluster import Cluster, api_client_from  # noqa: E402
from forest_agent.kube.controller import Controller, ControllerConfig  # noqa: E402
from forest_agent.kube.render import RenderConfig, render  # noqa: E402
from forest_agent.kube.spec import parse_job  # noqa: E402
from forest_agent.kube.validate import KUBERNETES_VERSION, validate_all  # noqa: E402
from forest_agent.wire.client import WireClient  # noqa: E402
from kube_fake import FakeKube, Kubelet  # noqa: E402
from stub_host import StubHost  # noqa: E402

IMAGE = "registry.example/bench@sha256:" + "be" * 32
CONFIG = RenderConfig(grove_id="00000000-0000-4000-8000-00000000beef")


def wire_job(n: int) -> dict:
    payload: dict = {"command": ["python", "-c", f"print({n})"], "image": IMAGE, "env": {"N": str(n)},
                     "timeout_s": 600, "resources": {"cpu_milli": 250, "memory_bytes": 256 * 1024**2}}
    if n % 3 == 1:
        payload["trust"] = "untrusted"
    if n % 3 == 2:
        payload["accelerators"] = {"count": 1, "vendor": "nvidia", "min_memory_bytes": 40 * 1024**3}
    return {"job_id": f"00000000-0000-4000-8000-{n:012d}", "run_id": "bench-run", "node": f"n{n}",
            "change_kind": "k8s.job", "idempotency_key": f"bench-run:n{n}:1", "payload": payload}


def best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def bench_render(count: int) -> None:
    jobs = [wire_job(n) for n in range(count)]
    objects = [o for job in jobs for o in render(parse_job(job), CONFIG)]
    total = len(objects)

    def render_only() -> None:
        for job in jobs:
            render(parse_job(job), CONFIG)

    def render_and_validate() -> None:
        for job in jobs:
            validate_all(render(parse_job(job), CONFIG))

    def floor() -> None:
        for obj in objects:
            json.dumps(obj)

    t_floor, t_render, t_valid = best(floor), best(render_only), best(render_and_validate)
    print(f"rendering: {count} jobs -> {total} objects (Kubernetes {KUBERNETES_VERSION} schemas)")
    print(f"  floor json.dumps           {total / t_floor:12.0f} objects/s")
    print(f"  render                     {total / t_render:12.0f} objects/s   ratio {t_floor / t_render:.3f}")
    print(f"  render + validate          {total / t_valid:12.0f} objects/s   ratio {t_floor / t_valid:.4f}")


def bench_reconcile(count: int) -> None:
    logging.getLogger("forest_agent").setLevel(logging.ERROR)
    logging.getLogger("httpx").setLevel(logging.ERROR)
    fake = FakeKube().start()
    fake.add_node("node-1", cpu="1000", memory="4096Gi", gpus=64,
                  labels={"nvidia.com/gpu.present": "true", "nvidia.com/gpu.memory": "81559"})
    host = StubHost().start()
    grove_id, credential = host.add_grove()
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = str(fake.kubeconfig(Path(tmp)))
        # Floor: one server-side apply per job, straight through the client.
        cluster = Cluster(api_client_from(kubeconfig=kubeconfig))
        floor_objects = [render(parse_job(wire_job(n)), RenderConfig(grove_id="floor", namespace="floor"),
                                suspend=True)[-1] for n in range(count)]
        started = time.perf_counter()
        for obj in floor_objects:
            cluster.apply(obj)
        t_floor = time.perf_counter() - started

        kubelet = Kubelet(fake).auto(run_commands=False)
        controller = Controller(
            wire=WireClient(host.url, credential=credential, grove_id=grove_id),
            cluster=Cluster(api_client_from(kubeconfig=kubeconfig)), grove_id=grove_id,
            config=ControllerConfig(heartbeat_interval_s=30, poll_wait_s=1, watch_timeout_s=30, resync_s=300,
                                    pending_grace_s=0))
        threads = controller.start()
        controller.recovered.wait(10)
        started = time.perf_counter()
        for n in range(count):
            host.add_job(wire_job(n))
        host.wait_for(lambda: len(host.terminal) >= count, timeout=1800, what="every terminal report")
        t_ours = time.perf_counter() - started
        reports_per_job = [len(reports) for reports in host.reports.values()]
        controller.shutdown(threads)
        kubelet.stop()
    fake.stop()
    host.stop()
    duplicates = sum(1 for reports in host.reports.values() if sum(r["state"] != "running" for r in reports) > 1)
    print(f"reconcile: {count} jobs through forest-controller against the fake API server")
    print(f"  floor: client apply only   {count / t_floor:12.1f} jobs/s")
    print(f"  controller, end to end     {count / t_ours:12.1f} jobs/s   ratio {t_floor / t_ours:.3f}"
          f"   (reports per job: median {statistics.median(reports_per_job):.0f}; duplicate terminal reports: "
          f"{duplicates})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=3000, help="jobs to render (default 3000)")
    parser.add_argument("--jobs", type=int, default=1000, help="jobs to reconcile (default 1000)")
    args = parser.parse_args()
    bench_render(args.objects)
    bench_reconcile(args.jobs)


if __name__ == "__main__":
    main()
