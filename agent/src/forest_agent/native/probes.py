"""Readiness and liveness probes (HTTP, TCP, exec) with Kubernetes-like thresholds.

A probe is `passing` after one success and `failing` after `failure_threshold` consecutive failures;
before its first verdict it is `unknown`.
"""

from __future__ import annotations

import http.client
import socket
import subprocess
from pathlib import Path

from forest_agent.wire.messages import Probe

UNKNOWN, PASSING, FAILING = "unknown", "passing", "failing"
# Until a probe has passed once, retry it this often instead of every `period_s`: a workload that
# is up in 300 ms should not wait a whole period to be reported live.
STARTUP_RETRY_S = 0.2


def check_once(probe: Probe, *, cwd: Path, env: dict[str, str]) -> bool:
    """Run the probe once against 127.0.0.1; True on success."""
    try:
        if probe.type == "http":
            conn = http.client.HTTPConnection("127.0.0.1", probe.port, timeout=probe.timeout_s)
            try:
                conn.request("GET", probe.path, headers={"User-Agent": "forest-agent-probe"})
                status = conn.getresponse().status
            finally:
                conn.close()
            return 200 <= status < 400
        if probe.type == "tcp":
            with socket.create_connection(("127.0.0.1", probe.port or 0), timeout=probe.timeout_s):
                return True
        argv = list(probe.command)
        if argv[0].startswith("./"):
            argv[0] = str(cwd / argv[0])
        result = subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=probe.timeout_s,
            check=False,
        )
        return result.returncode == 0
    except (OSError, http.client.HTTPException, subprocess.TimeoutExpired):
        return False


class ProbeTracker:
    """Schedules one probe and keeps its verdict."""

    def __init__(self, probe: Probe, *, fast_start: bool = False) -> None:
        self.probe = probe
        self.fast_start = fast_start  # readiness only: liveness must not kill a slow starter sooner
        self.status = UNKNOWN
        self.consecutive_failures = 0
        self.next_due = 0.0
        self.ever_passed = False

    def reset(self) -> None:
        self.status = UNKNOWN
        self.consecutive_failures = 0
        self.next_due = 0.0
        self.ever_passed = False

    def due(self, now: float) -> bool:
        return now >= self.next_due

    def record(self, ok: bool, now: float) -> bool:
        """Record a result; return True if the verdict changed."""
        self.ever_passed = self.ever_passed or ok
        fast = self.fast_start and not self.ever_passed
        self.next_due = now + (min(self.probe.period_s, STARTUP_RETRY_S) if fast else self.probe.period_s)
        before = self.status
        if ok:
            self.consecutive_failures = 0
            self.status = PASSING
        else:
            self.consecutive_failures += 1
            if self.consecutive_failures >= self.probe.failure_threshold:
                self.status = FAILING
        return self.status != before
