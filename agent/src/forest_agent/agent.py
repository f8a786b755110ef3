"""The running agent: heartbeat and poll loops around the job and workload managers.

Both loops back off with jitter when Host is down and never spin: a poll that comes back early is
padded to a minimum interval. A permanent refusal from Host (revoked credential, wrong Grove) stops
the agent with a clear message instead of retrying forever. Jobs keep running across an agent
restart (the journal re-attaches them); workloads are stopped gracefully and restored on start.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forest_agent import __version__
from forest_agent.backoff import Backoff
from forest_agent.inventory import AcceleratorItem, capacity_report, collect_accelerators
from forest_agent.logring import LogRing
from forest_agent.native.bundles import BundleInstaller, BundleLimits
from forest_agent.native.extract import ExtractLimits
from forest_agent.native.generations import GenerationStore
from forest_agent.native.jobs import JobManager, JobSettings
from forest_agent.native.journal import JobJournal
from forest_agent.native.nginx import NginxCommand, NginxProxyManager
from forest_agent.native.signing import TrustedKeys
from forest_agent.native.status_reporter import StatusReporter
from forest_agent.native.supervisor import SupervisorTiming
from forest_agent.native.workloads import WorkloadManager, WorkloadSettings
from forest_agent.oskit import Clock, CommandRunner, machine_platform
from forest_agent.state import Identity, StateDir
from forest_agent.wire.client import WireClient, WireError
from forest_agent.wire.messages import MessageInvalid, parse_changes

log = logging.getLogger(__name__)

# Host answers these when the credential itself is wrong; retrying cannot help.
_FATAL_STATUSES = (401, 403, 404)
_MIN_POLL_INTERVAL_S = 1.0
_INVENTORY_REFRESH_S = 300.0
_HEARTBEAT_LOG_LINES = 50


@dataclass(frozen=True)
class AgentConfig:
    enable_native_jobs: bool = False
    enable_native_workloads: bool = False
    heartbeat_interval_s: float = 15.0
    poll_wait_s: int = 20
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0
    kill_grace_s: float = 10.0
    trusted_keys_dir: Path | None = None
    trusted_key_flags: list[str] = field(default_factory=list)
    max_bundle_bytes: int = 1024**3
    max_extract_bytes: int = 4 * 1024**3
    max_bundle_files: int = 100_000
    nginx_conf_dir: Path | None = None
    nginx_binary: str = "nginx"
    nginx_config: Path | None = None
    nginx_prefix: Path | None = None
    supervisor_startsecs: float = 1.0


def change_kinds(config: AgentConfig) -> list[str]:
    """What this agent advertises: each native mode only when its flag is on."""
    kinds = []
    if config.enable_native_jobs:
        kinds.append("native.job")
    if config.enable_native_workloads:
        kinds.append("native.workload")
    return kinds


class Agent:
    def __init__(
        self,
        *,
        config: AgentConfig,
        state: StateDir,
        identity: Identity,
        ring: LogRing,
        runner: CommandRunner | None = None,
        platform: str | None = None,
        keys: TrustedKeys | None = None,
    ) -> None:
        self.config = config
        self.state = state
        self.identity = identity
        self.ring = ring
        self.runner = runner or CommandRunner()
        self.platform = platform or machine_platform()
        self.wire = WireClient(identity.host_url, credential=identity.credential, grove_id=identity.grove_id)
        self.stop_event = threading.Event()
        self.fatal: str | None = None
        self.last_heartbeat_at: float | None = None
        self.last_error: str | None = None
        self._accelerators: list[AcceleratorItem] = []
        self._inventory_at = 0.0
        self.jobs = JobManager(
            wire=self.wire,
            journal=JobJournal(state.jobs_dir),
            clock=Clock(),
            settings=JobSettings(enabled=config.enable_native_jobs, kill_grace_s=config.kill_grace_s),
        )
        keys = (
            keys
            if keys is not None
            else TrustedKeys.load(keys_dir=config.trusted_keys_dir, key_flags=config.trusted_key_flags)
        )
        installer = BundleInstaller(
            keys=keys,
            limits=BundleLimits(
                config.max_bundle_bytes, ExtractLimits(config.max_extract_bytes, config.max_bundle_files)
            ),
            auth_headers_for=lambda url: self.wire.auth_headers() if self.wire.same_origin(url) else {},
            runner=self.runner,
        )
        nginx = None
        if config.nginx_conf_dir is not None:
            nginx = NginxProxyManager(
                config.nginx_conf_dir,
                NginxCommand(config.nginx_binary, config.nginx_config, config.nginx_prefix),
                self.runner,
            )
        self.reporter = StatusReporter(self.wire)
        self.workloads = WorkloadManager(
            store=GenerationStore(state.workloads_dir),
            installer=installer,
            reporter=self.reporter,
            redactor=ring.redactor,
            nginx=nginx,
            settings=WorkloadSettings(
                enabled=config.enable_native_workloads,
                timing=SupervisorTiming(
                    startsecs=config.supervisor_startsecs, kill_grace_s=config.kill_grace_s
                ),
            ),
        )

    # -- reports -------------------------------------------------------------------------------
    def accelerators(self) -> list[AcceleratorItem]:
        now = time.monotonic()
        if not self._inventory_at or now - self._inventory_at >= _INVENTORY_REFRESH_S:
            self._accelerators = collect_accelerators(self.runner, self.platform)
            self._inventory_at = now
        return self._accelerators

    def heartbeat_body(self) -> dict[str, Any]:
        return {
            "version": __version__,
            "change_kinds": change_kinds(self.config),
            "isolation": ["host_process"],
            "capacity": capacity_report(self.accelerators()),
            "log_tail": self.ring.tail(_HEARTBEAT_LOG_LINES),
        }

    def write_status(self) -> None:
        self.state.write_status(
            {
                "pid": os.getpid(),
                "grove_id": self.identity.grove_id,
                "host_url": self.identity.host_url,
                "version": __version__,
                "change_kinds": change_kinds(self.config),
                "last_heartbeat_at": self.last_heartbeat_at,
                "last_error": self.last_error,
                "jobs": self.jobs.running(),
                "workloads": self.workloads.snapshot(),
                "updated_at": time.time(),
            }
        )

    # -- loops ---------------------------------------------------------------------------------
    def _fatal_check(self, exc: WireError) -> bool:
        if not exc.retryable and exc.status in _FATAL_STATUSES:
            self.fatal = f"Host refused this agent's credential ({exc.code}: {exc.detail}); re-enroll it"
            self.stop_event.set()
            return True
        return False

    def _heartbeat_loop(self) -> None:
        backoff = Backoff(self.config.backoff_initial_s, self.config.backoff_max_s)
        while not self.stop_event.is_set():
            try:
                answer = self.wire.heartbeat(self.heartbeat_body())
            except WireError as exc:
                if self._fatal_check(exc):
                    return
                delay = backoff.next_delay()
                self.last_error = exc.code
                log.warning("heartbeat failed (%s); next try in %.1fs", exc.code, delay)
            else:
                if backoff.failures:
                    log.info("heartbeat delivered again after %d failures", backoff.failures)
                backoff.reset()
                self.last_heartbeat_at = time.time()
                self.last_error = None
                delay = self.config.heartbeat_interval_s
                stale = answer.get("stale_after_s")
                if isinstance(stale, int | float) and stale > 0:
                    # Three beats per staleness window: one lost beat never makes the Grove look stale.
                    delay = min(delay, max(1.0, stale / 3))
            self._write_status_quietly()
            self.stop_event.wait(delay)

    def _poll_loop(self) -> None:
        backoff = Backoff(self.config.backoff_initial_s, self.config.backoff_max_s)
        while not self.stop_event.is_set():
            started = time.monotonic()
            try:
                changes = parse_changes(self.wire.changes(wait_s=self.config.poll_wait_s))
            except WireError as exc:
                if self._fatal_check(exc):
                    return
                delay = backoff.next_delay()
                log.warning("poll failed (%s); next try in %.1fs", exc.code, delay)
                self.stop_event.wait(delay)
                continue
            except MessageInvalid as exc:
                delay = backoff.next_delay()
                log.error(
                    "Host sent an unreadable changes answer (%s); next try in %.1fs", exc.message, delay
                )
                self.stop_event.wait(delay)
                continue
            backoff.reset()
            if self.stop_event.is_set():
                return
            for job_id in changes.cancel:
                self.jobs.cancel(job_id)
            for job in changes.jobs:
                self.jobs.submit(job)
            for generation in changes.workloads:
                self.workloads.apply(generation)
            elapsed = time.monotonic() - started
            if elapsed < _MIN_POLL_INTERVAL_S:
                self.stop_event.wait(_MIN_POLL_INTERVAL_S - elapsed)

    def _write_status_quietly(self) -> None:
        try:
            self.write_status()
        except OSError as exc:
            log.error("cannot write status snapshot: %s", exc)

    def run(self) -> int:
        """Run until `stop_event` is set (signal) or Host refuses us; return the exit code."""
        log.info(
            "forest-agent %s running as Grove %s against %s (change kinds: %s)",
            __version__,
            self.identity.grove_id,
            self.wire.base_url,
            ", ".join(change_kinds(self.config)) or "none",
        )
        self.reporter.start()
        self.jobs.recover()
        self.workloads.restore()
        threads = [
            threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True),
            threading.Thread(target=self._poll_loop, name="poll", daemon=True),
        ]
        for thread in threads:
            thread.start()
        while not self.stop_event.wait(5.0):
            self._write_status_quietly()
        self.shutdown()
        if self.fatal:
            log.error("%s", self.fatal)
            return 3
        return 0

    def shutdown(self) -> None:
        log.info("shutting down: stopping workloads; running jobs stay up for the next agent")
        self.stop_event.set()
        self.workloads.stop_all()
        self.jobs.shutdown()
        self.reporter.stop(timeout_s=5.0)
        self._write_status_quietly()
        self.wire.close()
