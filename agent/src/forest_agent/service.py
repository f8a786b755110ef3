"""`forest-agent install/uninstall/upgrade`: the agent as an operating-system service.

Linux gets a systemd unit run by a dedicated system user, hardened (the sandbox below) unless the
operator switches it off for native jobs that need more; macOS gets a per-user launchd LaunchAgent
(docs/decisions.md, "forest-agent as a service": Metal and the login keychain live in the user's
session, which a LaunchDaemon does not have).

Rendering is pure (``render_systemd_unit``, ``render_launchd_plist``, ``check_launchd_plist``); every OS
call (useradd, chown, systemctl, launchctl) goes through ``ServiceOps``, which tests swap and which
``PrintOps`` replaces for ``--root``/``--dry-run``: then the commands are printed, not run.
What install decided is kept in ``service.json`` in the state directory, so ``upgrade`` renders the same
service for the newly installed program and ``uninstall`` knows what to remove.
"""

from __future__ import annotations

import json
import os
import plistlib
import pwd
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from forest_agent.errors import ConfigError
from forest_agent.state import write_private_json

SERVICE_NAME = "forest-agent"
UNIT_NAME = f"{SERVICE_NAME}.service"
LAUNCHD_LABEL = "dev.forest.agent"
SERVICE_USER = "forest-agent"
SETTINGS_FILE = "service.json"
SANDBOX_CHOICES = ("strict", "off")
# Beyond the agent's own stop (each workload's grace, then SIGKILL), before the service manager kills it.
DEFAULT_STOP_TIMEOUT_S = 90
# Exit codes that restarting cannot heal (clikit: 2 misconfigured, 3 refused by Host).
NO_RESTART_EXIT_CODES = (2, 3)
# Directories ProtectHome= hides from the service: a program or key file there is invisible to it.
_HIDDEN_BY_PROTECT_HOME = ("/home", "/root", "/run/user")


class ServiceError(ConfigError):
    code = "service_failed"


@dataclass(frozen=True)
class Layout:
    """Where the service's files live on `platform` ("linux" or "darwin"), relocated under `root`
    (`--root`, for packaging and tests: the rendered files point at the relocated paths, so they run)."""

    platform: str
    root: Path = Path("/")
    home: Path = field(default_factory=Path.home)

    def _under(self, path: str | Path) -> Path:
        return self.root / str(path).lstrip("/")

    @property
    def unit_path(self) -> Path:
        if self.platform == "darwin":
            return self._under(self.home / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist")
        return self._under(f"/etc/systemd/system/{UNIT_NAME}")

    @property
    def state_dir(self) -> Path:
        if self.platform == "darwin":
            return self._under(self.home / "Library" / "Application Support" / SERVICE_NAME)
        return self._under(f"/var/lib/{SERVICE_NAME}")

    @property
    def log_dir(self) -> Path | None:
        """macOS only: launchd writes stdout/stderr to files; on Linux the journal keeps them."""
        if self.platform == "darwin":
            return self._under(self.home / "Library" / "Logs" / SERVICE_NAME)
        return None


@dataclass(frozen=True)
class ServiceSettings:
    """What install decided; saved as service.json so upgrade re-renders the same service."""

    platform: str
    state_dir: str
    run_args: list[str]
    program: list[str]
    unit_path: str
    user: str | None = None
    sandbox: str = "strict"
    writable: list[str] = field(default_factory=list)
    leave_workloads_running: bool = False
    stop_timeout_s: int = DEFAULT_STOP_TIMEOUT_S
    log_dir: str | None = None

    @property
    def argv(self) -> list[str]:
        return [*self.program, "run", "--state-dir", self.state_dir, *self.run_args]

    def save(self) -> None:
        write_private_json(Path(self.state_dir) / SETTINGS_FILE, asdict(self))

    @classmethod
    def load(cls, state_dir: Path) -> ServiceSettings:
        path = state_dir / SETTINGS_FILE
        try:
            raw = json.loads(path.read_text())
            return cls(**raw)
        except FileNotFoundError:
            raise ServiceError(
                f"no service is installed for {state_dir} ({path} is missing); run `forest-agent install`",
                code="service_not_installed",
            ) from None
        except (OSError, ValueError, TypeError) as exc:
            raise ServiceError(f"{path} is unreadable: {exc}", code="service_settings_invalid") from None


def agent_program() -> list[str]:
    """The command that starts this very installation: its console script, else `python -m`."""
    script = Path(sys.executable).with_name(SERVICE_NAME)
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "forest_agent"]


# -- systemd ---------------------------------------------------------------------------------------
def _systemd_quote(arg: str) -> str:
    """One ExecStart word: `%` and `$` are systemd specifiers/variables, so they are doubled."""
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if escaped and not any(c in escaped for c in ' \t"\'\\;'):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_systemd_unit(settings: ServiceSettings) -> str:
    exec_start = " ".join(_systemd_quote(arg) for arg in settings.argv)
    # mixed: SIGTERM reaches the agent alone, which stops each workload with its own grace; the
    # SIGKILL after TimeoutStopSec= reaches every process left in the unit's cgroup. Workloads asked
    # to outlive the agent need KillMode=process, or systemd would kill them with it.
    kill_mode = "process" if settings.leave_workloads_running else "mixed"
    lines = [
        "# Written by `forest-agent install`; `forest-agent upgrade` rewrites it, `uninstall` removes it.",
        "[Unit]",
        "Description=Forest native Grove agent",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"User={settings.user or SERVICE_USER}",
        f"Group={settings.user or SERVICE_USER}",
        f"ExecStart={exec_start}",
        "Environment=PYTHONUNBUFFERED=1",
        "Restart=on-failure",
        "RestartSec=5",
        f"RestartPreventExitStatus={' '.join(str(c) for c in NO_RESTART_EXIT_CODES)}",
        f"KillMode={kill_mode}",
        f"TimeoutStopSec={settings.stop_timeout_s}",
        "UMask=0077",
    ]
    if settings.sandbox == "strict":
        writable = " ".join(_systemd_quote(p) for p in [settings.state_dir, *settings.writable])
        lines += [
            "# The sandbox (`forest-agent install --sandbox off` removes it for native jobs that need",
            "# more: root capabilities, setuid tools, writing outside the state directory).",
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            f"ReadWritePaths={writable}",
            "ProtectHome=yes",
            "PrivateTmp=yes",
            "CapabilityBoundingSet=",
            "AmbientCapabilities=",
            "RestrictSUIDSGID=yes",
            "ProtectKernelTunables=yes",
            "ProtectKernelModules=yes",
            "ProtectKernelLogs=yes",
            "ProtectControlGroups=yes",
            "ProtectClock=yes",
            "ProtectHostname=yes",
            "RestrictRealtime=yes",
            "RestrictNamespaces=yes",
            "LockPersonality=yes",
            "SystemCallArchitectures=native",
            # AF_NETLINK: psutil reads interface addresses (--mesh-interface) through it.
            "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
            # Not PrivateDevices=: native jobs and workloads use the GPUs' device nodes.
        ]
    lines += ["", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)


# -- launchd ---------------------------------------------------------------------------------------
# launchd refuses a job without these; the rest are what this agent relies on.
LAUNCHD_REQUIRED = {"Label": str, "ProgramArguments": list}
LAUNCHD_USED = {"RunAtLoad": bool, "KeepAlive": dict, "StandardOutPath": str, "StandardErrorPath": str,
                "WorkingDirectory": str, "ExitTimeOut": int, "EnvironmentVariables": dict,
                "ProcessType": str, "ThrottleInterval": int, "AbandonProcessGroup": bool}


def render_launchd_plist(settings: ServiceSettings) -> bytes:
    log_dir = Path(settings.log_dir or settings.state_dir)
    plist: dict[str, Any] = {
        "Label": LAUNCHD_LABEL,
        "ProgramArguments": settings.argv,
        "RunAtLoad": True,
        # Restart after a crash, not after a clean exit (systemd's Restart=on-failure).
        "KeepAlive": {"SuccessfulExit": False},
        "ThrottleInterval": 10,
        "WorkingDirectory": settings.state_dir,
        "StandardOutPath": str(log_dir / "agent.log"),
        "StandardErrorPath": str(log_dir / "agent.err.log"),
        "EnvironmentVariables": {"PYTHONUNBUFFERED": "1"},
        # SIGTERM, then SIGKILL after this many seconds (launchd's default is 20).
        "ExitTimeOut": settings.stop_timeout_s,
        # Workloads asked to outlive the agent must not be killed with its process group.
        "AbandonProcessGroup": settings.leave_workloads_running,
        "ProcessType": "Standard",
    }
    data = plistlib.dumps(plist, fmt=plistlib.FMT_XML, sort_keys=True)
    check_launchd_plist(data)
    return data


def check_launchd_plist(data: bytes) -> dict[str, Any]:
    """Parse a plist and check what launchd requires of a job (macOS's `plutil -lint` is not on Linux)."""
    try:
        plist = plistlib.loads(data)
    except Exception as exc:  # plistlib raises several unrelated types for malformed input
        raise ServiceError(f"the launchd plist does not parse: {exc}", code="service_plist_invalid") from None
    if not isinstance(plist, dict):
        raise ServiceError("a launchd plist is a dictionary", code="service_plist_invalid")
    for key, kind in {**LAUNCHD_REQUIRED, **LAUNCHD_USED}.items():
        if key in LAUNCHD_REQUIRED and key not in plist:
            raise ServiceError(f"the launchd plist lacks {key}", code="service_plist_invalid")
        if key in plist and not isinstance(plist[key], kind):
            raise ServiceError(f"launchd's {key} must be a {kind.__name__}", code="service_plist_invalid")
    argv = plist["ProgramArguments"]
    if not argv or not all(isinstance(a, str) for a in argv) or not argv[0].startswith("/"):
        raise ServiceError("ProgramArguments must be strings starting with an absolute program path",
                           code="service_plist_invalid")
    for key in ("StandardOutPath", "StandardErrorPath", "WorkingDirectory"):
        if key in plist and not plist[key].startswith("/"):
            raise ServiceError(f"launchd's {key} must be an absolute path", code="service_plist_invalid")
    return plist


def render(settings: ServiceSettings) -> bytes:
    if settings.platform == "darwin":
        return render_launchd_plist(settings)
    return render_systemd_unit(settings).encode()


def check_visible(settings: ServiceSettings, paths: list[str]) -> None:
    """Under ProtectHome= a program or key in a home directory does not exist for the service: say so
    at install instead of letting the service fail to start."""
    if settings.platform != "linux" or settings.sandbox != "strict":
        return
    for path in paths:
        if any(path == hidden or path.startswith(hidden + "/") for hidden in _HIDDEN_BY_PROTECT_HOME):
            raise ServiceError(
                f"{path} is inside a home directory, which the service's sandbox hides (ProtectHome=); "
                "install forest-agent outside /home and /root (e.g. a virtual environment in /opt) "
                "or pass --sandbox off",
                code="service_path_hidden",
            )


# -- the OS calls ----------------------------------------------------------------------------------
class ServiceOps:
    """Every command install/uninstall/upgrade/status runs, in one place tests can swap."""

    def __init__(self, say: Callable[[str], None] = print) -> None:
        self.say = say

    def run(self, argv: list[str], *, check: bool = True, quiet: bool = False
            ) -> subprocess.CompletedProcess[str]:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ServiceError(f"`{' '.join(argv)}` could not run: {exc}",
                               code="service_command_failed") from None
        if check and done.returncode != 0:
            raise ServiceError(
                f"`{' '.join(argv)}` exited {done.returncode}: {(done.stderr or done.stdout).strip()[:300]}",
                code="service_command_failed",
            )
        if not quiet:
            self.say(f"ran: {' '.join(argv)}")
        return done

    def user_exists(self, name: str) -> bool:
        try:
            pwd.getpwnam(name)
        except KeyError:
            return False
        return True


class PrintOps(ServiceOps):
    """`--root`/`--dry-run`: say what would run; touch nothing outside the files being written."""

    def run(self, argv: list[str], *, check: bool = True, quiet: bool = False
            ) -> subprocess.CompletedProcess[str]:
        self.say(f"would run: {' '.join(argv)}")
        return subprocess.CompletedProcess(argv, 0, "", "")

    def user_exists(self, name: str) -> bool:
        return False


def launchd_domain() -> str:
    return f"gui/{os.getuid()}"


def activate(settings: ServiceSettings, ops: ServiceOps) -> None:
    """Make the service manager (re)load the file and start the agent now and at boot/login."""
    if settings.platform == "darwin":
        ops.run(["launchctl", "bootout", f"{launchd_domain()}/{LAUNCHD_LABEL}"], check=False)
        ops.run(["launchctl", "bootstrap", launchd_domain(), settings.unit_path])
        return
    ops.run(["systemctl", "daemon-reload"])
    ops.run(["systemctl", "enable", UNIT_NAME])
    ops.run(["systemctl", "restart", UNIT_NAME])


def prepare_user(settings: ServiceSettings, ops: ServiceOps) -> None:
    """Linux: the dedicated system user owns the state directory (created once, kept on uninstall)."""
    if settings.platform != "linux" or settings.user is None:
        return
    if not ops.user_exists(settings.user):
        ops.run(["useradd", "--system", "--user-group", "--home-dir", settings.state_dir, "--no-create-home",
                 "--shell", "/usr/sbin/nologin", "--comment", "Forest native Grove agent", settings.user])
    ops.run(["chown", "-R", f"{settings.user}:{settings.user}", settings.state_dir])


def write_service_file(settings: ServiceSettings, content: bytes) -> None:
    path = Path(settings.unit_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(content)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def deactivate(settings: ServiceSettings, ops: ServiceOps) -> None:
    if settings.platform == "darwin":
        ops.run(["launchctl", "bootout", f"{launchd_domain()}/{LAUNCHD_LABEL}"], check=False)
        return
    ops.run(["systemctl", "disable", "--now", UNIT_NAME], check=False)


def remove(settings: ServiceSettings, ops: ServiceOps, *, purge: bool) -> list[str]:
    """Stop and remove the service; with `purge` the state directory (identity, workloads) too."""
    removed = []
    deactivate(settings, ops)
    unit = Path(settings.unit_path)
    if unit.exists():
        unit.unlink()
        removed.append(str(unit))
    if settings.platform == "linux":
        ops.run(["systemctl", "daemon-reload"], check=False)
    if purge:
        shutil.rmtree(settings.state_dir, ignore_errors=True)
        removed.append(settings.state_dir)
        if settings.platform == "linux" and settings.user:
            ops.run(["userdel", settings.user], check=False)
    # Without purge service.json stays beside the identity, so `upgrade` can install the service again.
    return removed


def is_active(settings: ServiceSettings, ops: ServiceOps) -> str:
    """`active`, `inactive` or what the service manager said, for `forest-agent status`."""
    if settings.platform == "darwin":
        done = ops.run(["launchctl", "print", f"{launchd_domain()}/{LAUNCHD_LABEL}"], check=False, quiet=True)
        return "loaded" if done.returncode == 0 else "not loaded"
    done = ops.run(["systemctl", "is-active", UNIT_NAME], check=False, quiet=True)
    return (done.stdout or "").strip() or "unknown"
