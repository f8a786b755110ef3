"""The running agent: Host's heartbeat and poll loops (``wire.loops.HostLoops``) around the job and
workload managers.

Jobs keep running across an agent restart (the journal re-attaches them); workloads are stopped
gracefully (each process group with its generation's grace) and restored on start, or, with
`--leave-workloads-running`, left running and adopted by the next agent. The workload guardian
(`native/guardian.py`) stops them when the agent is killed before it could.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forest_agent import __version__, mesh
from forest_agent.errors import ConfigError, IngressRefused
from forest_agent.inventory import AcceleratorItem, capacity_report, collect_accelerators
from forest_agent.logring import LogRing
from forest_agent.native.bundles import BundleInstaller, BundleLimits
from forest_agent.native.extract import ExtractLimits
from forest_agent.native.generations import GenerationStore
from forest_agent.native.guardian import Guardian
from forest_agent.native.jobs import JobManager, JobSettings
from forest_agent.native.journal import JobJournal
from forest_agent.native.nginx import NginxProxyManager
from forest_agent.native.signing import TrustedKeys
from forest_agent.native.status_reporter import StatusReporter
from forest_agent.native.supervisor import SupervisorTiming
from forest_agent.native.workloads import WorkloadManager, WorkloadSettings
from forest_agent.nginx import MeshHop, NginxCommand, host_port
from forest_agent.oskit import Clock, CommandRunner, machine_platform
from forest_agent.state import Identity, StateDir
from forest_agent.wire.client import WireClient
from forest_agent.wire.loops import HostLoops
from forest_agent.wire.messages import Changes

log = logging.getLogger(__name__)

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
    mesh_address: str | None = None
    mesh_interface: str | None = None
    proxy_port: int | None = None
    mesh_allow: list[str] = field(default_factory=list)
    edge_addresses: list[str] = field(default_factory=list)
    supervisor_startsecs: float = 1.0
    leave_workloads_running: bool = False


def change_kinds(config: AgentConfig) -> list[str]:
    """What this agent advertises: each native mode only when its flag is on."""
    kinds = []
    if config.enable_native_jobs:
        kinds.append("native.job")
    if config.enable_native_workloads:
        kinds.append("native.workload")
    return kinds


class Agent(HostLoops):
    runner_name = "agent"
    config: AgentConfig

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
        # Set by a second SIGTERM/Ctrl-C: stop now, cutting the workloads' graces short (never skipping them).
        self.hurry_event = threading.Event()
        self.guardian = Guardian()
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
        self.mesh = mesh.resolve(address=config.mesh_address, interface=config.mesh_interface)
        nginx = None
        if config.nginx_conf_dir is not None:
            nginx = NginxProxyManager(
                config.nginx_conf_dir,
                NginxCommand(config.nginx_binary, config.nginx_config, config.nginx_prefix),
                self.runner,
                hop=self.mesh_hop(),
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
                leave_running=config.leave_workloads_running,
            ),
            guardian=self.guardian,
            hurry=self.hurry_event,
        )

    # -- reports -------------------------------------------------------------------------------
    def accelerators(self) -> list[AcceleratorItem]:
        now = time.monotonic()
        if not self._inventory_at or now - self._inventory_at >= _INVENTORY_REFRESH_S:
            self._accelerators = collect_accelerators(self.runner, self.platform)
            self._inventory_at = now
        return self._accelerators

    def mesh_hop(self) -> MeshHop | None:
        """The ingress proxy's listener and whom it accepts from: the mesh range (configured, else the
        interface's network) and the edge's addresses."""
        if self.mesh is None or self.config.proxy_port is None:
            return None
        allow = list(self.config.mesh_allow) or ([self.mesh.network] if self.mesh.network else [])
        try:
            return MeshHop(listen=host_port(self.mesh.address, self.config.proxy_port),
                           allow=tuple(allow + list(self.config.edge_addresses)))
        except IngressRefused as exc:
            raise ConfigError(exc.message) from None

    def heartbeat_body(self) -> dict[str, Any]:
        body = {
            "version": __version__,
            "change_kinds": change_kinds(self.config),
            "isolation": ["host_process"],
            "capacity": capacity_report(self.accelerators()),
            "log_tail": self.ring.tail(_HEARTBEAT_LOG_LINES),
        }
        if self.mesh is not None and self.config.proxy_port is not None:
            body["mesh"] = {"address": self.mesh.address, "proxy_port": self.config.proxy_port}
        return body

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

    # -- loops (HostLoops) ------------------------------------------------------------------------
    def after_heartbeat(self) -> None:
        self._write_status_quietly()

    def apply_changes(self, changes: Changes) -> None:
        for job_id in changes.cancel:
            self.jobs.cancel(job_id)
        for job in changes.jobs:
            self.jobs.submit(job)
        for generation in changes.workloads:
            self.workloads.apply(generation)

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
        if self.workloads.nginx is not None and self.workloads.nginx.hop is not None:
            try:
                self.workloads.nginx.ensure_default()
            except IngressRefused as exc:
                log.error("mesh proxy default server: %s", exc.message)
        self.jobs.recover()
        if self.config.enable_native_workloads:
            self.guardian.start()
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
        leave = self.config.leave_workloads_running
        log.info("shutting down: %s; running jobs stay up for the next agent",
                 "leaving workloads running" if leave else "stopping workloads")
        self.stop_event.set()
        self.workloads.stop_all()
        # After stop_all nothing is watched, so the guardian exits at once; with `leave` it is told
        # to let go, so the workloads outlive it too.
        self.guardian.close(release=leave)
        self.jobs.shutdown()
        self.reporter.stop(timeout_s=5.0)
        self._write_status_quietly()
        self.wire.close()
