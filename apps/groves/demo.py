"""The demo estate ``make run`` loads: Groves of each substrate, platform mix and accelerator kind.

The capacity reports go through ``grove_heartbeat_record`` exactly as an agent's would, but they are
*simulated*: nothing runs these Groves' jobs. So they say so: each is marked ``simulated`` (a badge on every
page that shows a Grove) and reports the version ``SIMULATED_VERSION``; and since nothing polls for their
work they are never ready (docs/decisions.md "Grove readiness"), so unpinned work never lands on them. Work
pinned to one is signalled ``unclaimed`` and ended with that code by the sweep.
"""
from __future__ import annotations

from apps.groves import services
from apps.groves.models import Grove

GIB = 1024**3
SIMULATED_VERSION = "forest-demo simulator (simulated: runs nothing)"


def _unit(unit_id: str, cpu: int, mem_gib: int, accelerators: list[dict] | None = None) -> dict:
    return {"id": unit_id, "cpu_milli": {"allocatable": cpu, "free": cpu},
            "memory_bytes": {"allocatable": mem_gib * GIB, "free": mem_gib * GIB},
            "accelerators": accelerators or []}


DEMO_GROVES = [
    {
        "slug": "k8s-build-1", "name": "Build cluster (amd64 + arm64)", "substrate": "kubernetes",
        "roles": ["build"], "platforms": ["linux/amd64", "linux/arm64"],
        "heartbeat": {"version": SIMULATED_VERSION, "change_kinds": ["k8s.build_job", "k8s.job"],
                      "isolation": ["container"],
                      "capacity": {"placement_units": [_unit("node-a", 16000, 64), _unit("node-b", 16000, 64),
                                                       _unit("node-c", 8000, 32)], "accelerators": []}},
    },
    {
        "slug": "k8s-runtime-arm", "name": "Runtime cluster (arm64)", "substrate": "kubernetes",
        "roles": ["runtime"], "platforms": ["linux/arm64"],
        "heartbeat": {"version": SIMULATED_VERSION, "change_kinds": ["k8s.deployment", "k8s.job"],
                      "isolation": ["container"],
                      "capacity": {"placement_units": [_unit("node-1", 4000, 16), _unit("node-2", 4000, 16)],
                                   "accelerators": []}},
    },
    {
        "slug": "k8s-gpu-1", "name": "GPU cluster (NVIDIA A100)", "substrate": "kubernetes",
        "roles": ["compute"], "platforms": ["linux/amd64"],
        "heartbeat": {
            "version": SIMULATED_VERSION, "change_kinds": ["k8s.job"], "isolation": ["container"],
            "capacity": {
                "placement_units": [_unit("gpu-node-1", 32000, 256, [
                    {"inventory_id": "gpu-node-1/nvidia-a100-80gb", "allocatable": 4, "free": 4}])],
                "accelerators": [{"id": "gpu-node-1/nvidia-a100-80gb", "kind": "gpu", "vendor": "nvidia",
                                  "model": "NVIDIA A100-SXM4-80GB", "apis": ["cuda"], "memory_bytes": 80 * GIB,
                                  "memory_kind": "dedicated", "memory_enforced": True,
                                  "share_mode": "exclusive"}]}},
    },
    {
        "slug": "gpu-box-1", "name": "Linux box with 2 x H100", "substrate": "native",
        "roles": ["compute"], "platforms": ["linux/amd64"],
        "heartbeat": {
            "version": SIMULATED_VERSION, "change_kinds": ["native.job"], "isolation": ["host_process"],
            "capacity": {
                "placement_units": [_unit("machine", 64000, 512, [
                    {"inventory_id": "GPU-0", "allocatable": 1, "free": 1},
                    {"inventory_id": "GPU-1", "allocatable": 1, "free": 1}])],
                "accelerators": [
                    {"id": f"GPU-{i}", "kind": "gpu", "vendor": "nvidia", "model": "NVIDIA H100 80GB HBM3",
                     "apis": ["cuda"], "memory_bytes": 80 * GIB, "memory_kind": "dedicated",
                     "memory_enforced": True, "share_mode": "exclusive"} for i in range(2)]}},
    },
    {
        "slug": "mac-studio-1", "name": "Mac Studio (M2 Ultra)", "substrate": "native",
        "roles": ["build", "compute"], "platforms": ["darwin/arm64"],
        "heartbeat": {
            "version": SIMULATED_VERSION, "change_kinds": ["native.job", "native.workload"],
            "isolation": ["host_process"],
            "capacity": {
                "placement_units": [_unit("machine", 24000, 192, [
                    {"inventory_id": "apple-gpu-0", "allocatable": 1, "free": 1}])],
                "accelerators": [{"id": "apple-gpu-0", "kind": "gpu", "vendor": "apple", "model": "Apple M2 Ultra",
                                  "apis": ["metal"], "memory_bytes": 144 * GIB, "memory_kind": "unified",
                                  "memory_enforced": False, "share_mode": "cooperative"}]}},
    },
]


def demo_load() -> list[Grove]:
    """Create (or refresh) the demo Groves and report their capacity. Idempotent."""
    groves = []
    for spec in DEMO_GROVES:
        grove = Grove.objects.filter(slug=spec["slug"]).first() or services.grove_create(
            name=spec["name"], slug=spec["slug"], substrate=spec["substrate"], roles=spec["roles"],
            platforms=spec["platforms"], simulated=True,
        )
        if not grove.simulated:  # a demo Grove loaded before Groves were marked
            Grove.objects.filter(pk=grove.pk).update(simulated=True)
            grove.simulated = True
        groves.append(services.grove_heartbeat_record(grove=grove, body=spec["heartbeat"]))
    return groves


def demo_heartbeat() -> int:
    """Keep the simulated demo Groves fresh (they have no agent of their own)."""
    count = 0
    for spec in DEMO_GROVES:
        grove = Grove.objects.filter(slug=spec["slug"]).first()
        if grove is not None:
            services.grove_heartbeat_record(grove=grove, body=spec["heartbeat"])
            count += 1
    return count
