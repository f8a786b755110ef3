"""The agent's state directory: the single-instance lock, the persisted identity, the status snapshot.

Layout (created 0700):
    agent.lock        flock held by the running agent (holds its pid, for the error message)
    identity.json     Grove id, credential and Host URL (mode 0600)
    status.json       snapshot the running agent writes for `forest-agent status`
    jobs/<job_id>/    restart journal entry and workspace of each native job
    workloads/<name>/ generations of each native workload
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from forest_agent.errors import ConfigError, NotEnrolled, StateLocked

STATE_DIR_ENV = "FOREST_AGENT_STATE_DIR"


def default_state_dir(*, platform: str | None = None, is_root: bool | None = None) -> Path:
    """Where the agent keeps state unless `--state-dir` or FOREST_AGENT_STATE_DIR says otherwise."""
    platform = platform or sys.platform
    is_root = (os.geteuid() == 0) if is_root is None else is_root
    if platform == "darwin":
        if is_root:
            return Path("/Library/Application Support/forest-agent")
        return Path.home() / "Library" / "Application Support" / "forest-agent"
    if is_root:
        return Path("/var/lib/forest-agent")
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "forest-agent"


def write_private_json(path: Path, data: Any) -> None:
    """Write JSON atomically with mode 0600 from the first byte (never briefly world-readable)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


@dataclass(frozen=True)
class Identity:
    grove_id: str
    credential: str
    host_url: str
    name: str


class StateDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock_fd: int | None = None

    @property
    def identity_path(self) -> Path:
        return self.path / "identity.json"

    @property
    def status_path(self) -> Path:
        return self.path / "status.json"

    @property
    def jobs_dir(self) -> Path:
        return self.path / "jobs"

    @property
    def workloads_dir(self) -> Path:
        return self.path / "workloads"

    def ensure(self) -> None:
        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.jobs_dir.mkdir(mode=0o700, exist_ok=True)
            self.workloads_dir.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create state directory {self.path}: {exc.strerror}") from exc
        if not os.access(self.path, os.W_OK):
            raise ConfigError(f"state directory {self.path} is not writable by this user")

    # -- single-instance lock ------------------------------------------------------------------
    def acquire_lock(self) -> None:
        """Hold an exclusive flock for the life of the process; a second agent gets a clear refusal."""
        self.ensure()
        lock_path = self.path / "agent.lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StateLocked(
                f"another forest-agent (pid {holder}) is using state directory {self.path}; "
                "stop it or pass a different --state-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def release_lock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def lock_holder(self) -> int | None:
        """The pid of a running agent on this state dir, or None (checked without taking the lock)."""
        lock_path = self.path / "agent.lock"
        if not lock_path.exists():
            return None
        fd = os.open(lock_path, os.O_RDONLY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                text = os.pread(fd, 32, 0).decode(errors="replace").strip()
                return int(text) if text.isdigit() else -1
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    # -- identity ------------------------------------------------------------------------------
    def save_identity(self, identity: Identity) -> None:
        self.ensure()
        write_private_json(self.identity_path, asdict(identity))

    def load_identity(self) -> Identity:
        try:
            raw = json.loads(self.identity_path.read_text())
        except FileNotFoundError:
            raise NotEnrolled(
                f"no identity in {self.path}; run `forest-agent enroll --host URL --token TOKEN` first"
            ) from None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"identity file {self.identity_path} is unreadable: {exc}") from exc
        mode = self.identity_path.stat().st_mode & 0o777
        if mode & 0o077:
            raise ConfigError(
                f"identity file {self.identity_path} has mode {mode:o}; it holds a credential, make it 0600"
            )
        try:
            return Identity(**{k: str(raw[k]) for k in ("grove_id", "credential", "host_url", "name")})
        except KeyError as exc:
            raise ConfigError(f"identity file {self.identity_path} lacks {exc.args[0]!r}") from None

    # -- status snapshot -----------------------------------------------------------------------
    def write_status(self, snapshot: dict[str, Any]) -> None:
        write_private_json(self.status_path, snapshot)

    def read_status(self) -> dict[str, Any] | None:
        try:
            status = json.loads(self.status_path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return status if isinstance(status, dict) else None
