"""Native jobs: claim, run in a clean process group, enforce timeout and cancellation, report.

One thread per job. The command runs under a tiny `/bin/sh` wrapper that writes the exit code to a
file in the job directory, so an agent that was restarted while the job ran can still learn how it
ended (it is not the job's parent any more and cannot `wait` for it).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from forest_agent import data
from forest_agent.backoff import Backoff
from forest_agent.errors import DataRefused
from forest_agent.lifecycle import Lifecycle, TransitionEvent
from forest_agent.native import processes
from forest_agent.native.devices import nvidia_device_env
from forest_agent.native.job_states import ALLOWED, TERMINAL, JobState
from forest_agent.native.journal import JobJournal, JournalEntry, Outcome
from forest_agent.oskit import Clock
from forest_agent.outputs import MAX_OUTPUTS_BYTES, OUTPUTS_FILE_ENV, needs_outputs_env, parse_outputs
from forest_agent.wire.client import WireClient, WireError
from forest_agent.wire.messages import Job, MessageInvalid

log = logging.getLogger(__name__)

NATIVE_JOB = "native.job"
EXIT_FILE = "exit_code"
LOG_FILE = "output.log"
OUTPUTS_FILE = "outputs.json"
# `$1` is the exit-code file; the rest is the job's argv. The wrapper stays the group leader.
_WRAPPER = 'f=$1; shift; "$@"; rc=$?; echo "$rc" > "$f"; exit "$rc"'


@dataclass(frozen=True)
class JobSettings:
    enabled: bool
    kill_grace_s: float = 10.0
    log_tail_lines: int = 50
    running_report_interval_s: float = 15.0
    poll_interval_s: float = 0.05
    max_input_bytes: int = data.DEFAULT_MAX_INPUT_BYTES


class _ProcessWatch:
    """Either our own child (Popen) or a re-attached process from before a restart."""

    def __init__(self, *, pid: int, start: float, exit_file: Path, popen: Any = None) -> None:
        self.pid = pid
        self.start = start
        self.exit_file = exit_file
        self.popen = popen

    def exit_code(self) -> int | None:
        """The job's exit code once it ended (negative: killed by that signal), else None."""
        if self.popen is not None:
            code = self.popen.poll()
            if code is None:
                return None
            recorded = _read_exit_file(self.exit_file)
            return recorded if recorded is not None else code
        if processes.same_process_alive(self.pid, self.start):
            return None
        recorded = _read_exit_file(self.exit_file)
        return recorded if recorded is not None else -signal.SIGKILL

    def done(self) -> bool:
        """The job and everything left in its process group are gone (the grace period covers all)."""
        return self.exit_code() is not None and not processes.group_alive(self.pid)


def _read_exit_file(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.lstrip("-").isdigit() else None


class JobRunner(threading.Thread):
    def __init__(
        self, manager: JobManager, raw: dict[str, Any], *, reattach: JournalEntry | None = None
    ) -> None:
        job_id = str(raw.get("job_id") or (reattach.job_id if reattach else "?"))
        super().__init__(name=f"job-{job_id}", daemon=True)
        self.manager = manager
        self.raw = raw
        self.job_id = job_id
        self.cancel_requested = threading.Event()
        self.reattach = reattach
        initial = JobState.RUNNING if reattach else JobState.RECEIVED
        self.lifecycle: Lifecycle[JobState] = Lifecycle(
            f"job {job_id}", initial, ALLOWED, self._on_transition
        )

    def _on_transition(self, event: TransitionEvent[JobState]) -> None:
        log.info(
            "job %s: %s -> %s%s",
            self.job_id,
            event.old.value,
            event.new.value,
            f" ({event.detail})" if event.detail else "",
        )

    @property
    def journal(self) -> JobJournal:
        return self.manager.journal

    # -- thread body ---------------------------------------------------------------------------
    def run(self) -> None:
        try:
            if self.reattach is not None:
                self._resume(self.reattach)
            else:
                self._run_new()
        except Exception:
            log.exception("job %s: unexpected error in the job runner", self.job_id)
        finally:
            self.manager.forget(self.job_id)

    def _run_new(self) -> None:
        wire = self.manager.wire
        try:
            claimed = wire.claim(self.job_id)
        except WireError as exc:
            if exc.code == "already_claimed" or exc.status == 409:
                self.lifecycle.transition(JobState.CLAIM_LOST, exc.code)
            else:
                # Host will offer the job again on a later poll; nothing was started.
                self.lifecycle.transition(JobState.ABANDONED, exc.code)
            return
        self.lifecycle.transition(JobState.CLAIMED)
        entry = JournalEntry(job_id=self.job_id, phase="claimed", job=claimed)
        self.journal.write(entry)
        refusal = self._refusal(claimed)
        if isinstance(refusal, Outcome):
            self._finish(entry, refusal, JobState.FAILED, detail=refusal.reason or "")
            return
        job = refusal
        if self.cancel_requested.is_set():
            self._finish(entry, Outcome("cancelled", reason="cancelled"), JobState.CANCELLED)
            return
        self._start(entry, job)

    def _refusal(self, claimed: dict[str, Any]) -> Job | Outcome:
        """The parsed job, or why this agent will not run it (a failed outcome with a reason)."""
        try:
            job = Job.parse(claimed)
        except MessageInvalid as exc:
            log.warning("job %s: %s", self.job_id, exc.message)
            return Outcome("failed", reason="payload_invalid")
        if job.change_kind != NATIVE_JOB:
            log.warning("job %s: change kind %s is not run by a native agent", self.job_id, job.change_kind)
            return Outcome("failed", reason="unsupported_change_kind")
        if not self.manager.settings.enabled:
            log.warning("job %s: native jobs are disabled on this agent (--enable-native-jobs)", self.job_id)
            return Outcome("failed", reason="native_jobs_disabled")
        if job.image:
            log.warning("job %s: a native job runs a host command, not an image", self.job_id)
            return Outcome("failed", reason="unsupported_payload")
        return job

    def _start(self, entry: JournalEntry, job: Job) -> None:
        job_dir = self.journal.job_dir(self.job_id)
        home = job_dir / "home"
        home.mkdir(mode=0o700, exist_ok=True)
        cwd = home / job.workdir if job.workdir else home
        cwd.mkdir(parents=True, exist_ok=True)
        env = processes.clean_env(job.env, home)
        env.update(needs_outputs_env(job.needs_outputs))
        env[OUTPUTS_FILE_ENV] = str(job_dir / OUTPUTS_FILE)
        env.update(nvidia_device_env(job.accelerator_devices))
        env.update(data.data_env(job.inputs, job.outputs, home))
        if job.inputs:
            try:
                self.manager.fetch_inputs(job, home)
            except DataRefused as exc:
                log.warning("job %s: %s", self.job_id, exc)
                self._finish(entry, Outcome("failed", reason=exc.code), JobState.FAILED, detail=exc.code)
                return
            if self.cancel_requested.is_set():
                self._finish(entry, Outcome("cancelled", reason="cancelled"), JobState.CANCELLED)
                return
        if not _resolvable(job.command[0], cwd, env["PATH"]):
            log.warning("job %s: command %r not found or not executable", self.job_id, job.command[0])
            self._finish(
                entry,
                Outcome("failed", exit_code=127, reason="spawn_failed"),
                JobState.FAILED,
                detail="spawn_failed",
            )
            return
        exit_file = job_dir / EXIT_FILE
        try:
            popen = processes.spawn(
                ["/bin/sh", "-c", _WRAPPER, "forest-job", str(exit_file), *job.command],
                cwd=cwd,
                env=env,
                log_path=job_dir / LOG_FILE,
            )
        except OSError as exc:
            log.warning("job %s: spawn failed: %s", self.job_id, exc.strerror)
            self._finish(
                entry, Outcome("failed", reason="spawn_failed"), JobState.FAILED, detail="spawn_failed"
            )
            return
        started = processes.start_time(popen.pid) or self.manager.clock.wall()
        entry.phase = "running"
        entry.pid = popen.pid
        entry.pgid = popen.pid
        entry.start_time = started
        entry.deadline_wall = self.manager.clock.wall() + job.timeout_s
        self.journal.write(entry)
        self.lifecycle.transition(JobState.RUNNING, f"pid {popen.pid}")
        self._report({"state": "running", "log_tail": []}, final=False)
        self._watch(entry, _ProcessWatch(pid=popen.pid, start=started, exit_file=exit_file, popen=popen))

    def _resume(self, entry: JournalEntry) -> None:
        exit_file = self.journal.job_dir(self.job_id) / EXIT_FILE
        log.info("job %s: re-attached to pid %s after an agent restart", self.job_id, entry.pid)
        assert entry.pid is not None and entry.start_time is not None
        self._watch(entry, _ProcessWatch(pid=entry.pid, start=entry.start_time, exit_file=exit_file))

    def _watch(self, entry: JournalEntry, proc: _ProcessWatch) -> None:
        settings = self.manager.settings
        clock = self.manager.clock
        next_report = clock.monotonic() + settings.running_report_interval_s
        # Deadlines are stored as wall time (they must survive a restart); compare in wall time.
        own = proc.popen is not None
        while True:
            code = proc.exit_code()
            if code is not None:
                if code == 0:
                    self._finish(entry, Outcome("succeeded", exit_code=0), JobState.SUCCEEDED, own_group=own)
                else:
                    self._finish(
                        entry,
                        Outcome("failed", exit_code=code),
                        JobState.FAILED,
                        detail=f"exit {code}",
                        own_group=own,
                    )
                return
            if self.cancel_requested.is_set():
                code = self._terminate(entry, proc)
                self._finish(
                    entry,
                    Outcome("cancelled", exit_code=code, reason="cancelled"),
                    JobState.CANCELLED,
                    own_group=own,
                )
                return
            if entry.deadline_wall is not None and clock.wall() >= entry.deadline_wall:
                code = self._terminate(entry, proc)
                self._finish(
                    entry,
                    Outcome("timed_out", exit_code=code, reason="timeout"),
                    JobState.TIMED_OUT,
                    own_group=own,
                )
                return
            if self.manager.stopping.is_set():
                # Agent shutdown: the job keeps running; the journal lets the next agent re-attach.
                log.info("job %s: left running for the next agent (journal kept)", self.job_id)
                return
            if clock.monotonic() >= next_report:
                next_report = clock.monotonic() + settings.running_report_interval_s
                self._report({"state": "running", "log_tail": self._tail()}, final=False)
            time.sleep(settings.poll_interval_s)

    def _terminate(self, entry: JournalEntry, proc: _ProcessWatch) -> int | None:
        assert entry.pgid is not None
        how = processes.terminate_group(
            entry.pgid, is_done=proc.done, grace_s=self.manager.settings.kill_grace_s
        )
        log.info("job %s: process group %s %s", self.job_id, entry.pgid, how)
        return proc.exit_code()

    def _finish(
        self,
        entry: JournalEntry,
        outcome: Outcome,
        state: JobState,
        *,
        detail: str = "",
        own_group: bool = False,
    ) -> None:
        if own_group and entry.pgid is not None:
            # Our child just ended; anything it left behind in its group goes with it. Never done for
            # a group we did not start in this process: its pgid may have been recycled.
            processes.signal_group(entry.pgid, signal.SIGKILL)
        if outcome.state == "succeeded" and entry.outcome is None:
            # Only a command that succeeded leaves results; a cancelled or timed-out one uploads nothing.
            outcome, state, detail = self._upload_outputs(entry, outcome, state, detail)
        entry.phase = "finished"
        entry.outcome = outcome
        self.journal.write(entry)
        if self.lifecycle.state not in TERMINAL:
            self.lifecycle.transition(state, detail)
        body = outcome.report_body(self._tail())
        outputs = _read_outputs(self.journal.job_dir(self.job_id) / OUTPUTS_FILE, self.job_id)
        if outputs is not None:
            body["outputs"] = outputs
        if self._report(body, final=True):
            self.journal.remove(self.job_id)

    def _upload_outputs(
        self, entry: JournalEntry, outcome: Outcome, state: JobState, detail: str
    ) -> tuple[Outcome, JobState, str]:
        """Upload the job's declared outputs; a missing or refused one turns success into failure."""
        try:
            job = Job.parse(entry.job)
        except MessageInvalid:
            return outcome, state, detail
        if not job.outputs:
            return outcome, state, detail
        job_dir = self.journal.job_dir(self.job_id)
        try:
            self.manager.upload_outputs(job, job_dir / "home", job_dir)
        except DataRefused as exc:
            log.warning("job %s: %s", self.job_id, exc)
            return Outcome("failed", exit_code=outcome.exit_code, reason=exc.code), JobState.FAILED, exc.code
        return outcome, state, detail

    def _tail(self) -> list[str]:
        return processes.read_tail(
            self.journal.job_dir(self.job_id) / LOG_FILE, self.manager.settings.log_tail_lines
        )

    def _report(self, body: dict[str, Any], *, final: bool) -> bool:
        """Send a report; a terminal one is retried until Host accepts it or the agent stops."""
        backoff = Backoff(0.5, 30.0)
        while True:
            try:
                self.manager.wire.report(self.job_id, body)
                return True
            except WireError as exc:
                if not final:
                    log.info("job %s: progress report failed (%s); continuing", self.job_id, exc.code)
                    return False
                if not exc.retryable:
                    log.error("job %s: Host refused the terminal report: %s", self.job_id, exc)
                    return True
                delay = backoff.next_delay(exc.retry_after_s)
                log.warning(
                    "job %s: terminal report failed (%s); retrying in %.1fs", self.job_id, exc.code, delay
                )
                if self.manager.stopping.wait(delay):
                    log.info("job %s: terminal report kept in the journal for the next agent", self.job_id)
                    return False


def _read_outputs(path: Path, job_id: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read(MAX_OUTPUTS_BYTES + 1)
    except (FileNotFoundError, IsADirectoryError):
        return None
    return parse_outputs(text, where=f"job {job_id}")


def _resolvable(command: str, cwd: Path, path: str) -> bool:
    if "/" in command:
        target = Path(command) if command.startswith("/") else cwd / command
        return target.is_file() and os.access(target, os.X_OK)
    return shutil.which(command, path=path) is not None


class JobManager:
    """Owns the running job threads, routes cancellations, and recovers the journal on start."""

    def __init__(
        self, *, wire: WireClient, journal: JobJournal, settings: JobSettings, clock: Clock | None = None
    ) -> None:
        self.wire = wire
        self.journal = journal
        self.settings = settings
        self.clock = clock or Clock()
        self.stopping = threading.Event()
        self._runners: dict[str, JobRunner] = {}
        self._lock = threading.Lock()
        self._data_http: httpx.Client | None = None

    def _data_client(self) -> httpx.Client:
        """One HTTP client for step data (long reads: a large blob streams for a while)."""
        with self._lock:
            if self._data_http is None:
                self._data_http = httpx.Client(
                    timeout=httpx.Timeout(30.0, read=300.0), follow_redirects=False
                )
            return self._data_http

    def fetch_inputs(self, job: Job, root: Path) -> int:
        return data.fetch_inputs(
            self._data_client(),
            base_url=self.wire.base_url,
            headers=self.wire.auth_headers(),
            inputs=job.inputs,
            root=root,
            limit=self.settings.max_input_bytes,
        )

    def upload_outputs(self, job: Job, root: Path, scratch: Path) -> dict[str, Any]:
        return data.upload_outputs(
            self._data_client(),
            base_url=self.wire.base_url,
            headers=self.wire.auth_headers(),
            run_id=job.run_id,
            node=job.node,
            outputs=job.outputs,
            root=root,
            scratch=scratch,
        )

    def submit(self, raw: dict[str, Any]) -> None:
        job_id = raw.get("job_id")
        if not isinstance(job_id, str) or not job_id:
            log.warning("ignoring a job without job_id")
            return
        with self._lock:
            if job_id in self._runners or self.stopping.is_set():
                return
            runner = JobRunner(self, raw)
            self._runners[job_id] = runner
        runner.start()

    def cancel(self, job_id: str) -> None:
        with self._lock:
            runner = self._runners.get(job_id)
        if runner is not None:
            log.info("job %s: cancellation requested by Host", job_id)
            runner.cancel_requested.set()

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._runners.pop(job_id, None)

    def running(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{"job_id": r.job_id, "state": r.lifecycle.state.value} for r in self._runners.values()]

    def recover(self) -> None:
        """Deal with every journal entry a previous agent left behind (see `journal`)."""
        for entry in self.journal.entries():
            with self._lock:
                if entry.job_id in self._runners:
                    continue
            if (
                entry.phase == "running"
                and entry.pid
                and entry.start_time
                and processes.same_process_alive(entry.pid, entry.start_time)
            ):
                runner = JobRunner(self, entry.job, reattach=entry)
                with self._lock:
                    self._runners[entry.job_id] = runner
                runner.start()
                continue
            threading.Thread(
                target=self._report_left_behind, args=(entry,), daemon=True, name=f"recover-{entry.job_id}"
            ).start()

    def _report_left_behind(self, entry: JournalEntry) -> None:
        runner = JobRunner(self, entry.job or {"job_id": entry.job_id}, reattach=entry)
        outcome = entry.outcome
        state = JobState.FAILED
        if outcome is None:
            recorded = (
                _read_exit_file(self.journal.job_dir(entry.job_id) / EXIT_FILE)
                if entry.phase == "running"
                else None
            )
            if recorded == 0:
                outcome, state = Outcome("succeeded", exit_code=0), JobState.SUCCEEDED
            elif recorded is not None:
                outcome = Outcome("failed", exit_code=recorded)
            else:
                outcome = Outcome("failed", reason="agent_restarted")
        else:
            state = JobState(outcome.state)
        log.info(
            "job %s: found in the restart journal (%s); reporting %s%s",
            entry.job_id,
            entry.phase,
            outcome.state,
            f" ({outcome.reason})" if outcome.reason else "",
        )
        runner._finish(entry, outcome, state, detail=outcome.reason or "")

    def shutdown(self, timeout_s: float = 5.0) -> None:
        self.stopping.set()
        with self._lock:
            runners = list(self._runners.values())
        deadline = time.monotonic() + timeout_s
        for runner in runners:
            runner.join(max(0.0, deadline - time.monotonic()))
