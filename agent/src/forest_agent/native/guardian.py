"""The workload guardian: a small process that outlives a killed agent just long enough to stop the
workloads the agent started.

Workloads run in sessions of their own (so a Ctrl-C aimed at the agent's terminal does not reach them,
and the agent can signal each whole tree). The price: when the agent itself is SIGKILLed — launchd and
systemd do that after their stop timeout, an OOM killer or `kill -9` at any time — nothing signals the
workloads. So the agent starts this guardian with a pipe on its stdin and tells it each workload
process group it starts (`watch`) and stops (`forget`). The pipe closes when the agent exits, however it
exits; at end of file the guardian SIGTERMs every group still watched, gives each the grace its
generation declared, SIGKILLs what is left, and exits. An agent that leaves its workloads running on
purpose (`--leave-workloads-running`) says `release` first, and the guardian exits without a signal.

A process group is the guardian's to kill only while it is the one watched: its leader (pid = pgid) is
alive with the recorded start time, or the leader is gone but the group still exists (the kernel does
not reuse a pid while a process group of that id exists, so such a group is still the workload's).

Protocol: one JSON object per line, `{"op": "watch", "pgid", "start_time", "grace_s"}`,
`{"op": "forget", "pgid"}`, `{"op": "release"}`. Run as `python -m forest_agent.native.guardian`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO, Any

from forest_agent.native import processes

log = logging.getLogger(__name__)

_POLL_S = 0.05


@dataclass(frozen=True)
class Watched:
    pgid: int
    start_time: float
    grace_s: float


def _someone_elses(watched: Watched) -> bool:
    """The pid now belongs to another process (its start time differs): not ours to signal."""
    created = processes.start_time(watched.pgid)
    return created is not None and abs(created - watched.start_time) > processes.START_TIME_TOLERANCE_S


def stop_groups(groups: list[Watched]) -> None:
    """SIGTERM every group that is still ours, wait for each up to its grace, SIGKILL the rest."""
    pending: dict[int, float] = {}
    start = time.monotonic()
    for watched in groups:
        if _someone_elses(watched) or not processes.group_members(watched.pgid):
            continue
        try:
            os.killpg(watched.pgid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            continue
        pending[watched.pgid] = start + watched.grace_s
    while pending:
        now = time.monotonic()
        for pgid, deadline in list(pending.items()):
            if not processes.group_members(pgid):
                del pending[pgid]
            elif now >= deadline:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
                del pending[pgid]
        time.sleep(_POLL_S)


def serve(stream: IO[str]) -> int:
    """The guardian's life: read the agent's messages until the pipe closes, then act on them."""
    watched: dict[int, Watched] = {}
    released = False
    for line in stream:
        try:
            message = json.loads(line)
            op = message["op"]
            if op == "watch":
                item = Watched(int(message["pgid"]), float(message["start_time"]), float(message["grace_s"]))
                watched[item.pgid] = item
            elif op == "forget":
                watched.pop(int(message["pgid"]), None)
            elif op == "release":
                released = True
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line from a killed agent; what came before still counts
    if released:
        return 0
    stop_groups(list(watched.values()))
    return 0


class Guardian:
    """The agent's end of the pipe. Thread-safe; a guardian that cannot start is logged, never fatal:
    the agent's own stop still stops the workloads, only a SIGKILLed agent would leave them."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "forest_agent.native.guardian"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                text=True,
                # Its own session: a signal meant for the agent's group does not stop it mid-job.
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            log.error("workload guardian could not start (%s); workloads outlive a killed agent", exc)
            self._proc = None

    def _send(self, message: dict[str, Any]) -> None:
        with self._lock:
            if self._proc is None or self._proc.stdin is None or self._proc.stdin.closed:
                return
            try:
                self._proc.stdin.write(json.dumps(message) + "\n")
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                log.error("workload guardian is gone (%s)", exc)
                self._proc = None

    # supervisor.ProcessWatch: told of each workload process group as it starts and ends.
    def started(self, pid: int, start_time: float, grace_s: float) -> None:
        self._send({"op": "watch", "pgid": pid, "start_time": start_time, "grace_s": grace_s})

    def ended(self, pid: int) -> None:
        self._send({"op": "forget", "pgid": pid})

    def close(self, *, release: bool = False, timeout_s: float = 5.0) -> None:
        """End the guardian: with `release` it leaves every watched group running."""
        if release:
            self._send({"op": "release"})
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("workload guardian still busy after %.0fs; leaving it to finish", timeout_s)


def main() -> int:
    # Its life is bound to the pipe, not to signals: Ctrl-C or SIGTERM must not cut its job short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return serve(sys.stdin)


if __name__ == "__main__":
    raise SystemExit(main())
