"""Kubernetes status -> what the Grove reports to Host. Pure: takes the JSON form of the Job (or
Deployment) and its Pods, returns an `Observation`.

| what Kubernetes says                                   | state      | reason                     |
|--------------------------------------------------------|------------|----------------------------|
| Job condition Complete=True                            | succeeded  |                            |
| Job condition Failed=True, reason DeadlineExceeded     | timed_out  | timeout                    |
| Job Failed=True, container terminated OOMKilled        | failed     | oom_killed (exit code)     |
| Job Failed=True, a data container failed              | failed     | its code (output_missing…) |
| Job Failed=True otherwise                              | failed     | (the container exit code)  |
| Pod Running                                            | running    |                            |
| Pod Pending, PodScheduled=False Unschedulable          | pending    | unschedulable + message    |
| Pod Pending, waiting ImagePullBackOff/ErrImagePull/... | pending    | image_pull_failed + message|
| Deployment Available, all replicas updated + available | succeeded  |                            |
| Deployment Progressing=False ProgressDeadlineExceeded  | failed     | progress_deadline_exceeded |

A `pending` observation with a `reason` is a *problem*: the controller fails the job when it lasts
longer than its pending grace (the scheduler or an image pull may still recover before that).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from forest_agent.outputs import parse_outputs

PENDING, RUNNING, SUCCEEDED, FAILED, TIMED_OUT = "pending", "running", "succeeded", "failed", "timed_out"
TERMINAL = frozenset({SUCCEEDED, FAILED, TIMED_OUT})

MAX_LOG_LINES = 50  # lines of container log sent with a report (Host accepts up to 500)
MAX_LOG_LINE = 4000  # Host refuses longer lines
IMAGE_PULL_REASONS = {"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"}
CONFIG_REASONS = {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}

Obj = dict[str, Any]
STEP_CONTAINER = "step"
DATA_CONTAINERS = frozenset({"fetch-inputs", "upload-outputs"})
CODE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


@dataclass(frozen=True)
class Observation:
    state: str
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    outputs: dict[str, Any] | None = None  # the termination message, when it is a JSON object

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def problem(self) -> bool:
        return self.state == PENDING and bool(self.reason)


def _condition(obj: Obj, kind: str) -> Obj | None:
    conditions: list[Obj] = (obj.get("status") or {}).get("conditions") or []
    for condition in conditions:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def _condition_false(obj: Obj, kind: str) -> Obj | None:
    conditions: list[Obj] = (obj.get("status") or {}).get("conditions") or []
    for condition in conditions:
        if condition.get("type") == kind and condition.get("status") == "False":
            return condition
    return None


def _newest(pods: list[Obj]) -> Obj | None:
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")] or pods
    return max(live, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "", default=None)


def _container_statuses(pod: Obj) -> list[Obj]:
    status = pod.get("status") or {}
    return list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or [])


def _ended(status: Obj) -> Obj | None:
    return (status.get("state") or {}).get("terminated") or (status.get("lastState") or {}).get("terminated")


def _data_refusal(pod: Obj | None) -> tuple[str, str] | None:
    """(code, message) when a data container (fetch-inputs, upload-outputs) failed: its termination
    message's first word is the refusal's code (`input_digest_mismatch`, `output_missing`, ...)."""
    for status in _container_statuses(pod or {}):
        ended = _ended(status) if status.get("name") in DATA_CONTAINERS else None
        if ended and ended.get("exitCode"):
            message = (ended.get("message") or "").strip()
            code = message.split(":", 1)[0].split()[0] if message else ""
            return (code if CODE.match(code) else "data_container_failed"), message
    return None


def _terminated(pod: Obj | None) -> Obj | None:
    """The step's own ending (with data, the step may be an init container), else the first one seen."""
    if pod is None:
        return None
    for status in _container_statuses(pod):
        if status.get("name") == STEP_CONTAINER and _ended(status):
            return _ended(status)
    for status in _container_statuses(pod):
        state, last = status.get("state") or {}, status.get("lastState") or {}
        terminated: Obj | None = state.get("terminated") or last.get("terminated")
        if terminated:
            return terminated
    return None


def pod_problem(pod: Obj) -> Observation | None:
    """Why a Pending pod is not starting, if Kubernetes says so."""
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return Observation(PENDING, reason="unschedulable", message=condition.get("message") or "")
    for container in _container_statuses(pod):
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason") or ""
        if reason in IMAGE_PULL_REASONS:
            return Observation(
                PENDING,
                reason="image_pull_failed",
                message=f"{reason}: {waiting.get('message') or ''}".strip(),
            )
        if reason in CONFIG_REASONS:
            return Observation(
                PENDING,
                reason="container_config_invalid",
                message=f"{reason}: {waiting.get('message') or ''}".strip(),
            )
    return None


def observe_job(job: Obj, pods: list[Obj]) -> Observation:
    pod = _newest(pods)
    terminated = _terminated(pod)
    exit_code = terminated.get("exitCode") if terminated else None
    outputs = parse_outputs((terminated or {}).get("message"), where="termination message")
    if _condition(job, "Complete") or _condition(job, "SuccessCriteriaMet"):
        return Observation(SUCCEEDED, exit_code=0 if exit_code is None else exit_code, outputs=outputs)
    failed = _condition(job, "Failed") or _condition(job, "FailureTarget")
    if failed:
        if failed.get("reason") == "DeadlineExceeded":
            return Observation(
                TIMED_OUT, exit_code=exit_code, reason="timeout", message=failed.get("message") or ""
            )
        if terminated and terminated.get("reason") == "OOMKilled":
            return Observation(
                FAILED,
                exit_code=exit_code,
                reason="oom_killed",
                message="the container exceeded its memory limit and was killed",
            )
        refusal = _data_refusal(pod)
        if refusal is not None:
            return Observation(FAILED, exit_code=exit_code, reason=refusal[0], message=refusal[1])
        own = "" if outputs is not None else ((terminated or {}).get("message") or "").strip()
        # A one-line termination message is the step's own sentence; several lines are the log
        # fallback (FallbackToLogsOnError), already in the report's log tail.
        message = own if own and "\n" not in own else failed.get("message") or ""
        return Observation(FAILED, exit_code=exit_code, message=message, outputs=outputs)
    if pod is None:
        return Observation(PENDING)
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Running":
        return Observation(RUNNING)
    if phase in ("Succeeded", "Failed"):
        # The Job controller has not written its condition yet; it will, and we will see that event.
        return Observation(RUNNING)
    return pod_problem(pod) or Observation(PENDING)


def observe_deployment(deployment: Obj, pods: list[Obj]) -> Observation:
    status = deployment.get("status") or {}
    meta = deployment.get("metadata") or {}
    stalled = _condition_false(deployment, "Progressing")
    if stalled and stalled.get("reason") == "ProgressDeadlineExceeded":
        return Observation(FAILED, reason="progress_deadline_exceeded", message=stalled.get("message") or "")
    replicas = (deployment.get("spec") or {}).get("replicas", 1)
    rolled_out = (
        status.get("observedGeneration", 0) >= meta.get("generation", 0)
        and status.get("updatedReplicas", 0) >= replicas
        and status.get("availableReplicas", 0) >= replicas
        and _condition(deployment, "Available") is not None
    )
    if rolled_out:
        return Observation(SUCCEEDED, exit_code=0)
    for pod in sorted(
        pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "", reverse=True
    ):
        problem = pod_problem(pod)
        if problem is not None:
            return problem
    if any((p.get("status") or {}).get("phase") == "Running" for p in pods):
        return Observation(RUNNING)
    return Observation(PENDING)


def report_body(observation: Observation, log_tail: list[str]) -> dict[str, Any]:
    """The wire report for an observation (docs/wire.md: state, exit_code, log_tail, reason)."""
    body: dict[str, Any] = {
        "state": observation.state if observation.state != PENDING else FAILED,
        "log_tail": list(log_tail),
    }
    if observation.exit_code is not None:
        body["exit_code"] = observation.exit_code
    if observation.reason:
        body["reason"] = observation.reason
    if observation.outputs is not None:
        body["outputs"] = observation.outputs
    if observation.message:
        body["log_tail"] = [*body["log_tail"], f"[forest-controller] {observation.message}"][-MAX_LOG_LINES:]
    return body
