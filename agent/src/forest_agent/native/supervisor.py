"""Supervises one workload process: start, probes, restart with exponential backoff, crash loop,
graceful stop. One thread per supervised process; the state lives in `process_states`.

Spawn failures are recorded and backed off like early exits; nothing here raises into the agent.
Listeners get every transition and every probe verdict change, and derive the generation's state.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from forest_agent.lifecycle import Lifecycle, TransitionEvent
from forest_agent.native import processes
from forest_agent.native.probes import FAILING, PASSING, UNKNOWN, ProbeTracker, check_once
from forest_agent.native.process_states import ALLOWED, ProcessState
from forest_agent.wire.messages import Probe, RestartPolicy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProcessSpec:
    name: str
    argv: list[str]
    cwd: Path
    env: dict[str, str]
    log_path: Path
    restart: RestartPolicy
    readiness: Probe | None = None
    liveness: Probe | None = None
    stop_grace_s: float | None = None  # the generation's own; else the agent's kill_grace_s


class ProcessWatch(Protocol):
    """Told of every process group the supervisor starts or adopts and of each it has seen end
    (the workload guardian, which stops them if the agent dies without doing so)."""

    def started(self, pid: int, start_time: float, grace_s: float) -> None: ...

    def ended(self, pid: int) -> None: ...


class Adopted:
    """A workload process left running by an earlier agent (`--leave-workloads-running`), watched
    by pid and start time: it is not our child, so its exit status is unknown (reported as -1)."""

    def __init__(self, pid: int, start_time: float) -> None:
        self.pid = pid
        self.start_time = start_time

    def poll(self) -> int | None:
        return None if processes.same_process_alive(self.pid, self.start_time) else -1


@dataclass(frozen=True)
class SupervisorTiming:
    startsecs: float = 1.0  # up this long = started (supervisord's startsecs)
    stable_after_s: float = 10.0  # up this long = the failure streak is forgiven
    kill_grace_s: float = 10.0
    tick_s: float = 0.05


class Supervisor:
    def __init__(
        self,
        spec: ProcessSpec,
        *,
        timing: SupervisorTiming | None = None,
        on_change: Callable[[Supervisor], None] | None = None,
        watch: ProcessWatch | None = None,
        hurry: threading.Event | None = None,
        adopt: Adopted | None = None,
    ) -> None:
        self.spec = spec
        self.timing = timing or SupervisorTiming()
        self._on_change = on_change
        self._watch = watch
        self._hurry = hurry
        self._adopt = adopt
        self._detached = False
        self.lifecycle: Lifecycle[ProcessState] = Lifecycle(
            f"process {spec.name}", ProcessState.STOPPED, ALLOWED, self._on_transition
        )
        self.readiness = ProbeTracker(spec.readiness, fast_start=True) if spec.readiness else None
        self.liveness = ProbeTracker(spec.liveness) if spec.liveness else None
        self.restarts = 0
        self.failures = 0
        self.last_exit: int | None = None
        self.last_reason: str | None = None
        self._popen: Any = None
        self._started_at = 0.0
        self._wake_at = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"supervise-{spec.name}", daemon=True)

    # -- public --------------------------------------------------------------------------------
    @property
    def state(self) -> ProcessState:
        return self.lifecycle.state

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    @property
    def ready(self) -> bool:
        if self.state is not ProcessState.RUNNING:
            return False
        return self.readiness is None or self.readiness.status == PASSING

    def probe_status(self) -> dict[str, str]:
        return {
            "readiness": self.readiness.status if self.readiness else UNKNOWN,
            "liveness": self.liveness.status if self.liveness else UNKNOWN,
        }

    def start(self) -> None:
        self._thread.start()

    @property
    def grace_s(self) -> float:
        return self.spec.stop_grace_s if self.spec.stop_grace_s is not None else self.timing.kill_grace_s

    def stop(self, timeout_s: float | None = None) -> None:
        """Graceful stop: SIGTERM the group, wait its grace, SIGKILL; returns once stopped."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s if timeout_s is not None else self.grace_s + 10.0)
        elif self.state is not ProcessState.STOPPED:
            self._shutdown()

    def detach(self) -> None:
        """Stop supervising and leave the process running (`--leave-workloads-running`)."""
        self._detached = True
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10.0)

    # -- loop ----------------------------------------------------------------------------------
    def _on_transition(self, event: TransitionEvent[ProcessState]) -> None:
        log.info(
            "workload %s: %s -> %s%s",
            self.spec.name,
            event.old.value,
            event.new.value,
            f" ({event.detail})" if event.detail else "",
        )
        self._notify()

    def _notify(self) -> None:
        if self._on_change is not None:
            try:
                self._on_change(self)
            except Exception:
                log.exception("workload %s: status listener failed", self.spec.name)

    def _loop(self) -> None:
        if self._adopt is not None:
            self._take_over(self._adopt)
        else:
            self._spawn()
        while not self._stop.is_set():
            self._step(time.monotonic())
            self._stop.wait(self.timing.tick_s)
        if not self._detached:
            self._shutdown()

    def _step(self, now: float) -> None:
        state = self.state
        if state in (ProcessState.BACKOFF, ProcessState.CRASH_LOOP):
            if now >= self._wake_at:
                self._spawn()
            return
        code = self._popen.poll() if self._popen is not None else None
        if state is ProcessState.STARTING:
            if code is not None:
                self._reap_group()
                self._failed(f"exited with {code} while starting", code)
            elif now - self._started_at >= self.timing.startsecs:
                self.lifecycle.transition(ProcessState.RUNNING, f"pid {self._popen.pid}")
            else:
                self._probe(now)
            return
        if state is ProcessState.RUNNING:
            if code is None and self._probe(now):
                return
            if code is None:
                return
            self.lifecycle.transition(ProcessState.EXITED, f"exit {code}")
            self._reap_group()
            self._after_exit(now, code)

    def _probe(self, now: float) -> bool:
        """Run due probes; True if liveness failed and the process was killed (and handled)."""
        changed = False
        if self.readiness and self.readiness.due(now):
            changed |= self.readiness.record(self._check(self.readiness), now)
        if self.liveness and self.liveness.due(now) and self.state is ProcessState.RUNNING:
            changed |= self.liveness.record(self._check(self.liveness), now)
            if self.liveness.status == FAILING:
                log.warning(
                    "workload %s: liveness failed %d times; restarting",
                    self.spec.name,
                    self.liveness.consecutive_failures,
                )
                self._kill_group()
                self.lifecycle.transition(ProcessState.EXITED, "liveness_failed")
                self._after_exit(
                    time.monotonic(), self._popen.poll() if self._popen else None, reason="liveness_failed"
                )
                return True
        if changed:
            self._notify()
        return False

    def _check(self, tracker: ProbeTracker) -> bool:
        return check_once(tracker.probe, cwd=self.spec.cwd, env=self.spec.env)

    def _after_exit(self, now: float, code: int | None, reason: str | None = None) -> None:
        self.last_exit = code
        if now - self._started_at >= self.timing.stable_after_s and reason is None:
            self.failures = 0  # it ran long enough; this exit starts a fresh streak
        self._failed(reason or f"exited with {code}", code)

    def _failed(self, why: str, code: int | None) -> None:
        self.failures += 1
        self.last_exit = code
        self.last_reason = why
        policy = self.spec.restart
        delay = min(policy.backoff_max_s, policy.backoff_initial_s * (2 ** (self.failures - 1)))
        if self.failures >= policy.crash_loop_after:
            self._wake_at = time.monotonic() + policy.backoff_max_s
            self.lifecycle.transition(ProcessState.CRASH_LOOP, f"{why}; failure {self.failures} in a row")
        else:
            self._wake_at = time.monotonic() + delay
            self.lifecycle.transition(ProcessState.BACKOFF, f"{why}; retry in {delay:.1f}s")

    def _spawn(self) -> None:
        for tracker in (self.readiness, self.liveness):
            if tracker is not None:
                tracker.reset()
        if self.state is not ProcessState.STOPPED:
            self.restarts += 1
        self.lifecycle.transition(ProcessState.STARTING)
        self._started_at = time.monotonic()
        try:
            self._popen = processes.spawn(
                self.spec.argv, cwd=self.spec.cwd, env=self.spec.env, log_path=self.spec.log_path
            )
        except OSError as exc:
            self._popen = None
            self._failed(f"spawn failed: {exc.strerror}", None)
            return
        started = processes.start_time(self._popen.pid)
        if self._watch is not None and started is not None:
            self._watch.started(self._popen.pid, started, self.grace_s)

    def _take_over(self, adopted: Adopted) -> None:
        self._popen = adopted
        self._started_at = time.monotonic()
        self.lifecycle.transition(ProcessState.STARTING, f"adopted pid {adopted.pid}")
        if self._watch is not None:
            self._watch.started(adopted.pid, adopted.start_time, self.grace_s)

    def _reap_group(self) -> None:
        """The leader ended: what it left behind in its group goes too (supervisord's killasgroup),
        so a restart never finds the old generation's children holding its port."""
        popen = self._popen
        if popen is None:
            return
        if processes.group_alive(popen.pid):
            processes.terminate_group(popen.pid, is_done=lambda: not processes.group_alive(popen.pid),
                                      grace_s=self.grace_s, hurry=self._hurry)
        if self._watch is not None:
            self._watch.ended(popen.pid)

    def _kill_group(self) -> None:
        popen = self._popen
        if popen is None:
            return
        if popen.poll() is not None:
            processes.signal_group(popen.pid, signal.SIGKILL)
        else:
            processes.terminate_group(
                popen.pid,
                is_done=lambda: popen.poll() is not None and not processes.group_alive(popen.pid),
                grace_s=self.grace_s,
                hurry=self._hurry,
            )
        if self._watch is not None:
            self._watch.ended(popen.pid)

    def _shutdown(self) -> None:
        if self.state is ProcessState.STOPPED:
            return
        self.lifecycle.transition(ProcessState.STOPPING)
        self._kill_group()
        self.lifecycle.transition(ProcessState.STOPPED)
