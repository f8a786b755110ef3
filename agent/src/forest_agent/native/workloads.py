"""Native workloads: turn each generation Host sends into a live, supervised process.

Per workload, generations are applied one at a time by that workload's own worker thread:
install (download, verify, extract) beside the running generation, write secrets, stop the old
process, switch `current` atomically, start and supervise the new one, point nginx at it, and report
every state change. A refused bundle leaves the running generation untouched. A generation already
on disk (the previous one, kept for rollback) is re-activated without downloading again.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forest_agent.errors import BundleRefused, IngressRefused
from forest_agent.lifecycle import Lifecycle, TransitionEvent
from forest_agent.logring import Redactor
from forest_agent.native import processes
from forest_agent.native.bundles import BundleInstaller
from forest_agent.native.generation_states import ALLOWED, GenerationState
from forest_agent.native.generations import GenerationStore
from forest_agent.native.nginx import NginxProxyManager
from forest_agent.native.process_states import ProcessState
from forest_agent.native.status_reporter import StatusReporter
from forest_agent.native.supervisor import Adopted, ProcessSpec, ProcessWatch, Supervisor, SupervisorTiming
from forest_agent.state import write_private_json
from forest_agent.wire.messages import Generation, MessageInvalid

log = logging.getLogger(__name__)

SECRETS_DIR_ENV = "FOREST_SECRETS_DIR"
LOG_FILE = "output.log"


PROCESS_FILE = "process.json"


@dataclass(frozen=True)
class WorkloadSettings:
    enabled: bool
    timing: SupervisorTiming = field(default_factory=SupervisorTiming)
    log_tail_lines: int = 50
    # `--leave-workloads-running`: the agent's stop leaves processes up; the next agent adopts them.
    leave_running: bool = False


class _Recorder:
    """Keeps `process.json` (pid and start time) in the generation's directory, so that a later agent
    can adopt the process, and passes each start and end on to the guardian."""

    def __init__(self, directory: Path, guardian: ProcessWatch | None) -> None:
        self.path = directory / PROCESS_FILE
        self.guardian = guardian

    def started(self, pid: int, start_time: float, grace_s: float) -> None:
        write_private_json(self.path, {"pid": pid, "start_time": start_time})
        if self.guardian is not None:
            self.guardian.started(pid, start_time, grace_s)

    def ended(self, pid: int) -> None:
        self.path.unlink(missing_ok=True)
        if self.guardian is not None:
            self.guardian.ended(pid)


def _adoptable(directory: Path) -> Adopted | None:
    """The process a previous agent left running for this generation, if it is still that process."""
    try:
        raw = json.loads((directory / PROCESS_FILE).read_text())
        pid, started = int(raw["pid"]), float(raw["start_time"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Adopted(pid, started) if processes.same_process_alive(pid, started) else None


@dataclass
class ActiveGeneration:
    generation: Generation
    lifecycle: Lifecycle[GenerationState]
    directory: Path
    supervisor: Supervisor | None = None
    retired: bool = False
    reason: str | None = None
    message: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class WorkloadManager:
    def __init__(
        self,
        *,
        store: GenerationStore,
        installer: BundleInstaller,
        reporter: StatusReporter,
        redactor: Redactor,
        settings: WorkloadSettings,
        nginx: NginxProxyManager | None = None,
        guardian: ProcessWatch | None = None,
        hurry: threading.Event | None = None,
    ) -> None:
        self.guardian = guardian
        self.hurry = hurry
        self.store = store
        self.installer = installer
        self.reporter = reporter
        self.redactor = redactor
        self.settings = settings
        self.nginx = nginx
        self._active: dict[str, ActiveGeneration] = {}
        self._refused: set[str] = set()
        self._queues: dict[str, queue.Queue[Generation | None]] = {}
        self._workers: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    # -- intake --------------------------------------------------------------------------------
    def apply(self, raw: dict[str, Any]) -> None:
        """Take one generation from `changes.workloads`; never blocks the poll loop."""
        generation_id = raw.get("generation_id") if isinstance(raw, dict) else None
        if isinstance(generation_id, str) and generation_id in self._refused:
            return
        try:
            generation = Generation.parse(raw)
        except MessageInvalid as exc:
            log.warning("workload generation refused: %s", exc.message)
            if isinstance(generation_id, str) and generation_id:
                self._refused.add(generation_id)
                self._report_refusal(generation_id, "payload_invalid", exc.message)
            return
        self.redactor.add(generation.secrets.values())
        if not self.settings.enabled:
            self._refused.add(generation.generation_id)
            self._report_refusal(
                generation.generation_id,
                "native_workloads_disabled",
                "this agent runs without --enable-native-workloads",
            )
            return
        with self._lock:
            active = self._active.get(generation.workload)
            if active is not None and active.generation.generation_id == generation.generation_id:
                return
            self._queue_for(generation.workload).put(generation)

    def restore(self) -> None:
        """After an agent restart, bring back each workload's current generation from disk."""
        if not self.settings.enabled:
            return
        for workload in self.store.workloads():
            generation_id = self.store.current(workload)
            if generation_id is None or not self.store.installed(workload, generation_id):
                continue
            try:
                spec = self.store.read_spec(workload, generation_id)
                spec["secrets"] = self.store.read_secrets(workload, generation_id)
                generation = Generation.parse(spec)
            except (OSError, ValueError, MessageInvalid) as exc:
                log.error("cannot restore workload %s generation %s: %s", workload, generation_id, exc)
                continue
            self.redactor.add(generation.secrets.values())
            log.info("restoring workload %s generation %s from disk", workload, generation_id)
            self._queue_for(workload).put(generation)

    def _queue_for(self, workload: str) -> queue.Queue[Generation | None]:
        if workload not in self._queues:
            self._queues[workload] = queue.Queue()
            worker = threading.Thread(
                target=self._work, args=(workload,), name=f"workload-{workload}", daemon=True
            )
            self._workers[workload] = worker
            worker.start()
        return self._queues[workload]

    def _work(self, workload: str) -> None:
        q = self._queues[workload]
        while True:
            generation = q.get()
            if generation is None or self._stopping.is_set():
                return
            try:
                self._activate(generation)
            except Exception:
                log.exception(
                    "workload %s: generation %s could not be applied", workload, generation.generation_id
                )

    # -- activation ----------------------------------------------------------------------------
    def _activate(self, generation: Generation) -> None:
        workload, generation_id = generation.workload, generation.generation_id
        with self._lock:
            old = self._active.get(workload)
        if old is not None and old.generation.generation_id == generation_id:
            return
        entry = ActiveGeneration(
            generation=generation,
            directory=self.store.generation_dir(workload, generation_id),
            lifecycle=Lifecycle(f"generation {generation_id}", GenerationState.PENDING, ALLOWED),
        )
        self._report(entry)
        if self.store.installed(workload, generation_id):
            self.store.write_secrets(entry.directory, generation.secrets)
        else:
            partial = self.store.begin(workload, generation_id)
            try:
                self.installer.install(generation.bundle, partial)
                self.store.write_secrets(partial, generation.secrets)
                self.store.commit(workload, generation_id, partial, generation.raw)
            except BundleRefused as exc:
                self.store.discard(partial)
                self._refused.add(generation_id)
                log.warning("workload %s generation %s refused: %s", workload, generation_id, exc)
                entry.reason, entry.message = exc.code, exc.message
                self._move(entry, GenerationState.FAILED)
                return
        if old is not None:
            self._retire(old, GenerationState.SUPERSEDED)
        self.store.switch(workload, generation_id)
        for pruned in self.store.prune(workload):
            log.info("workload %s: pruned generation %s", workload, pruned)
        self._start(entry)
        self._apply_ingress(entry, old)

    def _start(self, entry: ActiveGeneration) -> None:
        generation = entry.generation
        app = entry.directory / "app"
        home = entry.directory / "home"
        home.mkdir(mode=0o700, exist_ok=True)
        env = processes.clean_env(generation.env, home)
        if generation.secrets_mode == "env":
            env.update(generation.secrets)
        else:
            env[SECRETS_DIR_ENV] = str(entry.directory / "secrets")
        argv = list(generation.command)
        if not argv[0].startswith("/") and "/" in argv[0]:
            argv[0] = str(app / argv[0])  # relative paths resolve in the generation dir
        spec = ProcessSpec(
            name=generation.workload,
            argv=argv,
            cwd=app,
            env=env,
            log_path=entry.directory / LOG_FILE,
            restart=generation.restart,
            readiness=generation.readiness,
            liveness=generation.liveness,
            stop_grace_s=generation.stop_grace_s,
        )
        adopted = _adoptable(entry.directory)
        if adopted is not None:
            log.info("workload %s: adopting pid %d left running by the previous agent",
                     generation.workload, adopted.pid)
        entry.supervisor = Supervisor(
            spec,
            timing=self.settings.timing,
            on_change=lambda supervisor: self._on_process(entry, supervisor),
            watch=_Recorder(entry.directory, self.guardian),
            hurry=self.hurry,
            adopt=adopted,
        )
        with self._lock:
            if self._stopping.is_set():
                return  # the agent is stopping: starting now would leave a process nobody stops
            self._active[generation.workload] = entry
        self._move(entry, GenerationState.STARTING)
        entry.supervisor.start()

    def _apply_ingress(self, entry: ActiveGeneration, old: ActiveGeneration | None) -> None:
        ingress = entry.generation.ingress
        workload = entry.generation.workload
        if ingress is None:
            if old is not None and old.generation.ingress is not None and self.nginx is not None:
                try:
                    self.nginx.remove(workload)
                except IngressRefused as exc:
                    log.error("workload %s: could not remove ingress: %s", workload, exc)
            return
        if self.nginx is None:
            entry.reason = "ingress_unavailable"
            entry.message = "this agent has no --nginx-conf-dir; the workload runs without ingress"
            log.warning("workload %s: %s", workload, entry.message)
        else:
            try:
                self.nginx.apply(workload, ingress)
            except IngressRefused as exc:
                entry.reason, entry.message = exc.code, exc.message
                log.error("workload %s: %s", workload, exc.message)
        self._report(entry)

    def _retire(self, entry: ActiveGeneration, state: GenerationState) -> None:
        entry.retired = True
        if entry.supervisor is not None:
            entry.supervisor.stop()
        with entry.lock:
            if entry.lifecycle.can(state):
                self._move(entry, state)

    # -- status --------------------------------------------------------------------------------
    def _on_process(self, entry: ActiveGeneration, supervisor: Supervisor) -> None:
        if entry.retired:
            return
        state = supervisor.state
        current = entry.lifecycle.state
        target: GenerationState | None
        if state is ProcessState.CRASH_LOOP:
            target = GenerationState.CRASH_LOOP
        elif state is ProcessState.RUNNING and supervisor.ready:
            target = GenerationState.LIVE
        elif state in (
            ProcessState.RUNNING,
            ProcessState.STARTING,
            ProcessState.BACKOFF,
            ProcessState.EXITED,
        ):
            # While crash-looping, retries do not count as "starting" until one becomes live.
            target = None if current is GenerationState.CRASH_LOOP else GenerationState.STARTING
        else:
            target = None
        if state is ProcessState.CRASH_LOOP or state is ProcessState.BACKOFF:
            entry.message = supervisor.last_reason
        with entry.lock:
            if target is not None and target is not current and entry.lifecycle.can(target):
                self._move(entry, target)
                return
        self._report(entry)  # a probe verdict or restart count changed

    def _move(self, entry: ActiveGeneration, state: GenerationState) -> None:
        event = entry.lifecycle.transition(state)
        self._log_transition(entry, event)
        self._report(entry)

    @staticmethod
    def _log_transition(entry: ActiveGeneration, event: TransitionEvent[GenerationState]) -> None:
        log.info(
            "workload %s generation %s: %s -> %s",
            entry.generation.workload,
            entry.generation.generation_id,
            event.old.value,
            event.new.value,
        )

    def _body(self, entry: ActiveGeneration) -> dict[str, Any]:
        supervisor = entry.supervisor
        state = entry.lifecycle.state
        body: dict[str, Any] = {
            "state": state.value,
            "live": state is GenerationState.LIVE,
            "restarts": supervisor.restarts if supervisor else 0,
            "probes": supervisor.probe_status()
            if supervisor
            else {"readiness": "unknown", "liveness": "unknown"},
            "log_tail": [
                self.redactor.redact(line)
                for line in processes.read_tail(entry.directory / LOG_FILE, self.settings.log_tail_lines)
            ],
        }
        if entry.reason:
            body["reason"] = entry.reason
        if entry.message:
            body["message"] = self.redactor.redact(entry.message)
        return body

    def _report(self, entry: ActiveGeneration) -> None:
        self.reporter.submit(entry.generation.generation_id, self._body(entry))

    def _report_refusal(self, generation_id: str, reason: str, message: str) -> None:
        self.reporter.submit(
            generation_id,
            {
                "state": "failed",
                "live": False,
                "restarts": 0,
                "probes": {"readiness": "unknown", "liveness": "unknown"},
                "reason": reason,
                "message": self.redactor.redact(message),
            },
        )

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            entries = list(self._active.values())
        return [
            {
                "workload": e.generation.workload,
                "generation_id": e.generation.generation_id,
                "generation": e.generation.generation,
                "state": e.lifecycle.state.value,
                "live": e.lifecycle.state is GenerationState.LIVE,
                "pid": e.supervisor.pid if e.supervisor else None,
                "restarts": e.supervisor.restarts if e.supervisor else 0,
            }
            for e in entries
        ]

    def stop_all(self) -> None:
        """Agent shutdown: each workload's process group stopped with its grace, in parallel (or, with
        `leave_running`, left running for the next agent to adopt); `restore` brings them back."""
        with self._lock:
            self._stopping.set()
            entries = list(self._active.values())
        for q in list(self._queues.values()):
            q.put(None)
        if self.settings.leave_running:
            for entry in entries:
                if entry.supervisor is not None:
                    entry.supervisor.detach()
            log.info("leaving %d workload(s) running for the next agent", len(entries))
            return
        threads = [threading.Thread(target=self._retire, args=(e, GenerationState.STOPPED)) for e in entries]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
