"""The Kubernetes Grove end to end: a live Host (Django's live server on PostgreSQL), a real Celery
worker process, and the real ``forest-controller`` as a separate process, enrolled through its own CLI,
talking to a **fake Kubernetes API server over real HTTP** (``agent/tests/kube_fake.py``).

What is faked, and why: no Kubernetes API server can run on this machine. The fake serves the
endpoints the official client uses (server-side apply without managedFields, list/watch with label
selectors and timeouts, delete with propagation but no garbage collector), runs a minimal Job and
Deployment controller, and a test kubelet that schedules each Pod on a fake Node and **runs the
container's command as a local subprocess** (the image is not pulled), then reports Running and
Succeeded/Failed with the real exit code and output as the Pod log. Everything on the Host side is
real: placement, accelerator admission, the wire API, the outbox and the node resume.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from apps.compute.services import compute_job_submit
from apps.dispatch.models import GroveJob
from apps.flags.services import flag_override_set
from apps.groves.models import Grove
from apps.groves.services import enrollment_token_create
from apps.pipelines.models import PipelineNode, PipelineRun
from apps.pipelines.services import pipeline_run_create
from tests.console import console_script
from tests.pipelines.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
CONTROLLER = console_script("forest-controller")
# The fake API server lives with the agent's own tests (they run without Django); import it from there.
sys.path.insert(0, str(ROOT / "agent" / "tests"))
from kube_fake import FakeKube, Kubelet  # noqa: E402

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e, pytest.mark.slow]

IMAGE = "registry.example/forest/python@sha256:" + "e2" * 32
GFD = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
       "nvidia.com/gpu.memory": "81559"}


@pytest.fixture
def cluster():
    fake = FakeKube().start()
    fake.add_node("cpu-1", cpu="8", memory="32Gi")
    fake.add_node("gpu-1", cpu="32", memory="256Gi", gpus=2, labels=GFD)
    kubelet = Kubelet(fake, node="cpu-1").auto()
    yield fake, kubelet
    kubelet.stop()
    fake.stop()


@pytest.fixture
def controller(live_server, cluster, tmp_path):
    """Enroll through ``forest-controller enroll`` and start ``forest-controller run``; returns the Grove."""
    fake, _ = cluster
    kubeconfig = fake.kubeconfig(tmp_path)
    state = tmp_path / "controller-state"
    _, token = enrollment_token_create(roles=["compute", "runtime", "build"], substrate="kubernetes")
    enrolled = subprocess.run([str(CONTROLLER), "enroll", "--host", live_server.url, "--token", token, "--name",
                               "kube-e2e", "--kubeconfig", str(kubeconfig), "--state-dir", str(state)],
                              capture_output=True, text=True, timeout=60)
    assert enrolled.returncode == 0, enrolled.stdout + enrolled.stderr
    log_path = tmp_path / "controller.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([str(CONTROLLER), "run", "--state-dir", str(state), "--kubeconfig", str(kubeconfig),
                                 "--heartbeat-interval", "1", "--poll-wait", "2", "--watch-timeout", "5",
                                 "--pending-grace", "0", "--backoff-max", "2",
                                 # The fake kubelet runs the data containers here: this interpreter.
                                 "--data-command", f"{sys.executable} -m forest_agent.data"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    grove = Grove.objects.get(name="kube-e2e")
    try:
        wait_for(lambda: "k8s.job" in Grove.objects.get(pk=grove.pk).change_kinds, what="the first heartbeat")
        yield Grove.objects.get(pk=grove.pk), lambda: log_path.read_text(errors="replace")[-3000:]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def compute_on():
    flag_override_set(name="host.deploy.forest_compute_jobs", enabled=True, reason="e2e")


def _terminal(run: PipelineRun, name: str, timeout: float = 60) -> GroveJob:
    node = wait_for(lambda: PipelineNode.objects.filter(run=run, node_id=name, current_job__isnull=False).first(),
                    what=f"{name} to be dispatched")
    return wait_for(lambda: GroveJob.objects.filter(pk=node.current_job_id, status__in=[
        "succeeded", "failed", "cancelled", "timed_out"]).first(), timeout=timeout, what=f"{name} to end")


def _step(name: str, code: str, **extra) -> dict:
    return {"name": name, "kind": "container", "image": IMAGE, "command": [sys.executable, "-c", code], **extra}


def test_enrollment_and_inventory_come_from_the_cluster(controller):
    grove, _ = controller
    assert grove.substrate == "kubernetes" and grove.platforms == ["linux/amd64"]
    assert grove.version.startswith("forest-controller ") and grove.isolation_modes == ["container"]
    units = {u.unit_id: u for u in grove.placement_units.all()}
    assert set(units) == {"cpu-1", "gpu-1"} and units["cpu-1"].cpu_milli_allocatable == 8000
    (item,) = grove.accelerators.all()
    assert (item.vendor, item.model, item.memory_bytes) == ("nvidia", "NVIDIA-H100-80GB-HBM3", 81559 * 1024**2)


def test_container_steps_run_through_the_controller_and_resume_their_nodes(controller, cluster, worker, compute_on):
    grove, output = controller
    fake, _ = cluster
    worker()
    job = compute_job_submit(body={"name": "k8s-e2e", "environment": "prod", "grove": grove.slug, "steps": [
        _step("hello", "print('hello from a Kubernetes Job')"),
        _step("after", "import sys; print('second step'); sys.exit(4)")]})
    first = _terminal(job.run, "hello")
    assert (first.status, first.exit_code) == ("succeeded", 0), output()
    assert "hello from a Kubernetes Job" in first.log_tail
    second = _terminal(job.run, "after")
    assert (second.status, second.exit_code) == ("failed", 4), output()
    wait_for(lambda: PipelineRun.objects.get(pk=job.run_id).status == "failed", what="the run to end")
    assert PipelineNode.objects.get(run=job.run, node_id="hello").status == "succeeded"
    jobs = fake.list("Job")
    assert {j["metadata"]["name"] for j in jobs} == {f"fj-{job.pk}-{job.attempt}" for job in (first, second)}
    assert all(j["metadata"]["labels"]["forest.dev/run-id"] == str(job.run_id) for j in jobs)


def test_an_untrusted_step_runs_under_the_restricted_profile(controller, cluster, worker):
    grove, output = controller
    fake, _ = cluster
    worker()
    run = pipeline_run_create(graph={"nodes": [{"id": "untrusted", "kind": "exec", "runtime": "container",
                                                "image": IMAGE, "command": [sys.executable, "-c", "print('sandboxed')"],
                                                "trust": "untrusted", "reuse": "never", "grove": grove.slug}]},
                              kind="compute")
    done = _terminal(run, "untrusted")
    assert done.status == "succeeded", output()
    (job,) = fake.list("Job")
    assert job["metadata"]["namespace"] == "forest-untrusted"
    pod = job["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    namespace = fake.get("Namespace", "", "forest-untrusted")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert fake.get("NetworkPolicy", "forest-untrusted", "forest-untrusted-deny-all") is not None


def test_an_accelerated_step_gets_gpu_limits_runtime_class_and_affinity(controller, cluster, worker, compute_on):
    grove, output = controller
    fake, _ = cluster
    wait_for(lambda: Grove.objects.get(pk=grove.pk).accelerators.exists(), what="the GPU inventory")
    worker()
    job = compute_job_submit(body={"name": "gpu", "environment": "prod", "grove": grove.slug, "steps": [
        _step("inspect", "print('would run nvidia-smi -L here')",
              accelerators={"count": 1, "vendor": "nvidia", "min_memory_bytes": 64 * 1024**3})]})
    done = _terminal(job.run, "inspect")
    assert done.status == "succeeded", output()
    claim = done.payload["accelerator_claim"]
    assert claim == {"unit_id": "gpu-1", "devices": [{"inventory_id": "gpu-1/nvidia", "count": 1}]}
    (k8s_job,) = fake.list("Job")
    pod = k8s_job["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    expressions = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"]
    assert {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]} in expressions
    assert {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["65535"]} in expressions
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"


def test_the_gpu_smoke_pipeline_runs_and_its_evaluation_refuses_a_machine_without_a_gpu(
        controller, cluster, worker, tmp_path):
    """examples/gpu-smoke through the whole path. The fake kubelet puts a recorded `nvidia-smi -L` first
    on PATH for the GPU pod, but this machine has no /proc/driver/nvidia: the evaluation step must
    notice that the tool and the driver disagree and fail the run. Nothing here claims a GPU ran."""
    import importlib.util

    grove, output = controller
    _, kubelet = cluster
    stub = tmp_path / "bin"
    stub.mkdir()
    recorded = ROOT / "agent/tests/recorded/nvidia_smi_L_h100.txt"
    (stub / "nvidia-smi").write_text(f"#!/bin/sh\n[ \"$1\" = -L ] && exec cat {recorded}\nexit 9\n")
    (stub / "nvidia-smi").chmod(0o755)

    def gpu_path(pod: dict) -> dict:
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        return {"PATH": f"{stub}:/usr/bin:/bin"} if "nvidia.com/gpu" in limits else {}

    kubelet.extra_env = gpu_path
    wait_for(lambda: Grove.objects.get(pk=grove.pk).accelerators.exists(), what="the GPU inventory")
    spec = importlib.util.spec_from_file_location("gpu_smoke_graph", ROOT / "examples/gpu-smoke/graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    worker()
    run = pipeline_run_create(graph=module.graph(grove=grove.slug), kind="compute")
    prepare, inspect, evaluate = (_terminal(run, name) for name in ("prepare", "inspect", "evaluate"))
    assert (prepare.status, inspect.status) == ("succeeded", "succeeded"), output()
    assert inspect.outputs["nonce"] == prepare.outputs["nonce"]
    assert inspect.outputs["nvidia_smi"] == [recorded.read_text().strip()] and inspect.outputs["proc_gpus"] == []
    assert evaluate.status == "failed" and evaluate.exit_code == 1
    assert any("but /proc/driver/nvidia/gpus shows 0" in line for line in evaluate.log_tail), evaluate.log_tail
    wait_for(lambda: PipelineRun.objects.get(pk=run.pk).status == "failed", what="the run to fail")
