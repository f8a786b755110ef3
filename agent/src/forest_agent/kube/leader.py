"""Leader election for `forest-controller run`: of a Grove's controller replicas, one acts, the others wait.

The record is a `coordination.k8s.io/v1` Lease, kept by the rules of client-go's leaderelection (so
`kubectl get lease` reads it as any controller's):

* A candidate takes the Lease when it does not exist, names no holder, or its record has not changed for
  `leaseDurationSeconds` as observed on **this** candidate's monotonic clock (no clock is compared
  between machines).
* Every write is a replace carrying the `resourceVersion` that was read, so of two candidates racing for
  an expired Lease exactly one wins; the other gets 409 and stays a follower.
* The leader renews every `retry_period_s`. It counts itself leader only until `renew_deadline_s` after
  the start of its last successful renewal, which is shorter than the lease duration: by the time a
  follower may take the Lease, the old leader has stopped acting, even if it could not reach the API
  server to find out.
* Seeing another holder, or passing that deadline, is losing the lease: `lost` is set at once, the stop
  event is set (the controller's loops end, nothing more is claimed, applied or reported) and the process
  exits with `EXIT_LEADERSHIP_LOST` so Kubernetes restarts it as a follower. Leadership is never regained
  inside one process: what the old loops had in memory is not trusted again.
* On a clean stop the leader releases the Lease (holder emptied), so a rolling update hands over at once.

Why not `kubernetes.leaderelection`: docs/decisions.md.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from forest_agent.errors import ConfigError
from forest_agent.kube.cluster import ClusterError, api_call

log = logging.getLogger(__name__)

EXIT_LEADERSHIP_LOST = 5


def default_identity() -> str:
    """The Pod's name (its hostname) plus a random suffix: a restarted container is a new candidate."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def micro_time(moment: datetime | None = None) -> str:
    """Kubernetes' MicroTime: RFC 3339 with microseconds, in UTC."""
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseSettings:
    name: str
    namespace: str
    identity: str
    lease_duration_s: int = 15
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def __post_init__(self) -> None:
        if self.lease_duration_s < 1:
            raise ConfigError("the lease duration must be at least 1 second")
        if not 0 < self.renew_deadline_s < self.lease_duration_s:
            raise ConfigError("the renew deadline must be shorter than the lease duration")
        if not 0 < self.retry_period_s < self.renew_deadline_s:
            raise ConfigError("the retry period must be shorter than the renew deadline")


class LeaderElector:
    """Campaigns for, renews and releases one Lease. `is_leader()` is the gate the controller checks
    before every claim, apply and report."""

    def __init__(
        self,
        *,
        api_client: client.ApiClient,
        settings: LeaseSettings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._api = client.CoordinationV1Api(api_client)
        self._clock = clock
        self.leading = threading.Event()
        self.lost = threading.Event()
        self._valid_until = 0.0
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self.holder: str = ""  # the holder the last read named
        # A renewal must give up well before the deadline it protects.
        self._timeout = (min(5.0, settings.retry_period_s), max(1.0, settings.renew_deadline_s / 2))

    # -- the gate -----------------------------------------------------------------------------
    def is_leader(self) -> bool:
        return self.leading.is_set() and not self.lost.is_set() and self._clock() < self._valid_until

    # -- one round ----------------------------------------------------------------------------
    def _read(self) -> dict[str, Any] | None:
        try:
            return api_call(
                f"read Lease {self.settings.name}",
                self._api.read_namespaced_lease,
                self.settings.name,
                self.settings.namespace,
                _request_timeout=self._timeout,
            )
        except ClusterError as exc:
            if exc.not_found:
                return None
            raise

    def try_acquire_or_renew(self) -> bool:
        """One read-then-write round. True when this candidate holds the Lease afterwards."""
        started = self._clock()
        settings = self.settings
        lease = self._read()
        now = micro_time()
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": settings.name, "namespace": settings.namespace},
                "spec": {
                    "holderIdentity": settings.identity,
                    "leaseDurationSeconds": settings.lease_duration_s,
                    "acquireTime": now,
                    "renewTime": now,
                    "leaseTransitions": 0,
                },
            }
            try:
                api_call(
                    f"create Lease {settings.name}",
                    self._api.create_namespaced_lease,
                    settings.namespace,
                    body,
                    _request_timeout=self._timeout,
                )
            except ClusterError as exc:
                if exc.status == 409:  # another candidate created it first
                    return False
                raise
            self.holder = settings.identity
            self._valid_until = started + settings.renew_deadline_s
            return True

        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        duration = int(spec.get("leaseDurationSeconds") or settings.lease_duration_s)
        record = (holder, spec.get("renewTime"), duration, spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, started
        self.holder = holder
        ours = holder == settings.identity
        if holder and not ours and self._observed_at + duration > started:
            return False  # held, and renewed within its duration as far as this candidate has seen
        transitions = int(spec.get("leaseTransitions") or 0)
        lease["spec"] = {
            "holderIdentity": settings.identity,
            "leaseDurationSeconds": settings.lease_duration_s,
            "acquireTime": spec.get("acquireTime") if ours and spec.get("acquireTime") else now,
            "renewTime": now,
            "leaseTransitions": transitions if ours else transitions + 1,
        }
        try:
            api_call(
                f"replace Lease {settings.name}",
                self._api.replace_namespaced_lease,
                settings.name,
                settings.namespace,
                lease,
                _request_timeout=self._timeout,
            )
        except ClusterError as exc:
            if exc.status == 409:  # the Lease changed since the read: somebody else wrote it
                return False
            raise
        self.holder = settings.identity
        self._valid_until = started + settings.renew_deadline_s
        return True

    # -- the loop -----------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Campaign until leading, then renew; on losing the lease set `lost` and `stop`, and return."""
        log.info("leader election: %s campaigns for Lease %s/%s", self.settings.identity,
                 self.settings.namespace, self.settings.name)
        while not stop.is_set():
            try:
                renewed = self.try_acquire_or_renew()
            except ClusterError as exc:
                log.warning("leader election: %s", exc.message)
                renewed = False
            if renewed and not self.leading.is_set():
                log.info("leader election: %s leads", self.settings.identity)
                self.leading.set()
            elif not renewed and self.leading.is_set():
                if self.holder and self.holder != self.settings.identity:
                    self._lose(stop, f"Lease now held by {self.holder}")
                    return
                if self._clock() >= self._valid_until:
                    self._lose(stop, "could not renew the Lease before its deadline")
                    return
            stop.wait(self.settings.retry_period_s)

    def _lose(self, stop: threading.Event, why: str) -> None:
        self.lost.set()
        stop.set()
        log.error("leader election: %s lost leadership (%s); stopping", self.settings.identity, why)

    def release(self) -> None:
        """Hand the Lease back on a clean stop (only if this candidate still holds it)."""
        if not self.leading.is_set() or self.lost.is_set():
            return
        try:
            lease = self._read()
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.settings.identity:
                return
            lease["spec"] = {**lease["spec"], "holderIdentity": None, "leaseDurationSeconds": 1,
                             "renewTime": micro_time()}
            api_call(f"release Lease {self.settings.name}", self._api.replace_namespaced_lease,
                     self.settings.name, self.settings.namespace, lease, _request_timeout=self._timeout)
            log.info("leader election: %s released the Lease", self.settings.identity)
        except ClusterError as exc:
            log.warning("leader election: could not release the Lease (%s); it expires by itself",
                        exc.message)
        finally:
            self.leading.clear()


def run_as_leader(elector: LeaderElector, stop: threading.Event, body: Callable[[], int]) -> int:
    """Wait until `elector` leads (or `stop`), run `body` while renewing, and return its exit code, or
    `EXIT_LEADERSHIP_LOST` when the lease was lost (the elector sets `stop`, which `body` must honour)."""
    thread = threading.Thread(target=elector.run, args=(stop,), name="leader-election", daemon=True)
    thread.start()
    while not stop.is_set() and not elector.leading.wait(0.25):
        pass
    if stop.is_set() and not elector.leading.is_set():
        thread.join(elector.settings.retry_period_s + 1)
        return 0
    code = body()
    stop.set()
    thread.join(sum(elector._timeout) + elector.settings.retry_period_s)
    if elector.lost.is_set():
        return EXIT_LEADERSHIP_LOST
    elector.release()
    return code
