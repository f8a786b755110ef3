"""`forest-controller run`: the reconcile loop of a Kubernetes Grove.

Threads (all stop on `stop_event`):
  heartbeat  Nodes + Pods -> capacity report, sent with version, change kinds and the log tail
  poll       long-polls Host's `changes`; new jobs are rendered, validated and applied *suspended*
             (the cluster itself is the journal), cancellations delete the Job with propagation
  watch      Pods (cluster-wide), Jobs and Deployments (each work namespace) carrying this Grove's
             labels; each event queues its job id
  worker     reconciles one job id at a time: claim + unsuspend, translate status, report

Reconcile compares what Kubernetes says with what was last reported, every time, so running it
twice is harmless (kopf's rule). Nothing is lost on a crash: a restart re-lists every owned object
(`recover`): a suspended Job is claimed again (409 `already_claimed` means we had claimed it) and
released; a running one is watched; a finished one not yet marked `forest.dev/reported: <job id>`
is reported (a repeated terminal report is a no-op on Host). Names derive from job id + attempt,
so re-applying never makes a second Job. A terminal report is retried with backoff until Host
answers; only then is the object marked reported: Host down and back gets each report once.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from forest_agent import __version__
from forest_agent.backoff import Backoff
from forest_agent.errors import AgentError
from forest_agent.kube import inventory, names, observe
from forest_agent.kube.cluster import Cluster, ClusterError
from forest_agent.kube.render import RenderConfig, render, render_data_secret
from forest_agent.kube.spec import CHANGE_KINDS, DEPLOYMENT_KIND, JobSpec, parse_job
from forest_agent.kube.validate import validate_all
from forest_agent.logring import LogRing, Redactor
from forest_agent.wire.client import WireClient, WireError
from forest_agent.wire.loops import HostLoops
from forest_agent.wire.messages import Changes, MessageInvalid

log = logging.getLogger(__name__)

VERSION = f"forest-controller {__version__}"
_HEARTBEAT_LOG_LINES = 50


@dataclass(frozen=True)
class ControllerConfig:
    namespace: str = "forest"
    untrusted_namespace: str = "forest-untrusted"
    runtime_class: str = "nvidia"
    gpu_taint_keys: tuple[str, ...] = ("nvidia.com/gpu",)
    heartbeat_interval_s: float = 15.0
    poll_wait_s: int = 20
    watch_timeout_s: int = 60
    resync_s: float = 30.0
    pending_grace_s: float = 120.0
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0
    log_tail_lines: int = observe.MAX_LOG_LINES
    workers: int = 4
    # False when the Helm chart installs the untrusted Namespace and its deny-all NetworkPolicy: then the
    # controller needs no cluster-scoped write permission (charts/forest-controller, docs/deploy.md).
    apply_namespaces: bool = True

    # Step data (docs/decisions.md "Step data on Kubernetes"): the image and command of the data containers.
    data_image: str = "ghcr.io/forest/forest-controller:latest"
    data_command: tuple[str, ...] = ("python", "-m", "forest_agent.data")

    @property
    def work_namespaces(self) -> tuple[str, ...]:
        """Where this controller's Jobs and Deployments live: it lists and watches only these, so a
        namespaced Role is enough."""
        return tuple(dict.fromkeys((self.namespace, self.untrusted_namespace)))


@dataclass
class Tracked:
    """What the controller remembers of one job between reconciles (rebuilt from the cluster on restart)."""

    job_id: str
    kind: str  # "Job" | "Deployment"
    name: str
    namespace: str
    needs_claim: bool = True
    objects: list[dict[str, Any]] = field(default_factory=list)  # to apply after the claim (Deployments)
    spec: JobSpec | None = None  # kept while its data token is still to be written
    running_reported: bool = False
    problem_since: float | None = None
    outcome: dict[str, Any] | None = None  # the terminal report, decided once, resent until delivered
    report_backoff: Backoff = field(default_factory=lambda: Backoff(0.5, 30.0))


def owner_selector(grove_id: str) -> str:
    return f"{names.MANAGED_BY}={names.CONTROLLER},{names.LABEL_GROVE}={grove_id}"


class Controller(HostLoops):
    runner_name = "controller"

    def __init__(
        self,
        *,
        wire: WireClient,
        cluster: Cluster,
        grove_id: str,
        config: ControllerConfig | None = None,
        ring: LogRing | None = None,
    ) -> None:
        self.wire = wire
        self.cluster = cluster
        self.grove_id = grove_id
        self.config = config or ControllerConfig()
        self.ring = ring or LogRing(500, Redactor())
        self.render_config = RenderConfig(
            grove_id=grove_id,
            namespace=self.config.namespace,
            untrusted_namespace=self.config.untrusted_namespace,
            runtime_class=self.config.runtime_class,
            gpu_taint_keys=self.config.gpu_taint_keys,
            data_image=self.config.data_image,
            data_command=self.config.data_command,
            data_url=getattr(wire, "base_url", ""),
        )
        self.selector = owner_selector(grove_id)
        self.stop_event = threading.Event()
        self.fatal: str | None = None
        self.models: dict[str, str] = {}
        self.last_capacity: dict[str, Any] = {"placement_units": [], "accelerators": []}
        self.tracked: dict[str, Tracked] = {}
        self._lock = threading.Lock()
        self._due: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []  # (due, job id); entries not matching _due are stale
        self._busy: set[str] = set()  # job ids a worker is reconciling: one worker per job at a time
        self._wake = threading.Condition()
        self._applied_once: set[tuple[str, str, str]] = set()
        self.recovered = threading.Event()
        # Leader election's gate (kube/leader.py): checked before every claim, apply, report and delete.
        self.may_act: Callable[[], bool] = lambda: True

    # -- the work queue -----------------------------------------------------------------------
    def enqueue(self, job_id: str, delay_s: float = 0.0) -> None:
        """Queue a reconcile of `job_id` (coalesced: one entry per id, the earliest due time wins)."""
        with self._wake:
            due = time.monotonic() + delay_s
            if job_id not in self._due or due < self._due[job_id]:
                self._due[job_id] = due
                heapq.heappush(self._heap, (due, job_id))
            self._wake.notify_all()

    def _next_due(self) -> str | None:
        """The earliest due job id no other worker holds; marks it held (see `_release`)."""
        with self._wake:
            while not self.stop_event.is_set():
                held: list[tuple[float, str]] = []
                candidate: tuple[float, str] | None = None
                while self._heap:
                    due, job_id = self._heap[0]
                    if self._due.get(job_id) != due:
                        heapq.heappop(self._heap)  # superseded by an earlier entry, or already taken
                    elif job_id in self._busy:
                        held.append(heapq.heappop(self._heap))  # a worker has it; look past it
                    else:
                        candidate = self._heap[0]
                        break
                now = time.monotonic()
                if candidate is not None and candidate[0] <= now:
                    heapq.heappop(self._heap)
                    del self._due[candidate[1]]
                    self._busy.add(candidate[1])
                for entry in held:
                    heapq.heappush(self._heap, entry)
                if candidate is not None and candidate[1] in self._busy:
                    return candidate[1]
                self._wake.wait(min(candidate[0] - now, 1.0) if candidate is not None else 1.0)
        return None

    def _release(self, job_id: str) -> None:
        with self._wake:
            self._busy.discard(job_id)
            self._wake.notify_all()  # it may have been queued again while held

    def _worker_loop(self) -> None:
        while not self.stop_event.is_set():
            job_id = self._next_due()
            if job_id is None:
                return
            try:
                self.reconcile(job_id)
            except ClusterError as exc:
                log.warning("job %s: Kubernetes API error (%s); retrying", job_id, exc.message)
                self.enqueue(job_id, 2.0 if exc.retryable else self.config.resync_s)
            except Exception:
                log.exception("job %s: unexpected error while reconciling", job_id)
                self.enqueue(job_id, self.config.resync_s)
            finally:
                self._release(job_id)

    # -- start, claim, reconcile, report ------------------------------------------------------
    def _track(self, tracked: Tracked) -> None:
        with self._lock:
            self.tracked[tracked.job_id] = tracked
        self.enqueue(tracked.job_id)

    def _forget(self, job_id: str) -> None:
        with self._lock:
            self.tracked.pop(job_id, None)

    def start_job(self, raw: dict[str, Any]) -> None:
        """A new job from `changes`: render + validate, then apply (a Job suspended) and queue its claim."""
        job_id = raw.get("job_id") if isinstance(raw, dict) else None
        if not isinstance(job_id, str) or not job_id:
            log.warning("ignoring a job without job_id")
            return
        with self._lock:
            if job_id in self.tracked:
                return
        try:
            if raw.get("change_kind") not in CHANGE_KINDS:
                raise MessageInvalid(
                    f"{raw.get('change_kind')!r} is not run by forest-controller",
                    field_path="job.change_kind",
                )
            spec = parse_job(raw, models=self.models)
            objects = validate_all(render(spec, self.render_config, suspend=True))
        except AgentError as exc:
            wrong_kind = isinstance(exc, MessageInvalid) and exc.field_path == "job.change_kind"
            reason = "unsupported_change_kind" if wrong_kind else exc.code
            log.warning("job %s: refused before apply: %s", job_id, exc)
            self._refuse(job_id, reason, str(exc))
            return
        owner = (
            objects[-1]
            if spec.change_kind != DEPLOYMENT_KIND
            else next(o for o in objects if o["kind"] == "Deployment")
        )
        tracked = Tracked(
            job_id=job_id,
            kind=owner["kind"],
            name=owner["metadata"]["name"],
            namespace=owner["metadata"]["namespace"],
        )
        # A worker applies them: a Job suspended before its claim, a Deployment (which cannot wait
        # suspended) after it (docs/decisions.md).
        tracked.objects = objects
        tracked.spec = spec if spec.has_data else None
        self._track(tracked)

    def _apply(self, obj: dict[str, Any]) -> None:
        key = (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if obj["kind"] in ("Namespace", "NetworkPolicy"):
            if not self.config.apply_namespaces:
                return  # installed by the chart
            if key in self._applied_once:
                return  # shared by every untrusted job; applied once per controller process
            self.cluster.apply(obj)
            self._applied_once.add(key)
            return
        self.cluster.apply(obj)

    def _refuse(self, job_id: str, reason: str, message: str) -> None:
        """Claim a job this controller will not run and report it failed, so Host stops offering it."""
        if not self.may_act():
            return
        try:
            self.wire.claim(job_id)
            self.wire.report(
                job_id,
                {
                    "state": "failed",
                    "reason": reason,
                    "log_tail": [f"[forest-controller] {message}"[: observe.MAX_LOG_LINE]],
                },
            )
        except WireError as exc:
            log.warning("job %s: could not refuse it (%s); Host will offer it again", job_id, exc.code)

    def _claim(self, tracked: Tracked) -> bool:
        """True when the job is ours to run now; False when it was dropped or must wait."""
        if tracked.kind == "Job" and tracked.objects:
            for obj in tracked.objects:
                self._apply(obj)  # suspended: the cluster holds the job before Host hands it over
            tracked.objects = []
        try:
            self.wire.claim(tracked.job_id)
        except WireError as exc:
            if exc.code == "already_claimed":
                # Only this Grove can claim its jobs and one controller acts per Grove (the state lock, or
                # the leader Lease): we claimed it before a restart or a takeover (or the answer got lost).
                log.info("job %s: already claimed by this Grove; resuming", tracked.job_id)
            elif exc.code in ("job_cancelled", "job_not_found"):
                log.info("job %s: %s; deleting what was applied", tracked.job_id, exc.code)
                if tracked.kind == "Job":
                    self.cluster.delete("Job", tracked.name, tracked.namespace)
                self._forget(tracked.job_id)
                return False
            else:
                delay = tracked.report_backoff.next_delay()
                log.warning("job %s: claim failed (%s); retrying in %.1fs", tracked.job_id, exc.code, delay)
                self.enqueue(tracked.job_id, delay)
                return False
        tracked.report_backoff.reset()
        if tracked.spec is not None and not self._write_data_token(tracked):
            return False
        if tracked.kind == "Job":
            self.cluster.merge_patch("Job", tracked.name, tracked.namespace, {"spec": {"suspend": False}})
        else:
            for obj in tracked.objects:
                self._apply(obj)
            tracked.objects = []
        tracked.needs_claim = False
        return True

    def _write_data_token(self, tracked: Tracked) -> bool:
        """The claimed job's data token, in a Secret its data containers read (owned by the Job, so it is
        deleted with it); the Job stays suspended until it is written. False: try again later."""
        assert tracked.spec is not None
        try:
            token = self.wire.data_token(tracked.job_id)["token"]
            owner = self.cluster.get("Job", tracked.name, tracked.namespace)
            self._apply(render_data_secret(tracked.spec, self.render_config, token=token, owner=owner))
        except (WireError, ClusterError, KeyError, TypeError) as exc:
            delay = tracked.report_backoff.next_delay()
            log.warning("job %s: data token not written (%s); retrying in %.1fs", tracked.job_id, exc, delay)
            self.enqueue(tracked.job_id, delay)
            return False
        tracked.spec = None
        return True

    def reconcile(self, job_id: str) -> None:
        if not self.may_act():
            return  # not the leader (any more): the next leader re-lists and resumes it
        with self._lock:
            tracked = self.tracked.get(job_id)
        if tracked is None:
            return
        if tracked.outcome is not None:
            self._deliver(tracked)
            return
        if tracked.needs_claim and not self._claim(tracked):
            return
        obj = self.cluster.get(tracked.kind, tracked.name, tracked.namespace)
        if obj is None:
            self._decide(
                tracked,
                {
                    "state": "failed",
                    "reason": "kubernetes_object_deleted",
                    "log_tail": [
                        f"[forest-controller] {tracked.kind} {tracked.namespace}/"
                        f"{tracked.name} was deleted outside Forest"
                    ],
                },
            )
            self._deliver(tracked)
            return
        pods, _ = self.cluster.list("Pod", label_selector=f"{names.LABEL_JOB_ID}={job_id}")
        seen = (
            observe.observe_deployment(obj, pods)
            if tracked.kind == "Deployment"
            else observe.observe_job(obj, pods)
        )
        if seen.terminal:
            self._decide(tracked, observe.report_body(seen, self._log_tail(pods)))
            self._deliver(tracked)
            return
        if seen.problem:
            now = time.monotonic()
            if tracked.problem_since is None:
                tracked.problem_since = now
                log.warning("job %s: %s: %s", job_id, seen.reason, seen.message)
            if now - tracked.problem_since >= self.config.pending_grace_s:
                self._decide(tracked, observe.report_body(seen, self._log_tail(pods)))
                if tracked.kind == "Job":  # a Deployment stays: it is desired state, only its rollout failed
                    self.cluster.delete("Job", tracked.name, tracked.namespace)
                self._deliver(tracked)
                return
            self.enqueue(job_id, max(0.0, tracked.problem_since + self.config.pending_grace_s - now))
            return
        tracked.problem_since = None
        if seen.state == observe.RUNNING and not tracked.running_reported:
            try:
                self.wire.report(job_id, {"state": "running", "log_tail": []})
                tracked.running_reported = True
            except WireError as exc:
                log.info("job %s: progress report failed (%s); continuing", job_id, exc.code)

    def _decide(self, tracked: Tracked, body: dict[str, Any]) -> None:
        """Fix the terminal report once: a cancellation racing a status change wins if it came first."""
        with self._lock:
            if tracked.outcome is None:
                tracked.outcome = body

    def _log_tail(self, pods: list[dict[str, Any]]) -> list[str]:
        if not pods:
            return []
        pod = max(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")
        meta = pod.get("metadata") or {}
        lines = self.cluster.pod_log_tail(
            meta.get("name", ""), meta.get("namespace", ""), lines=self.config.log_tail_lines
        )
        return [self.ring.redactor.redact(line)[: observe.MAX_LOG_LINE] for line in lines]

    def _deliver(self, tracked: Tracked) -> None:
        """Send the terminal report; on a Host outage retry later (backoff). Once Host answered, mark
        the object reported so a restart does not report it again, and stop tracking it."""
        assert tracked.outcome is not None
        try:
            answer = self.wire.report(tracked.job_id, tracked.outcome)
        except WireError as exc:
            if exc.retryable:
                delay = tracked.report_backoff.next_delay()
                log.warning(
                    "job %s: terminal report failed (%s); retrying in %.1fs", tracked.job_id, exc.code, delay
                )
                self.enqueue(tracked.job_id, delay)
                return
            log.error("job %s: Host refused the terminal report: %s", tracked.job_id, exc)
        else:
            log.info(
                "job %s: reported %s%s",
                tracked.job_id,
                tracked.outcome["state"],
                "" if answer.get("accepted", True) else " (Host had already ended it)",
            )
        try:
            annotation = {names.ANNOTATION_REPORTED: f"{tracked.job_id} {tracked.outcome['state']}"}
            if tracked.name:
                self.cluster.merge_patch(
                    tracked.kind, tracked.name, tracked.namespace, {"metadata": {"annotations": annotation}}
                )
        except ClusterError as exc:
            if not exc.not_found:
                log.warning("job %s: could not mark it reported (%s)", tracked.job_id, exc.message)
        self._forget(tracked.job_id)

    def cancel(self, job_id: str) -> None:
        """Host cancelled the job: delete its Job (Pods go with it: propagation) and acknowledge."""
        if not self.may_act():
            return
        cancelled = {"state": "cancelled", "reason": "cancelled", "log_tail": []}
        with self._lock:
            tracked = self.tracked.get(job_id)
            if tracked is None:
                tracked = Tracked(job_id=job_id, kind="Job", name="", namespace="", needs_claim=False)
                self.tracked[job_id] = tracked
            if tracked.outcome is None:
                tracked.outcome = cancelled  # decided before the delete, so the DELETED event cannot win
            tracked.needs_claim = False
        if tracked.name:
            if tracked.kind == "Job":
                self.cluster.delete("Job", tracked.name, tracked.namespace)
            # A Deployment is desired state: cancelling its rollout job ends the wait, not the service.
        else:
            selector = f"{self.selector},{names.LABEL_JOB_ID}={job_id}"
            jobs = [
                obj
                for namespace in self.config.work_namespaces
                for obj in self.cluster.list("Job", label_selector=selector, namespace=namespace)[0]
            ]
            for obj in jobs:
                self.cluster.delete("Job", obj["metadata"]["name"], obj["metadata"]["namespace"])
        log.info("job %s: cancelled by Host", job_id)
        self.enqueue(job_id)

    # -- restart -----------------------------------------------------------------------------
    def recover(self) -> int:
        """Re-list every object this Grove owns and resume each unreported job; returns how many."""
        count = 0
        for kind, namespace in self._owned_scopes():
            items, _ = self.cluster.list(kind, label_selector=self.selector, namespace=namespace)
            for obj in items:
                meta = obj.get("metadata") or {}
                job_id = (meta.get("labels") or {}).get(names.LABEL_JOB_ID)
                if not job_id:
                    continue
                reported = (meta.get("annotations") or {}).get(names.ANNOTATION_REPORTED, "")
                if reported.split(" ")[0] == job_id:
                    continue
                suspended = kind == "Job" and bool((obj.get("spec") or {}).get("suspend"))
                self._track(
                    Tracked(
                        job_id=job_id,
                        kind=kind,
                        name=meta["name"],
                        namespace=meta["namespace"],
                        needs_claim=suspended,
                    )
                )
                count += 1
        log.info("re-listed owned objects: %d job(s) to resume", count)
        self.recovered.set()
        return count

    # -- loops (HostLoops) ------------------------------------------------------------------------
    def heartbeat_body(self) -> dict[str, Any]:
        try:
            nodes, _ = self.cluster.list("Node")
            pods, _ = self.cluster.list("Pod")
            self.last_capacity = inventory.capacity(nodes, pods)
            self.models = inventory.models_by_inventory_id(self.last_capacity)
        except ClusterError as exc:
            log.warning(
                "cannot read Nodes/Pods for the capacity report (%s); sending the last one", exc.message
            )
        return {
            "version": VERSION,
            "change_kinds": list(CHANGE_KINDS),
            "isolation": ["container"],
            "capacity": self.last_capacity,
            "log_tail": self.ring.tail(_HEARTBEAT_LOG_LINES),
        }

    def before_polling(self) -> None:
        self.recovered.wait()

    def apply_changes(self, changes: Changes) -> None:
        if not self.may_act():
            return  # Host offers them again to whoever leads
        for job_id in changes.cancel:
            self._guarded(self.cancel, job_id)
        for raw in changes.jobs:
            self._guarded(self.start_job, raw)

    def _guarded(self, func: Any, arg: Any) -> None:
        try:
            func(arg)
        except ClusterError as exc:
            # Nothing was claimed; Host offers the job (or the cancellation) again on the next poll.
            log.warning("Kubernetes API error (%s); Host will offer it again", exc.message)

    def _owned_scopes(self) -> list[tuple[str, str]]:
        return [(kind, ns) for kind in ("Job", "Deployment") for ns in self.config.work_namespaces]

    def _watch_loop(self, kind: str, namespace: str | None = None) -> None:
        backoff = Backoff(self.config.backoff_initial_s, self.config.backoff_max_s)
        while not self.stop_event.is_set():
            try:
                items, version = self.cluster.list(kind, label_selector=self.selector, namespace=namespace)
                for obj in items:
                    self._enqueue_owned(obj)
                while not self.stop_event.is_set():
                    for _, obj in self.cluster.watch(
                        kind,
                        label_selector=self.selector,
                        resource_version=version,
                        timeout_s=self.config.watch_timeout_s,
                        stopper=self.stop_event.is_set,
                        namespace=namespace,
                    ):
                        version = (obj.get("metadata") or {}).get("resourceVersion") or version
                        self._enqueue_owned(obj)
                backoff.reset()
            except ClusterError as exc:
                if exc.gone:
                    log.info("watch %s: history expired; re-listing", kind)
                    continue
                delay = backoff.next_delay()
                log.warning("watch %s failed (%s); re-listing in %.1fs", kind, exc.message, delay)
                self.stop_event.wait(delay)

    def _enqueue_owned(self, obj: dict[str, Any]) -> None:
        job_id = ((obj.get("metadata") or {}).get("labels") or {}).get(names.LABEL_JOB_ID)
        with self._lock:
            known = job_id in self.tracked
        if job_id and known:
            self.enqueue(job_id)

    def _resync_loop(self) -> None:
        """Reconcile every tracked job now and then, whatever the watches said (a missed event heals)."""
        while not self.stop_event.wait(self.config.resync_s):
            with self._lock:
                ids = list(self.tracked)
            for job_id in ids:
                self.enqueue(job_id)

    def start(self) -> list[threading.Thread]:
        log.info("%s running as Grove %s against %s", VERSION, self.grove_id, self.wire.base_url)
        threads = [
            threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True),
            threading.Thread(target=self._recover_then_poll, name="poll", daemon=True),
            threading.Thread(target=self._resync_loop, name="resync", daemon=True),
        ]
        threads += [
            threading.Thread(target=self._worker_loop, name=f"worker-{n}", daemon=True)
            for n in range(max(1, self.config.workers))
        ]
        # Pods are watched cluster-wide (read-only, the capacity report needs them anyway); Jobs and
        # Deployments only in the work namespaces.
        watches = [("Pod", None), *self._owned_scopes()]
        threads += [
            threading.Thread(
                target=self._watch_loop, args=(kind, ns), name=f"watch-{kind}-{ns or 'all'}", daemon=True
            )
            for kind, ns in watches
        ]
        for thread in threads:
            thread.start()
        return threads

    def _recover_then_poll(self) -> None:
        backoff = Backoff(self.config.backoff_initial_s, self.config.backoff_max_s)
        while not self.stop_event.is_set() and not self.recovered.is_set():
            try:
                self.recover()
            except ClusterError as exc:
                delay = backoff.next_delay()
                log.warning("cannot re-list owned objects (%s); retrying in %.1fs", exc.message, delay)
                self.stop_event.wait(delay)
        self._poll_loop()

    def run(self) -> int:
        """Run until `stop_event` is set (signal) or Host refuses us; return the exit code."""
        threads = self.start()
        self.stop_event.wait()
        self.shutdown(threads)
        if self.fatal:
            log.error("%s", self.fatal)
            return 3
        return 0

    def shutdown(self, threads: list[threading.Thread], timeout_s: float = 5.0) -> None:
        self.stop_event.set()
        with self._wake:
            self._wake.notify_all()
        deadline = time.monotonic() + timeout_s
        for thread in threads:
            if not thread.name.startswith("watch-"):  # a watch ends with its server timeout
                thread.join(max(0.0, deadline - time.monotonic()))
        self.wire.close()
