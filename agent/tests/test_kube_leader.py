"""Leader election of forest-controller (kube/leader.py) against the fake API server over real HTTP.

Two layers:
* the election rules, one round at a time, each candidate on its own injected monotonic clock (so "the
  lease expired" is a clock step, not a sleep): take an empty Lease, wait while the holder's record is
  fresh, take it once it has not changed for the lease duration, lose at once on seeing another holder,
  stop counting as leader at the renew deadline, lose a race on a stale resourceVersion, hand over on
  release;
* two real `forest-controller run --leader-elect --identity-secret` processes against the fake API server
  and the stub Host: one leads and enrolls once, the other makes no request but the Lease's; the leader is
  SIGKILLed (it cannot release) and the other takes over and runs the next job; every Job is applied
  once and every job reported once.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_fake import FakeKube, Kubelet
from stub_host import StubHost
from test_kube_controller import k8s_job

from forest_agent.kube import names
from forest_agent.kube.cluster import Cluster, api_client_from
from forest_agent.kube.controller import Controller, ControllerConfig
from forest_agent.kube.leader import EXIT_LEADERSHIP_LOST, LeaderElector, LeaseSettings, run_as_leader
from forest_agent.wire.client import WireClient
from forest_agent.wire.messages import Changes

NAMESPACE = "forest-system"
LEASE = "forest-controller"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    server = FakeKube().start()
    server.add_node("node-1")
    yield server
    server.stop()


def elector(
    fake: FakeKube, tmp_path: Path, identity: str, clock: Clock | None, **settings: Any
) -> LeaderElector:
    kubeconfig = fake.kubeconfig(tmp_path / identity, token=f"token-{identity}")
    return LeaderElector(
        api_client=api_client_from(kubeconfig=str(kubeconfig)),
        settings=LeaseSettings(name=LEASE, namespace=NAMESPACE, identity=identity, **{
            "lease_duration_s": 15, "renew_deadline_s": 10.0, "retry_period_s": 2.0, **settings}),
        clock=clock or time.monotonic,
    )


def lease(fake: FakeKube) -> dict[str, Any]:
    found = fake.get("Lease", NAMESPACE, LEASE)
    assert found is not None
    return found["spec"]


def test_settings_refuse_a_deadline_that_outlives_the_lease() -> None:
    from forest_agent.errors import ConfigError

    with pytest.raises(ConfigError, match="renew deadline"):
        LeaseSettings(name=LEASE, namespace=NAMESPACE, identity="a", lease_duration_s=5, renew_deadline_s=5)
    with pytest.raises(ConfigError, match="retry period"):
        LeaseSettings(name=LEASE, namespace=NAMESPACE, identity="a", renew_deadline_s=2, retry_period_s=2)


def test_one_leads_the_other_waits_until_the_record_is_stale(fake: FakeKube, tmp_path: Path) -> None:
    clock_a, clock_b = Clock(), Clock()
    a, b = elector(fake, tmp_path, "a", clock_a), elector(fake, tmp_path, "b", clock_b)

    assert a.try_acquire_or_renew()  # the Lease did not exist: created, held by a
    assert lease(fake)["holderIdentity"] == "a"
    assert not b.try_acquire_or_renew()  # held and fresh
    clock_b.now += 14.9
    assert not b.try_acquire_or_renew()  # still within 15 s of b's first sight of that record
    clock_a.now += 2
    assert a.try_acquire_or_renew()  # a renews: the record changes
    clock_b.now += 5
    assert not b.try_acquire_or_renew()  # b's observation restarts at the renewed record
    assert lease(fake)["holderIdentity"] == "a"

    clock_b.now += 15  # a went silent for a whole lease duration, as b sees it
    assert b.try_acquire_or_renew()
    spec = lease(fake)
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1


def test_the_leader_loses_at_once_when_another_holder_appears(fake: FakeKube, tmp_path: Path) -> None:
    clock = Clock()
    a = elector(fake, tmp_path, "a", clock, retry_period_s=0.05, renew_deadline_s=10.0)
    stop = threading.Event()
    thread = threading.Thread(target=a.run, args=(stop,), daemon=True)
    thread.start()
    assert a.leading.wait(10)
    assert a.is_leader()
    fake.update("Lease", NAMESPACE, LEASE, lambda obj: obj["spec"].update(holderIdentity="intruder"))
    assert stop.wait(10), "losing the lease sets the stop event"
    thread.join(10)
    assert a.lost.is_set() and not a.is_leader()
    assert lease(fake)["holderIdentity"] == "intruder"  # a lost leader never writes the Lease again


def test_the_leader_stops_counting_itself_leader_at_the_deadline(fake: FakeKube, tmp_path: Path) -> None:
    clock = Clock()
    a = elector(fake, tmp_path, "a", clock)
    assert a.try_acquire_or_renew()
    a.leading.set()
    clock.now += 9.9
    assert a.is_leader()
    clock.now += 0.2  # 10.1 s after the last renewal began: deadline passed, no renewal needed to know it
    assert not a.is_leader()


def test_the_deadline_counts_from_the_start_of_a_slow_renewal(fake: FakeKube, tmp_path: Path) -> None:
    """A renewal that takes 3 s (a slow API server: the candidate's clock steps while it reads) proves the
    Lease only as of the moment it began; counted from its end, the leader would act past its deadline."""
    clock = Clock()
    a = elector(fake, tmp_path, "a", clock)
    assert a.try_acquire_or_renew()
    a.leading.set()
    read = a._read

    def slow_read() -> dict[str, Any] | None:
        clock.now += 3.0
        return read()

    a._read = slow_read  # type: ignore[method-assign]
    began = clock.now
    assert a.try_acquire_or_renew()
    assert clock.now == began + 3.0
    clock.now = began + 9.9
    assert a.is_leader()
    clock.now = began + 10.1  # 10.1 s after the renewal began, 7.1 s after it ended
    assert not a.is_leader()


def test_of_two_writers_on_one_read_only_one_wins(fake: FakeKube, tmp_path: Path) -> None:
    clock_b, clock_c = Clock(), Clock()
    a = elector(fake, tmp_path, "a", Clock())
    b, c = elector(fake, tmp_path, "b", clock_b), elector(fake, tmp_path, "c", clock_c)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew() and not c.try_acquire_or_renew()
    stale = c._read()
    clock_b.now += 16
    clock_c.now += 16
    assert b.try_acquire_or_renew()
    c._read = lambda: stale  # c read before b wrote: its replace carries the old resourceVersion
    assert not c.try_acquire_or_renew()
    assert lease(fake)["holderIdentity"] == "b"


def test_release_hands_over_without_waiting_for_expiry(fake: FakeKube, tmp_path: Path) -> None:
    a, b = elector(fake, tmp_path, "a", Clock()), elector(fake, tmp_path, "b", Clock())
    assert a.try_acquire_or_renew()
    a.leading.set()
    assert not b.try_acquire_or_renew()
    a.release()
    assert not lease(fake).get("holderIdentity")
    assert b.try_acquire_or_renew()  # no clock step: an empty holder is free at once


def test_a_controller_that_loses_the_lease_claims_nothing_more(
    fake: FakeKube, host: StubHost, tmp_path: Path
) -> None:
    """In process: the controller runs under run_as_leader; the Lease is taken from it; run_as_leader
    returns EXIT_LEADERSHIP_LOST and a job Host offers afterwards is never claimed by it."""
    grove_id, credential = host.add_grove()
    a = elector(fake, tmp_path, "a", None, retry_period_s=0.05, renew_deadline_s=10.0)
    stop = threading.Event()
    controllers: list[Controller] = []

    def body() -> int:
        controller = Controller(
            wire=WireClient(host.url, credential=credential, grove_id=grove_id),
            cluster=Cluster(api_client_from(kubeconfig=str(fake.kubeconfig(tmp_path / "ctl")))),
            grove_id=grove_id,
            config=ControllerConfig(heartbeat_interval_s=0.5, poll_wait_s=1, watch_timeout_s=2,
                                    backoff_initial_s=0.2, backoff_max_s=1.0),
            stop_event=stop,
            may_act=a.is_leader,
        )
        controllers.append(controller)
        return controller.run()

    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(run_as_leader(a, stop, body)), daemon=True)
    runner.start()
    first = k8s_job(1)
    host.add_job(first)
    host.wait_for(lambda: first["job_id"] in host.claimed, what="the leader's claim")
    fake.update("Lease", NAMESPACE, LEASE, lambda obj: obj["spec"].update(holderIdentity="intruder"))
    runner.join(30)
    assert result == [EXIT_LEADERSHIP_LOST]
    assert not controllers[0].may_act()
    second = k8s_job(2)
    host.add_job(second)
    assert second["job_id"] not in host.claimed
    assert not fake.list("Job", f"{names.LABEL_JOB_ID}={second['job_id']}")


def test_a_controller_that_may_not_act_claims_nothing(fake: FakeKube, host: StubHost, tmp_path: Path) -> None:
    """The gate itself, without the stop that follows a lost lease: a controller whose gate is shut takes
    no job Host offers and claims none it already holds, and claims once the gate opens. Driven one call at
    a time (no threads), so nothing but the gate can keep it from claiming."""
    grove_id, credential = host.add_grove()
    gate = threading.Event()
    controller = Controller(
        wire=WireClient(host.url, credential=credential, grove_id=grove_id),
        cluster=Cluster(api_client_from(kubeconfig=str(fake.kubeconfig(tmp_path / "ctl")))),
        grove_id=grove_id,
        config=ControllerConfig(heartbeat_interval_s=0.5, poll_wait_s=1, watch_timeout_s=2,
                                backoff_initial_s=0.2, backoff_max_s=1.0),
        may_act=gate.is_set,
    )
    offered, held = k8s_job(1), k8s_job(2)
    for job in (offered, held):
        host.add_job(job)

    gate.set()
    controller.apply_changes(Changes(jobs=[held], workloads=[], cancel=[]))  # taken while leading
    gate.clear()  # ... then the lease is lost before a worker claims it
    controller.apply_changes(Changes(jobs=[offered], workloads=[], cancel=[]))  # offered while not leading
    for job in (held, offered):
        controller.reconciler.reconcile(job["job_id"])
    assert host.claimed == set()
    assert not any(fake.list("Job", f"{names.LABEL_JOB_ID}={job['job_id']}") for job in (held, offered))

    gate.set()
    for job in (held, offered):
        controller.reconciler.reconcile(job["job_id"])
    # The one offered while not leading was dropped: Host offers it again to whoever leads.
    assert host.claimed == {held["job_id"]}


# -- two real processes ---------------------------------------------------------------------------------
CONTROLLER = [sys.executable, "-c", "import sys; from forest_agent.kube.cli import main; sys.exit(main())"]
IDENTITY_SECRET = "forest-controller-identity"


class ControllerProcess:
    def __init__(self, fake: FakeKube, host: StubHost, tmp_path: Path, name: str) -> None:
        self.name = name
        self.token = f"token-{name}"
        kubeconfig = fake.kubeconfig(tmp_path / name, token=self.token)
        token_file = tmp_path / "enrollment-token"
        token_file.write_text("good-token\n")
        self.log = (tmp_path / f"{name}.log").open("w+")
        self.proc = subprocess.Popen(
            [*CONTROLLER, "run", "--kubeconfig", str(kubeconfig), "--leader-elect",
             "--lease-namespace", NAMESPACE, "--lease-duration", "3", "--renew-deadline", "2",
             "--retry-period", "0.2", "--identity-secret", IDENTITY_SECRET, "--host", host.url,
             "--name", "grove-k8s", "--token-file", str(token_file), "--heartbeat-interval", "0.5",
             "--poll-wait", "1", "--watch-timeout", "2", "--backoff-max", "1", "--pending-grace", "0"],
            stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, "POD_NAME": name},
        )

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(30)


@pytest.fixture
def processes() -> Iterator[list[ControllerProcess]]:
    started: list[ControllerProcess] = []
    yield started
    for process in started:
        process.stop(signal.SIGKILL)
        process.log.close()


def _reported_mark(fake: FakeKube, job: dict[str, Any]) -> bool:
    jobs = fake.list("Job", f"{names.LABEL_JOB_ID}={job['job_id']}")
    marks = [(j["metadata"].get("annotations") or {}).get(names.ANNOTATION_REPORTED, "") for j in jobs]
    return any(mark.startswith(job["job_id"]) for mark in marks)


def _holder(fake: FakeKube) -> str:
    found = fake.get("Lease", NAMESPACE, LEASE)
    return ((found or {}).get("spec") or {}).get("holderIdentity") or ""


def test_two_controllers_one_leads_and_the_other_takes_over_when_it_is_killed(
    fake: FakeKube, host: StubHost, tmp_path: Path, processes: list[ControllerProcess]
) -> None:
    fake.put("Secret", {"metadata": {"name": IDENTITY_SECRET, "namespace": NAMESPACE}, "type": "Opaque"})
    kubelet = Kubelet(fake).auto()
    try:
        processes += [ControllerProcess(fake, host, tmp_path, name) for name in ("pod-a", "pod-b")]
        by_name = {p.name: p for p in processes}
        holder = host.wait_for(lambda: _holder(fake), timeout=60, what="a leader")
        leader = by_name[holder.split("_")[0]]
        follower = next(p for p in processes if p is not leader)

        first = k8s_job(1)
        host.add_job(first)
        assert host.terminal_report(first["job_id"], timeout=60)["state"] == "succeeded"
        assert len(host.enrollments) == 1  # only the leader enrolled, once
        secret = fake.get("Secret", NAMESPACE, IDENTITY_SECRET)
        assert base64.b64decode(secret["data"]["grove_id"]).decode() in host.groves.values()
        # The follower has asked the API server for nothing but the Lease.
        touched = {r.path for r in fake.requests if r.auth == f"Bearer {follower.token}"}
        assert touched and all(path.endswith(f"/leases/{LEASE}") or path.endswith("/leases")
                               for path in touched), touched

        # The controller reports, then marks the Job reported; a kill between the two makes the next leader
        # report again, which Host takes as a no-op (docs/wire.md). Kill it after the mark.
        host.wait_for(lambda: _reported_mark(fake, first), timeout=30, what="the reported mark")
        assert leader.stop(signal.SIGKILL) == -signal.SIGKILL  # killed: it cannot release the Lease
        new_holder = host.wait_for(lambda: (h := _holder(fake)) != holder and h, timeout=60,
                                   what="the follower taking the Lease over")
        assert new_holder.startswith(follower.name)
        assert fake.get("Lease", NAMESPACE, LEASE)["spec"]["leaseTransitions"] == 1

        second = k8s_job(2)
        host.add_job(second)
        assert host.terminal_report(second["job_id"], timeout=60)["state"] == "succeeded"
        assert len(host.enrollments) == 1  # the new leader read the identity from the Secret

        for job in (first, second):
            terminal = [r for r in host.reports[job["job_id"]] if r["state"] != "running"]
            assert len(terminal) == 1, (job["node"], host.reports[job["job_id"]])
            applies = [r for r in fake.requests_of("PATCH", "Job")
                       if r.content_type.startswith("application/apply-patch")
                       and (r.body or {}).get("metadata", {}).get("labels", {}).get(names.LABEL_JOB_ID)
                       == job["job_id"]]
            assert len(applies) == 1, job["node"]
        assert follower.stop() == 0, follower.output()
        assert not _holder(fake), "a clean stop releases the Lease"
    finally:
        kubelet.stop()
