"""Pure parts of forest-controller: Nodes + Pods -> placement units and GFD accelerator items, and
Kubernetes status -> the Grove report. No cluster: plain JSON objects as the API server sends them."""

from __future__ import annotations

from typing import Any

from forest_agent.kube import inventory, observe

GFD = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.memory": "81920",
}


def node(
    name: str,
    *,
    gpus: int = 0,
    labels: dict[str, str] | None = None,
    ready: bool = True,
    cordoned: bool = False,
) -> dict[str, Any]:
    allocatable = {"cpu": "7800m", "memory": "30Gi", "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64", **(labels or {})},
        },
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(
    node_name: str, *, cpu: str = "500m", memory: str = "1Gi", gpus: int = 0, phase: str = "Running"
) -> dict:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "spec": {
            "nodeName": node_name,
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": limits}}
            ],
        },
        "status": {"phase": phase},
    }


def test_units_subtract_bound_pods_and_gpu_items_come_from_gfd() -> None:
    report = inventory.capacity(
        [node("cpu-1"), node("gpu-1", gpus=4, labels=GFD)],
        [
            pod("gpu-1", gpus=3),
            pod("gpu-1", cpu="1", phase="Succeeded"),
            pod("cpu-1", cpu="1800m"),
            {"spec": {}, "status": {"phase": "Pending"}},
        ],  # unscheduled: counts nowhere
    )
    units = {u["id"]: u for u in report["placement_units"]}
    assert units["cpu-1"]["cpu_milli"] == {"allocatable": 7800, "free": 6000}
    assert units["gpu-1"]["memory_bytes"] == {"allocatable": 30 * 1024**3, "free": 29 * 1024**3}
    assert units["gpu-1"]["accelerators"] == [{"inventory_id": "gpu-1/nvidia", "allocatable": 4, "free": 1}]
    (item,) = report["accelerators"]
    assert item == {
        "id": "gpu-1/nvidia",
        "kind": "gpu",
        "vendor": "nvidia",
        "model": "NVIDIA-A100-SXM4-80GB",
        "apis": ["cuda"],
        "memory_bytes": 81920 * 1024**2,
        "memory_kind": "dedicated",
        "memory_enforced": True,
        "share_mode": "exclusive",
    }


def test_sharing_and_mig_labels_set_the_share_mode() -> None:
    shared = inventory.gpu_item(
        node(
            "g",
            gpus=8,
            labels={**GFD, "nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"},
        )
    )
    assert shared is not None and (shared.share_mode, shared.memory_enforced) == ("time_sliced", False)
    mig = inventory.gpu_item(
        node(
            "m",
            gpus=7,
            labels={
                "nvidia.com/gpu.present": "true",
                "nvidia.com/mig.strategy": "single",
                "nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb",
                "nvidia.com/gpu.memory": "4864",
            },
        )
    )
    assert mig is not None and (mig.share_mode, mig.memory_bytes) == ("exclusive", 4864 * 1024**2)
    assert mig.model.endswith("MIG-1g.5gb")


def test_no_gpu_nodes_report_no_accelerators_and_unready_nodes_no_free_capacity() -> None:
    report = inventory.capacity([node("a"), node("b", ready=False), node("c", cordoned=True)], [])
    assert report["accelerators"] == []
    units = {u["id"]: u for u in report["placement_units"]}
    assert units["a"]["cpu_milli"]["free"] == 7800
    assert units["b"]["cpu_milli"]["free"] == 0 and units["c"]["memory_bytes"]["free"] == 0
    assert inventory.node_platform(node("a")) == "linux/arm64"


def _job(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {"status": {"conditions": list(conditions)}}


def _terminated_pod(code: int, reason: str = "Error") -> dict[str, Any]:
    return {
        "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"state": {"terminated": {"exitCode": code, "reason": reason}}}],
        },
    }


def test_job_status_translation() -> None:
    complete = {"type": "Complete", "status": "True"}
    assert observe.observe_job(_job(complete), []).state == "succeeded"
    deadline = {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "too long"}
    seen = observe.observe_job(_job(deadline), [_terminated_pod(143)])
    assert (seen.state, seen.reason, seen.exit_code) == ("timed_out", "timeout", 143)
    failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
    assert observe.observe_job(_job(failed), [_terminated_pod(2)]).exit_code == 2
    assert observe.observe_job(_job(failed), [_terminated_pod(137, "OOMKilled")]).reason == "oom_killed"
    assert observe.observe_job(_job(), []).state == "pending"
    body = observe.report_body(
        observe.Observation("pending", reason="unschedulable", message="0/3 nodes"), ["x"]
    )
    assert body == {
        "state": "failed",
        "reason": "unschedulable",
        "log_tail": ["x", "[forest-controller] 0/3 nodes"],
    }


def test_deployment_status_translation() -> None:
    stalled = {
        "metadata": {"generation": 2},
        "spec": {"replicas": 1},
        "status": {
            "conditions": [
                {
                    "type": "Progressing",
                    "status": "False",
                    "reason": "ProgressDeadlineExceeded",
                    "message": "slow",
                }
            ]
        },
    }
    assert observe.observe_deployment(stalled, []).reason == "progress_deadline_exceeded"
    old_generation = {
        "metadata": {"generation": 3},
        "spec": {"replicas": 1},
        "status": {
            "observedGeneration": 2,
            "updatedReplicas": 1,
            "availableReplicas": 1,
            "conditions": [{"type": "Available", "status": "True"}],
        },
    }
    assert observe.observe_deployment(old_generation, []).state == "pending"
    old_generation["status"]["observedGeneration"] = 3
    assert observe.observe_deployment(old_generation, []).state == "succeeded"
