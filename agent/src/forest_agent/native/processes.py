"""Process-group plumbing shared by native jobs and the workload supervisor.

Every child starts in its own session (so its own process group): the agent can signal the whole
tree, a Ctrl-C aimed at the agent's terminal does not reach it, and a job outlives an agent crash so
the restart journal can re-attach to it. Identity across an agent restart is (pid, start time):
a recycled pid never matches the recorded start time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

# Same process if the kernel's start time matches what we recorded; psutil derives it from boot
# time plus clock ticks, so it is stable to well under a second for one process.
START_TIME_TOLERANCE_S = 1.0


def minimal_path() -> str:
    if sys.platform == "darwin":
        return "/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
    return "/usr/local/bin:/usr/bin:/bin"


def clean_env(payload_env: dict[str, str], home: Path) -> dict[str, str]:
    """Only a minimal PATH and HOME plus what the payload asked for; nothing of the agent's own env."""
    env = {"PATH": minimal_path(), "HOME": str(home), "LANG": "C.UTF-8"}
    env.update(payload_env)
    return env


def spawn(argv: list[str], *, cwd: Path, env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start argv in a new session with stdout+stderr appended to log_path (never a pipe: a pipe
    would die with the agent and SIGPIPE the child)."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


def start_time(pid: int) -> float | None:
    try:
        created: float = psutil.Process(pid).create_time()
        return created
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def same_process_alive(pid: int, recorded_start: float) -> bool:
    """True if `pid` is running and is the very process recorded (not a recycled pid)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        created: float = proc.create_time()
        return abs(created - recorded_start) <= START_TIME_TOLERANCE_S
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Signal a whole process group; False if it no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of a process group: what is left to stop."""
    members = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return members


def terminate_group(pgid: int, *, is_done: Callable[[], bool], grace_s: float, poll_s: float = 0.05,
                    hurry: threading.Event | None = None) -> str:
    """SIGTERM the group, wait up to grace_s for `is_done()` (cut short once `hurry` is set: the
    operator asked twice), then SIGKILL. Returns how it ended."""
    signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and not (hurry is not None and hurry.is_set()):
        if is_done():
            # The leader is gone; stragglers that ignored SIGTERM still get the SIGKILL below.
            signal_group(pgid, signal.SIGKILL)
            return "terminated"
        time.sleep(poll_s)
    signal_group(pgid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        end = time.monotonic() + 5.0
        while not is_done() and time.monotonic() < end:
            time.sleep(poll_s)
    return "killed"


def read_tail(path: Path, lines: int, max_bytes: int = 64 * 1024) -> list[str]:
    """The last `lines` lines of a log file, reading at most max_bytes from its end."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except FileNotFoundError:
        return []
    text = data.decode("utf-8", errors="replace")
    result = text.splitlines()
    if size > max_bytes and result:
        result = result[1:]  # the first line is probably cut
    return result[-lines:]
