"""forest-controller's reconcile loop against a fake Kubernetes API server over real HTTP
(`kube_fake.py`: what is faked, exactly, is in its docstring: no managedFields, no garbage
collector, a minimal Job/Deployment controller, a test kubelet) and the stub Host (`stub_host.py`).

The official `kubernetes` client does the talking, from a kubeconfig file, so its real request
serialisation and watch streaming run. Scenarios: apply -> watch -> success; failure with an exit
code; OOMKilled; unschedulable and image-pull problems (the report carries the reason and the
scheduler's message); cancellation (Job deleted with propagation); controller restart mid-job and
between claim and release (no duplicate Job, one report); a restart after the report (nothing is
reported again); Host down then back (the report arrives once); an expired watch (410) re-lists;
Deployments roll out; bad payloads are refused.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_fake import FakeKube, Kubelet
from stub_host import StubHost

from forest_agent.errors import IllegalTransition
from forest_agent.kube import names
from forest_agent.kube.cluster import Cluster, api_client_from
from forest_agent.kube.controller import Controller, ControllerConfig
from forest_agent.kube.job_states import TrackedState
from forest_agent.kube.render import RenderConfig, render
from forest_agent.kube.spec import parse_job
from forest_agent.kube.tracked import TrackedJobs
from forest_agent.kube.validate import validate_all
from forest_agent.kube.workqueue import WorkQueue
from forest_agent.wire.client import WireClient

IMAGE = "registry.example/step@sha256:" + "cd" * 32


def k8s_job(n: int, *, change_kind: str = "k8s.job", **payload: Any) -> dict[str, Any]:
    job_id = f"00000000-0000-4000-8000-{n:012d}"
    body = {
        "command": [sys.executable, "-c", "print('hi')"],
        "image": IMAGE,
        "env": {},
        "timeout_s": 120,
        "resources": {"cpu_milli": 500, "memory_bytes": 256 * 1024**2},
    }
    body.update(payload)
    return {
        "job_id": job_id,
        "run_id": "run-1",
        "node": f"step{n}",
        "change_kind": change_kind,
        "idempotency_key": f"run-1:step{n}:1",
        "payload": body,
    }


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    server = FakeKube().start()
    server.add_node("node-1")
    yield server
    server.stop()


@pytest.fixture
def kubelet(fake: FakeKube) -> Iterator[Kubelet]:
    k = Kubelet(fake)
    yield k
    k.stop()


class Harness:
    def __init__(self, fake: FakeKube, host: StubHost, tmp_path: Path) -> None:
        self.fake, self.host = fake, host
        self.grove_id, self.credential = host.add_grove()
        self.kubeconfig = fake.kubeconfig(tmp_path)
        self.running: list[tuple[Controller, list[threading.Thread]]] = []

    def cluster(self) -> Cluster:
        return Cluster(api_client_from(kubeconfig=str(self.kubeconfig)))

    def start(self, **overrides: Any) -> Controller:
        settings = {
            "heartbeat_interval_s": 1.0,
            "poll_wait_s": 1,
            "watch_timeout_s": 2,
            "resync_s": 30.0,
            "pending_grace_s": 0.0,
            "backoff_initial_s": 0.2,
            "backoff_max_s": 1.0,
            **overrides,
        }
        controller = Controller(
            wire=WireClient(self.host.url, credential=self.credential, grove_id=self.grove_id),
            cluster=self.cluster(),
            grove_id=self.grove_id,
            config=ControllerConfig(**settings),
        )
        self.running.append((controller, controller.start()))
        return controller

    def stop(self, controller: Controller) -> None:
        for c, threads in self.running:
            if c is controller:
                c.shutdown(threads)
                for thread in threads:  # watches end at their 2 s server timeout
                    thread.join(10)

    def stop_all(self) -> None:
        for c, _ in self.running:
            c.stop_event.set()

    def job_objects(self) -> list[dict[str, Any]]:
        return self.fake.list("Job", f"{names.LABEL_GROVE}={self.grove_id}")


@pytest.fixture
def harness(fake: FakeKube, host: StubHost, tmp_path: Path) -> Iterator[Harness]:
    h = Harness(fake, host, tmp_path)
    yield h
    h.stop_all()


def _pod_of(kubelet: Kubelet, job: dict[str, Any]) -> dict[str, Any]:
    return kubelet.wait_pod(f"{names.LABEL_JOB_ID}={job['job_id']}", what=f"the pod of {job['node']}")


def _reports(host: StubHost, job: dict[str, Any], state: str | None = None) -> list[dict[str, Any]]:
    return [r for r in host.reports.get(job["job_id"], []) if state is None or r["state"] == state]


def test_apply_watch_and_success_report(harness: Harness, kubelet: Kubelet, fake: FakeKube) -> None:
    harness.start()
    job = k8s_job(1)
    harness.host.add_job(job)
    pod = _pod_of(kubelet, job)
    applies = [
        r for r in fake.requests_of("PATCH", "Job") if r.content_type.startswith("application/apply-patch")
    ]
    assert applies and all(
        r.query.get("fieldManager") == names.FIELD_MANAGER and r.query.get("force") == "true" for r in applies
    )
    assert applies[0].body["spec"]["suspend"] is True  # applied before the claim, released after it
    assert job["job_id"] in harness.host.claimed
    kubelet.running(pod)
    harness.host.wait_for(lambda: _reports(harness.host, job, "running"), what="the running report")
    kubelet.exit(pod, 0, log="step output line\nall done", message='{"accuracy": 0.93}')
    report = harness.host.terminal_report(job["job_id"])
    assert report["state"] == "succeeded" and report["exit_code"] == 0
    assert report["outputs"] == {"accuracy": 0.93}  # the termination message, a JSON object
    assert report["log_tail"][-1] == "all done"
    (obj,) = harness.job_objects()
    harness.host.wait_for(
        lambda: (
            fake.get("Job", "forest", obj["metadata"]["name"])["metadata"]
            .get("annotations", {})
            .get(names.ANNOTATION_REPORTED)
        ),
        what="the reported mark",
    )
    watches = [r for r in fake.requests_of("GET") if r.query.get("watch") == "true"]
    # Jobs and Deployments are watched only in the work namespaces (what a namespaced Role allows);
    # Pods cluster-wide (read-only, the chart's ClusterRole), as the capacity report reads them anyway.
    assert {
        "/api/v1/pods",
        *(f"/apis/{group}/namespaces/{ns}/{plural}" for ns in ("forest", "forest-untrusted")
          for group, plural in (("batch/v1", "jobs"), ("apps/v1", "deployments"))),
    } == {r.path for r in watches}
    assert all(r.query.get("timeoutSeconds") == "2" and r.query.get("labelSelector") for r in watches)


def test_failure_reports_the_exit_code(harness: Harness, kubelet: Kubelet) -> None:
    harness.start()
    job = k8s_job(2)
    harness.host.add_job(job)
    pod = _pod_of(kubelet, job)
    kubelet.running(pod)
    kubelet.exit(pod, 3, log="Traceback: boom")
    report = harness.host.terminal_report(job["job_id"])
    assert (report["state"], report["exit_code"]) == ("failed", 3)
    assert "Traceback: boom" in report["log_tail"]


def test_oom_killed_is_its_own_reason(harness: Harness, kubelet: Kubelet) -> None:
    harness.start()
    job = k8s_job(3)
    harness.host.add_job(job)
    pod = _pod_of(kubelet, job)
    kubelet.running(pod)
    kubelet.exit(pod, 137, reason="OOMKilled")
    report = harness.host.terminal_report(job["job_id"])
    assert (report["state"], report["exit_code"], report["reason"]) == ("failed", 137, "oom_killed")


def test_unschedulable_fails_with_the_schedulers_message(
    harness: Harness, kubelet: Kubelet, fake: FakeKube
) -> None:
    harness.start()
    job = k8s_job(4, accelerators={"count": 8, "vendor": "nvidia"})
    harness.host.add_job(job)
    pod = _pod_of(kubelet, job)
    message = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    kubelet.unschedulable(pod, message)
    report = harness.host.terminal_report(job["job_id"])
    assert (report["state"], report["reason"]) == ("failed", "unschedulable")
    assert any(message in line for line in report["log_tail"])
    harness.host.wait_for(lambda: not harness.job_objects(), what="the Job to be deleted")
    assert not fake.list("Pod", f"{names.LABEL_JOB_ID}={job['job_id']}")


def test_a_pending_problem_waits_for_its_grace(harness: Harness, kubelet: Kubelet) -> None:
    harness.start(pending_grace_s=3600.0)
    job = k8s_job(5)
    harness.host.add_job(job)
    pod = _pod_of(kubelet, job)
    kubelet.image_pull_backoff(pod)
    harness.host.wait_for(
        lambda: _reports(harness.host, job) == [] and job["job_id"] in harness.host.claimed, what="the claim"
    )
    pod = kubelet.running(pod)  # the registry came back within the grace
    assert pod is not None
    kubelet.exit(pod, 0)
    assert harness.host.terminal_report(job["job_id"])["state"] == "succeeded"


def test_image_pull_failure_after_the_grace(harness: Harness, kubelet: Kubelet) -> None:
    harness.start()
    job = k8s_job(6)
    harness.host.add_job(job)
    kubelet.image_pull_backoff(_pod_of(kubelet, job))
    report = harness.host.terminal_report(job["job_id"])
    assert (report["state"], report["reason"]) == ("failed", "image_pull_failed")
    assert any("ImagePullBackOff" in line for line in report["log_tail"])


def test_cancellation_deletes_the_job_with_propagation(
    harness: Harness, kubelet: Kubelet, fake: FakeKube
) -> None:
    harness.start()
    job = k8s_job(7)
    harness.host.add_job(job)
    kubelet.running(_pod_of(kubelet, job))
    harness.host.wait_for(lambda: _reports(harness.host, job, "running"), what="the running report")
    harness.host.cancel(job["job_id"])
    report = harness.host.terminal_report(job["job_id"])
    assert (report["state"], report["reason"]) == ("cancelled", "cancelled")
    (delete,) = fake.requests_of("DELETE", "Job")
    assert delete.query.get("propagationPolicy") == "Background"
    assert not harness.job_objects() and not fake.list("Pod", f"{names.LABEL_JOB_ID}={job['job_id']}")


def test_restart_mid_job_resumes_without_a_second_job(
    harness: Harness, kubelet: Kubelet, fake: FakeKube
) -> None:
    first = harness.start()
    job = k8s_job(8)
    harness.host.add_job(job)
    pod = _pod_of(kubelet, job)
    kubelet.running(pod)
    harness.host.wait_for(lambda: _reports(harness.host, job, "running"), what="the running report")
    harness.stop(first)
    second = harness.start()
    second.recovered.wait(10)
    assert job["job_id"] in second.tracked
    kubelet.exit(pod, 0)
    assert harness.host.terminal_report(job["job_id"])["state"] == "succeeded"
    assert len(harness.job_objects()) == 1 and len(fake.list("Pod")) == 1
    harness.host.wait_for(lambda: not second.tracked, what="the job to be forgotten")
    assert len(_reports(harness.host, job, "succeeded")) == 1


def test_restart_between_claim_and_release(harness: Harness, kubelet: Kubelet, fake: FakeKube) -> None:
    """The controller died after the claim and before releasing the suspended Job."""
    job = k8s_job(9)
    harness.host.add_job(job)
    harness.host.claimed.add(job["job_id"])  # claimed by the controller that died
    config = RenderConfig(grove_id=harness.grove_id)
    cluster = harness.cluster()
    for obj in validate_all(render(parse_job(job), config, suspend=True)):
        cluster.apply(obj)
    assert not fake.list("Pod")  # suspended: nothing runs yet
    harness.start()
    pod = _pod_of(kubelet, job)  # re-claimed (409 already_claimed: ours) and released
    kubelet.running(pod)
    kubelet.exit(pod, 0)
    assert harness.host.terminal_report(job["job_id"])["state"] == "succeeded"
    assert len(harness.job_objects()) == 1


def test_a_restart_after_the_report_reports_nothing_again(harness: Harness, kubelet: Kubelet) -> None:
    """The controller reports a job's outcome and marks it; a new controller over the same cluster and
    Host (a restart) sends no report of that job at all, neither its outcome nor `running`."""
    first = harness.start(workers=1)
    job = k8s_job(15)
    harness.host.add_job(job)
    pod = _pod_of(kubelet, job)
    kubelet.running(pod)
    harness.host.wait_for(lambda: _reports(harness.host, job, "running"), what="the running report")
    kubelet.exit(pod, 0)
    assert harness.host.terminal_report(job["job_id"])["state"] == "succeeded"
    harness.host.wait_for(lambda: not first.tracked, what="the job to be marked reported and forgotten")
    reported = [r["state"] for r in _reports(harness.host, job)]
    assert reported == ["running", "succeeded"]
    harness.stop(first)

    second = harness.start(workers=1)
    assert second.recovered.wait(10)
    # One worker serves the queue in due order, and the re-list queued what it found before the first
    # poll: once a job Host offers now has been reconciled to its end, so has anything the re-list found.
    later = k8s_job(16)
    harness.host.add_job(later)
    later_pod = _pod_of(kubelet, later)
    kubelet.running(later_pod)
    kubelet.exit(later_pod, 0)
    assert harness.host.terminal_report(later["job_id"])["state"] == "succeeded"
    harness.host.wait_for(lambda: not second.tracked, what="the later job to be forgotten")
    assert [r["state"] for r in _reports(harness.host, job)] == reported


def test_host_down_then_back_delivers_the_report_once(
    harness: Harness, kubelet: Kubelet, caplog: pytest.LogCaptureFixture
) -> None:
    controller = harness.start()
    job = k8s_job(10)
    harness.host.add_job(job)
    pod = _pod_of(kubelet, job)
    kubelet.running(pod)
    harness.host.wait_for(lambda: _reports(harness.host, job, "running"), what="the running report")
    harness.host.down = True
    kubelet.exit(pod, 0)
    harness.host.wait_for(lambda: "terminal report failed" in caplog.text, what="a failed delivery")
    assert not _reports(harness.host, job, "succeeded")
    harness.host.down = False
    harness.host.terminal_report(job["job_id"])
    harness.host.wait_for(lambda: not controller.tracked, what="the job to be forgotten")
    assert len(_reports(harness.host, job, "succeeded")) == 1


def test_an_expired_watch_relists(
    harness: Harness, kubelet: Kubelet, fake: FakeKube, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "forest_agent")
    harness.start(resync_s=3600.0)
    job = k8s_job(11)
    harness.host.add_job(job)
    pod = _pod_of(kubelet, job)
    fake.compact()  # the next watch from an old resourceVersion gets 410 Gone
    kubelet.running(pod)
    harness.host.wait_for(lambda: "history expired; re-listing" in caplog.text, timeout=15, what="a re-list")
    kubelet.exit(pod, 0)
    assert harness.host.terminal_report(job["job_id"])["state"] == "succeeded"


def test_deployment_rolls_out_and_reports_success(harness: Harness, kubelet: Kubelet, fake: FakeKube) -> None:
    harness.start()
    job = k8s_job(12, change_kind="k8s.deployment", command=[], ports=[{"name": "http", "port": 8080}])
    job["node"] = job["payload"]["node"] = "web"
    harness.host.add_job(job)
    pod = _pod_of(kubelet, job)
    service = harness.host.wait_for(lambda: fake.get("Service", "forest", "web"), what="the Service")
    assert service["spec"]["ports"][0]["port"] == 8080
    kubelet.running(pod)
    report = harness.host.terminal_report(job["job_id"])
    assert report["state"] == "succeeded"
    # The controller marks the object after Host has taken the report: wait for that write, not a moment.
    reported = harness.host.wait_for(
        lambda: (fake.get("Deployment", "forest", "web")["metadata"].get("annotations") or {}).get(
            names.ANNOTATION_REPORTED
        ),
        what="the Deployment marked reported",
    )
    assert reported == f"{job['job_id']} succeeded"


def test_bad_payloads_are_refused_without_applying(harness: Harness, fake: FakeKube) -> None:
    harness.start()
    no_image = k8s_job(13, image=None)
    native = k8s_job(14, change_kind="native.job")
    harness.host.add_job(no_image)
    harness.host.add_job(native)
    assert harness.host.terminal_report(no_image["job_id"])["reason"] == "payload_invalid"
    assert harness.host.terminal_report(native["job_id"])["reason"] == "unsupported_change_kind"
    assert not fake.requests_of("PATCH")


def test_heartbeat_reports_nodes_and_gfd_inventory(harness: Harness, fake: FakeKube) -> None:
    fake.add_node(
        "gpu-1",
        cpu="32",
        memory="256Gi",
        gpus=4,
        labels={
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.memory": "81559",
        },
    )
    harness.start()
    beat = harness.host.wait_for(
        lambda: harness.host.heartbeats and harness.host.heartbeats[-1], what="a heartbeat"
    )
    assert beat["version"].startswith("forest-controller ") and beat["isolation"] == ["container"]
    assert set(beat["change_kinds"]) == {"k8s.job", "k8s.build_job", "k8s.deployment"}
    units = {u["id"]: u for u in beat["capacity"]["placement_units"]}
    assert units["gpu-1"]["accelerators"] == [{"inventory_id": "gpu-1/nvidia", "allocatable": 4, "free": 4}]
    assert units["node-1"]["accelerators"] == []
    (item,) = beat["capacity"]["accelerators"]
    assert item["model"] == "NVIDIA-H100-80GB-HBM3" and item["memory_bytes"] == 81559 * 1024**2


def test_every_watch_has_a_server_and_a_client_timeout(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server ends each watch after `timeoutSeconds`; the client gives up reading 10 s after that,
    so a silent connection can never hang a watch thread."""
    from kubernetes import watch

    seen: list[dict[str, Any]] = []
    real_stream = watch.Watch.stream

    def recording_stream(self: watch.Watch, func: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(dict(kwargs))
        return real_stream(self, func, *args, **kwargs)

    monkeypatch.setattr(watch.Watch, "stream", recording_stream)
    stopped = threading.Event()
    events = list(
        harness.cluster().watch(
            "Job", label_selector="a=b", resource_version="0", timeout_s=1, stopper=stopped.is_set
        )
    )
    assert events == []
    (kwargs,) = seen
    assert kwargs["timeout_seconds"] == 1 and kwargs["_request_timeout"] == (5.0, 11)


def test_the_work_queue_coalesces_and_never_hands_one_job_to_two_workers() -> None:
    stop = threading.Event()
    queue = WorkQueue(stop)
    queue.add("a")
    queue.add("b", delay_s=0.001)
    queue.add("a")  # coalesced with the first
    assert queue.get() == "a"
    assert queue.get() == "b"
    queue.add("a")  # queued again while a worker still holds it
    taken: list[str | None] = []
    worker = threading.Thread(target=lambda: taken.append(queue.get()))
    worker.start()
    worker.join(1.5)
    assert worker.is_alive() and taken == []  # "a" is due, but held: nobody else gets it
    queue.done("a")
    worker.join(10)
    assert taken == ["a"]
    stop.set()
    queue.wake_all()
    assert queue.get() is None  # stopped: a worker returns


def test_the_tracked_table_moves_a_job_only_along_its_lifecycle() -> None:
    """The first outcome decided wins; a job decided meanwhile is not moved back by a slower step; a
    final state forgets the job; a cancellation of a job nobody tracks is tracked for its report."""
    table = TrackedJobs()
    tracked = table.new("j1", "Job", "fj-j1-1", "forest", TrackedState.RECEIVED)
    assert table.add(tracked) and not table.add(table.new("j1", "Job", "x", "forest", TrackedState.RECEIVED))
    cancelled = {"state": "cancelled", "reason": "cancelled", "log_tail": []}
    assert table.decide_cancelled("j1", cancelled) is tracked  # Host cancelled it while a worker claims
    assert not table.advance(tracked, TrackedState.CLAIMED)  # the claim's answer comes too late to count
    assert not table.decide(tracked, {"state": "succeeded"})
    assert (tracked.state, tracked.outcome) == (TrackedState.REPORTING, cancelled)
    with pytest.raises(IllegalTransition):
        tracked.lifecycle.transition(TrackedState.RUNNING)
    assert table.advance(tracked, TrackedState.REPORTED) and "j1" not in table
    unknown = table.decide_cancelled("j2", cancelled)
    assert (unknown.state, unknown.name, "j2" in table) == (TrackedState.REPORTING, "", True)
