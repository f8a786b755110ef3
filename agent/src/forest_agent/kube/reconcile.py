"""What the controller does to one job: take it in, claim it, release it, watch its status, report it.

Each tracked job is in one state of kube/job_states.py, and `reconcile` runs the step of that state until
a step has nothing more to do now (it waits for a watch event, a resync or a queued retry):

    received   apply the Job suspended (a Deployment waits), claim it           -> claimed | dropped
    claimed    write the data token, unsuspend the Job or apply the Deployment  -> released
    released,  translate what Kubernetes says (observe.py); the first `running` is
    running    reported; an end, a problem past its grace or a deletion decides the outcome
                                                                                -> running | reporting
    reporting  deliver the terminal report until Host answers, then mark the object reported -> reported

A cancellation (poll thread) decides `cancelled` from any state before `reporting` and deletes the Job;
the worker then finds the job in `reporting`. Reconcile compares what Kubernetes says with what was last
reported, every time, so running it twice is harmless (kopf's rule).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from forest_agent.errors import AgentError
from forest_agent.kube import names, observe
from forest_agent.kube.cluster import Cluster, ClusterError
from forest_agent.kube.config import ControllerConfig
from forest_agent.kube.job_states import TrackedState
from forest_agent.kube.render import RenderConfig, render, render_data_secret
from forest_agent.kube.spec import CHANGE_KINDS, DEPLOYMENT_KIND, parse_job
from forest_agent.kube.tracked import Tracked, TrackedJobs
from forest_agent.kube.validate import validate_all
from forest_agent.kube.workqueue import WorkQueue
from forest_agent.logring import Redactor
from forest_agent.wire.client import WireClient, WireError
from forest_agent.wire.messages import MessageInvalid

log = logging.getLogger(__name__)

# A Kubernetes API error the client may retry soon (5xx, 429, a connection): the next try, in seconds.
_RETRYABLE_API_ERROR_DELAY_S = 2.0


class Reconciler:
    def __init__(
        self,
        *,
        wire: WireClient,
        cluster: Cluster,
        config: ControllerConfig,
        render_config: RenderConfig,
        selector: str,
        tracked: TrackedJobs,
        queue: WorkQueue,
        redactor: Redactor,
        may_act: Callable[[], bool],
    ) -> None:
        self.wire = wire
        self.cluster = cluster
        self.config = config
        self.render_config = render_config
        self.selector = selector
        self.tracked = tracked
        self.queue = queue
        self.redactor = redactor
        # Leader election's gate (kube/leader.py): checked before every claim, apply, report and delete.
        self.may_act = may_act
        self.models: dict[str, str] = {}  # inventory id -> GPU model, from the last capacity report
        self._applied_once: set[tuple[str, str, str]] = set()
        self._steps: dict[TrackedState, Callable[[Tracked], bool]] = {
            TrackedState.RECEIVED: self._claim,
            TrackedState.CLAIMED: self._release,
            TrackedState.RELEASED: self._observe,
            TrackedState.RUNNING: self._observe,
            TrackedState.REPORTING: self._deliver,
        }

    # -- intake (the poll thread) ---------------------------------------------------------------
    def start_job(self, raw: dict[str, Any]) -> None:
        """A new job from `changes`: render + validate, then track it; a worker applies and claims it."""
        job_id = raw.get("job_id") if isinstance(raw, dict) else None
        if not isinstance(job_id, str) or not job_id:
            log.warning("ignoring a job without job_id")
            return
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
        meta = owner["metadata"]
        received = TrackedState.RECEIVED
        tracked = self.tracked.new(job_id, owner["kind"], meta["name"], meta["namespace"], received)
        # A worker applies them: a Job suspended before its claim, a Deployment (which cannot wait
        # suspended) after it (docs/decisions.md).
        tracked.objects = objects
        tracked.spec = spec if spec.has_data else None
        if self.tracked.add(tracked):
            self.queue.add(job_id)

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

    def cancel(self, job_id: str) -> None:
        """Host cancelled the job: delete its Job (Pods go with it: propagation) and acknowledge."""
        if not self.may_act():
            return
        # Decided before the delete, so the DELETED event it causes cannot win.
        cancelled = {"state": "cancelled", "reason": "cancelled", "log_tail": []}
        tracked = self.tracked.decide_cancelled(job_id, cancelled)
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
        self.queue.add(job_id)

    def recover(self) -> int:
        """Re-list every object this Grove owns and resume each job not marked reported; returns how many.
        A suspended Job is claimed again (409 `already_claimed` means we had claimed it) and released;
        any other is watched; one marked `forest.dev/reported: <job id>` is done and left alone."""
        count = 0
        for kind, namespace in self.config.owned_scopes:
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
                state = TrackedState.RECEIVED if suspended else TrackedState.RELEASED
                if self.tracked.add(self.tracked.new(job_id, kind, meta["name"], meta["namespace"], state)):
                    self.queue.add(job_id)
                    count += 1
        log.info("re-listed owned objects: %d job(s) to resume", count)
        return count

    # -- the workers ------------------------------------------------------------------------------
    def work(self) -> None:
        """A worker thread's body: reconcile queued job ids until the queue stops."""
        while (job_id := self.queue.get()) is not None:
            try:
                self.reconcile(job_id)
            except ClusterError as exc:
                log.warning("job %s: Kubernetes API error (%s); retrying", job_id, exc.message)
                delay = _RETRYABLE_API_ERROR_DELAY_S if exc.retryable else self.config.resync_s
                self.queue.add(job_id, delay)
            except Exception:
                log.exception("job %s: unexpected error while reconciling", job_id)
                self.queue.add(job_id, self.config.resync_s)
            finally:
                self.queue.done(job_id)

    def reconcile(self, job_id: str) -> None:
        """Run the step of the job's state; a step that moved it on (True) hands over to the next one."""
        tracked = self.tracked.get(job_id)
        while tracked is not None and self.may_act():  # not the leader (any more): the next one re-lists
            step = self._steps.get(tracked.state)
            if step is None or not step(tracked):
                return

    def _claim(self, tracked: Tracked) -> bool:
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
                self.tracked.advance(tracked, TrackedState.DROPPED, exc.code)
                return False
            else:
                delay = tracked.backoff.next_delay()
                log.warning("job %s: claim failed (%s); retrying in %.1fs", tracked.job_id, exc.code, delay)
                self.queue.add(tracked.job_id, delay)
                return False
        tracked.backoff.reset()
        self.tracked.advance(tracked, TrackedState.CLAIMED)
        return True  # on to `claimed`, or to `reporting` if Host cancelled it meanwhile

    def _release(self, tracked: Tracked) -> bool:
        if tracked.spec is not None and not self._write_data_token(tracked):
            return False
        try:
            if tracked.kind == "Job":
                self.cluster.merge_patch("Job", tracked.name, tracked.namespace, {"spec": {"suspend": False}})
            else:
                for obj in tracked.objects:
                    self._apply(obj)
                tracked.objects = []
        except ClusterError as exc:
            if not exc.not_found:
                raise
            # Deleted meanwhile (a cancellation, or by hand): observing it decides what to report.
        self.tracked.advance(tracked, TrackedState.RELEASED)
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
            delay = tracked.backoff.next_delay()
            log.warning("job %s: data token not written (%s); retrying in %.1fs", tracked.job_id, exc, delay)
            self.queue.add(tracked.job_id, delay)
            return False
        tracked.spec = None
        return True

    def _observe(self, tracked: Tracked) -> bool:
        job_id = tracked.job_id
        obj = self.cluster.get(tracked.kind, tracked.name, tracked.namespace)
        if obj is None:
            self.tracked.decide(
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
            return True
        pods, _ = self.cluster.list("Pod", label_selector=f"{names.LABEL_JOB_ID}={job_id}")
        seen = (
            observe.observe_deployment(obj, pods)
            if tracked.kind == "Deployment"
            else observe.observe_job(obj, pods)
        )
        if seen.terminal:
            self.tracked.decide(tracked, observe.report_body(seen, self._log_tail(pods)))
            return True
        if seen.problem:
            now = time.monotonic()
            if tracked.problem_since is None:
                tracked.problem_since = now
                log.warning("job %s: %s: %s", job_id, seen.reason, seen.message)
            if now - tracked.problem_since >= self.config.pending_grace_s:
                self.tracked.decide(tracked, observe.report_body(seen, self._log_tail(pods)))
                if tracked.kind == "Job":  # a Deployment stays: it is desired state, only its rollout failed
                    self.cluster.delete("Job", tracked.name, tracked.namespace)
                return True
            self.queue.add(job_id, max(0.0, tracked.problem_since + self.config.pending_grace_s - now))
            return False
        tracked.problem_since = None
        if seen.state == observe.RUNNING and tracked.state is TrackedState.RELEASED:
            try:
                self.wire.report(job_id, {"state": "running", "log_tail": []})
            except WireError as exc:
                log.info("job %s: progress report failed (%s); continuing", job_id, exc.code)
            else:
                self.tracked.advance(tracked, TrackedState.RUNNING)
        return False

    def _deliver(self, tracked: Tracked) -> bool:
        """Send the terminal report; on a Host outage retry later (backoff). Once Host answered, mark
        the object reported so a restart does not report it again, and forget the job."""
        assert tracked.outcome is not None
        try:
            answer = self.wire.report(tracked.job_id, tracked.outcome)
        except WireError as exc:
            if exc.retryable:
                delay = tracked.backoff.next_delay()
                log.warning(
                    "job %s: terminal report failed (%s); retrying in %.1fs", tracked.job_id, exc.code, delay
                )
                self.queue.add(tracked.job_id, delay)
                return False
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
        self.tracked.advance(tracked, TrackedState.REPORTED)
        return False

    # -- helpers ----------------------------------------------------------------------------------
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

    def _log_tail(self, pods: list[dict[str, Any]]) -> list[str]:
        if not pods:
            return []
        pod = max(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")
        meta = pod.get("metadata") or {}
        lines = self.cluster.pod_log_tail(
            meta.get("name", ""), meta.get("namespace", ""), lines=self.config.log_tail_lines
        )
        return [self.redactor.redact(line)[: observe.MAX_LOG_LINE] for line in lines]
