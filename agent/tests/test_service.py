"""`forest-agent install/upgrade/uninstall`: the systemd unit and the launchd plist are rendered and checked
by the real tools available here (`systemd-analyze verify` from Debian's systemd; plistlib round-trip and
the keys launchd requires), and the CLI is run as a process against the stub Host (a real HTTP server
standing in for Host) with `--root`, which relocates every file under a temporary directory and prints the
service-manager commands instead of running them. The live-Host run of the unit's ExecStart is
tests/e2e/test_agent_service.py."""

from __future__ import annotations

import json
import os
import plistlib
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from stub_host import StubHost

from forest_agent import service
from forest_agent.service import ServiceSettings

AGENT = [sys.executable, "-m", "forest_agent"]
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*AGENT, *args], capture_output=True, text=True, timeout=60, check=False)


def settings(tmp_path: Path, **overrides: object) -> ServiceSettings:
    values: dict[str, object] = {
        "platform": "linux", "state_dir": str(tmp_path / "state"), "run_args": ["--enable-native-jobs"],
        "program": [sys.executable, "-m", "forest_agent"],
        "unit_path": str(tmp_path / "forest-agent.service"),
        "user": "forest-agent", "log_dir": None,
    }
    values.update(overrides)
    return ServiceSettings(**values)  # type: ignore[arg-type]


def unit_lines(text: str) -> dict[str, list[str]]:
    keys: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            keys.setdefault(key, []).append(value)
    return keys


def verify(unit: Path) -> subprocess.CompletedProcess[str]:
    """systemd's own checker; a warning (unknown key, bad value) counts as a failure too."""
    assert SYSTEMD_ANALYZE is not None
    return subprocess.run([SYSTEMD_ANALYZE, "verify", str(unit)], capture_output=True, text=True, timeout=60,
                          check=False, env={**os.environ, "SYSTEMD_LOG_LEVEL": "notice"})


needs_systemd = pytest.mark.skipif(SYSTEMD_ANALYZE is None,
                                   reason="Debian's systemd package (systemd-analyze) is not installed")


# -- systemd ---------------------------------------------------------------------------------------
@needs_systemd
@pytest.mark.parametrize("variant", [{}, {"sandbox": "off"}, {"leave_workloads_running": True},
                                     {"writable": ["/srv/forest nginx"], "state_dir": "/var/lib/forest 50%"}])
def test_the_unit_passes_systemd_analyze_verify(tmp_path: Path, variant: dict[str, object]) -> None:
    unit = tmp_path / service.UNIT_NAME
    unit.write_text(service.render_systemd_unit(settings(tmp_path, **variant)))
    result = verify(unit)
    assert result.returncode == 0 and result.stderr.strip() == "", result.stderr


@needs_systemd
def test_systemd_analyze_verify_bites(tmp_path: Path) -> None:
    """The checker really reads our file: a misspelt directive is reported."""
    unit = tmp_path / service.UNIT_NAME
    unit.write_text(service.render_systemd_unit(settings(tmp_path)).replace("ProtectHome=", "ProtectHomes="))
    assert "ProtectHomes" in verify(unit).stderr


def test_the_unit_is_hardened_and_restarts_on_failure(tmp_path: Path) -> None:
    keys = unit_lines(service.render_systemd_unit(settings(tmp_path)))
    assert keys["User"] == ["forest-agent"] and keys["Restart"] == ["on-failure"]
    assert keys["RestartPreventExitStatus"] == ["2 3"]  # misconfigured / refused: restarting cannot heal
    assert keys["NoNewPrivileges"] == ["yes"] and keys["ProtectSystem"] == ["strict"]
    assert keys["ProtectHome"] == ["yes"] and keys["PrivateTmp"] == ["yes"]
    assert keys["CapabilityBoundingSet"] == [""] and keys["AmbientCapabilities"] == [""]
    assert keys["ReadWritePaths"] == [str(tmp_path / "state")]  # the state directory stays writable
    # The agent alone gets SIGTERM (it stops each workload with its grace); SIGKILL reaches the cgroup.
    assert keys["KillMode"] == ["mixed"]
    assert "PrivateDevices" not in keys  # GPUs' device nodes stay visible to native jobs


def test_sandbox_off_drops_the_hardening_and_leave_running_keeps_the_cgroup(tmp_path: Path) -> None:
    keys = unit_lines(service.render_systemd_unit(settings(tmp_path, sandbox="off")))
    for key in ("NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp", "CapabilityBoundingSet"):
        assert key not in keys
    keys = unit_lines(service.render_systemd_unit(settings(tmp_path, leave_workloads_running=True)))
    assert keys["KillMode"] == ["process"]


def test_exec_start_quotes_what_systemd_would_expand(tmp_path: Path) -> None:
    unit = service.render_systemd_unit(settings(tmp_path, state_dir="/srv/a b/100%", run_args=["--x=$HOME"]))
    [exec_start] = unit_lines(unit)["ExecStart"]
    assert '"/srv/a b/100%%"' in exec_start and "--x=$$HOME" in exec_start


def test_a_program_in_a_home_directory_is_refused_under_the_sandbox(tmp_path: Path) -> None:
    with pytest.raises(service.ServiceError) as refused:
        service.check_visible(settings(tmp_path), ["/home/ann/venv/bin/forest-agent"])
    assert refused.value.code == "service_path_hidden"
    service.check_visible(settings(tmp_path, sandbox="off"), ["/home/ann/venv/bin/forest-agent"])
    service.check_visible(settings(tmp_path), ["/homely/bin/forest-agent"])  # a prefix is not a parent


# -- launchd ---------------------------------------------------------------------------------------
def test_the_plist_round_trips_and_has_what_launchd_requires(tmp_path: Path) -> None:
    s = settings(tmp_path, platform="darwin", user=None, log_dir=str(tmp_path / "Logs"))
    data = service.render_launchd_plist(s)
    plist = plistlib.loads(data)
    assert plistlib.loads(plistlib.dumps(plist, fmt=plistlib.FMT_XML)) == plist
    assert plist["Label"] == service.LAUNCHD_LABEL
    assert plist["ProgramArguments"] == s.argv and plist["ProgramArguments"][0].startswith("/")
    assert plist["KeepAlive"] == {"SuccessfulExit": False} and plist["RunAtLoad"] is True
    assert plist["StandardOutPath"] == str(tmp_path / "Logs" / "agent.log")
    assert plist["ExitTimeOut"] == service.DEFAULT_STOP_TIMEOUT_S
    assert plist["AbandonProcessGroup"] is False
    assert service.check_launchd_plist(data) == plist


@pytest.mark.parametrize(("mutate", "needle"), [
    (lambda p: p.pop("Label"), "lacks Label"),
    (lambda p: p.update(ProgramArguments=["forest-agent", "run"]), "absolute program path"),
    (lambda p: p.update(KeepAlive="yes"), "KeepAlive must be a dict"),
    (lambda p: p.update(StandardOutPath="agent.log"), "absolute path"),
])
def test_the_plist_check_refuses_what_launchd_would(tmp_path: Path, mutate, needle: str) -> None:  # type: ignore[no-untyped-def]
    plist = plistlib.loads(service.render_launchd_plist(settings(tmp_path, platform="darwin", user=None)))
    mutate(plist)
    with pytest.raises(service.ServiceError, match=needle):
        service.check_launchd_plist(plistlib.dumps(plist))
    with pytest.raises(service.ServiceError, match="does not parse"):
        service.check_launchd_plist(b"<plist><dict><key>Label</key>")


# -- the commands, through the CLI -------------------------------------------------------------
@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("good-token\n")
    return path


def install(host: StubHost, root: Path, token_file: Path, *extra: str, platform: str = "linux"
            ) -> subprocess.CompletedProcess[str]:
    return cli("install", "--platform", platform, "--root", str(root), "--host", host.url,
               "--token-file", str(token_file), "--name", "box-1", *extra)


def test_install_enrolls_writes_the_unit_and_says_what_it_did(host: StubHost, tmp_path: Path,
                                                              token_file: Path) -> None:
    root = tmp_path / "root"
    result = install(host, root, token_file, "--", "--enable-native-jobs")
    assert result.returncode == 0, result.stderr
    state = root / "var/lib/forest-agent"
    unit = root / "etc/systemd/system/forest-agent.service"
    identity = json.loads((state / "identity.json").read_text())
    assert identity["name"] == "box-1" and stat.S_IMODE((state / "identity.json").stat().st_mode) == 0o600
    [exec_start] = unit_lines(unit.read_text())["ExecStart"]
    assert shlex.split(exec_start)[-4:] == ["run", "--state-dir", str(state), "--enable-native-jobs"]
    out = result.stdout
    assert f"enrolled as Grove {identity['grove_id']}" in out and f"wrote {unit}" in out
    for command in ("useradd --system", f"chown -R forest-agent:forest-agent {state}",
                    "systemctl daemon-reload", "systemctl enable forest-agent.service",
                    "systemctl restart forest-agent.service"):
        assert f"would run: {command}" in out  # --root: printed, not run
    assert "journalctl -u forest-agent.service" in out
    assert "good-token" not in out + result.stderr


def test_install_refuses_to_enroll_twice(host: StubHost, tmp_path: Path, token_file: Path) -> None:
    root = tmp_path / "root"
    assert install(host, root, token_file).returncode == 0
    again = install(host, root, token_file)
    assert again.returncode == 2
    assert "already_enrolled" in again.stderr and "forest-agent upgrade" in again.stderr
    assert len(host.enrollments) == 1


@pytest.mark.parametrize(("run_args", "needle"), [
    (["--", "--bogus"], "service_run_args_invalid"),
    (["--", "--state-dir", "/elsewhere"], "give --state-dir to install itself"),
    (["--", "--enable-native-workloads"], "needs at least one trusted key"),
])
def test_install_checks_the_run_options_before_enrolling(host: StubHost, tmp_path: Path, token_file: Path,
                                                         run_args: list[str], needle: str) -> None:
    result = install(host, tmp_path / "root", token_file, *run_args)
    assert result.returncode == 2 and needle in result.stderr
    assert host.enrollments == []


def test_dry_run_changes_nothing(host: StubHost, tmp_path: Path, token_file: Path) -> None:
    result = cli("install", "--platform", "linux", "--dry-run", "--state-dir", str(tmp_path / "state"),
                 "--host", host.url, "--token-file", str(token_file))
    assert result.returncode == 0, result.stderr
    assert "[Service]" in result.stdout and "would run: systemctl daemon-reload" in result.stdout
    assert not (tmp_path / "state").exists() and host.enrollments == []


def test_upgrade_keeps_the_identity_and_the_generations_and_uninstall_keeps_them_too(
        host: StubHost, tmp_path: Path, token_file: Path) -> None:
    root = tmp_path / "root"
    assert install(host, root, token_file, "--", "--enable-native-jobs").returncode == 0
    state = root / "var/lib/forest-agent"
    identity = (state / "identity.json").read_text()
    generation = state / "workloads/web/generations/g1/app"
    generation.mkdir(parents=True)
    unit = root / "etc/systemd/system/forest-agent.service"
    unit.write_text("stale")

    upgraded = cli("upgrade", "--platform", "linux", "--root", str(root))
    assert upgraded.returncode == 0, upgraded.stderr
    assert "[Service]" in unit.read_text() and "--enable-native-jobs" in unit.read_text()  # same settings
    assert (state / "identity.json").read_text() == identity and generation.is_dir()
    assert "would run: systemctl restart forest-agent.service" in upgraded.stdout
    assert "kept identity" in upgraded.stdout

    removed = cli("uninstall", "--platform", "linux", "--root", str(root))
    assert removed.returncode == 0, removed.stderr
    assert not unit.exists() and (state / "identity.json").read_text() == identity
    assert "would run: systemctl disable --now forest-agent.service" in removed.stdout
    assert cli("upgrade", "--platform", "linux", "--root", str(root)).returncode == 0  # re-installs
    purged = cli("uninstall", "--platform", "linux", "--root", str(root), "--purge")
    assert purged.returncode == 0 and not state.exists()
    assert "would run: userdel forest-agent" in purged.stdout


def test_upgrade_without_an_install_says_so(tmp_path: Path) -> None:
    result = cli("upgrade", "--platform", "linux", "--root", str(tmp_path))
    assert result.returncode == 2 and "service_not_installed" in result.stderr


def test_install_on_macos_writes_a_launch_agent(host: StubHost, tmp_path: Path, token_file: Path) -> None:
    root = tmp_path / "root"
    result = install(host, root, token_file, platform="darwin")
    assert result.returncode == 0, result.stderr
    home = str(Path.home()).lstrip("/")
    plist_path = root / home / "Library/LaunchAgents/dev.forest.agent.plist"
    plist = service.check_launchd_plist(plist_path.read_bytes())
    state = root / home / "Library/Application Support/forest-agent"
    assert (state / "identity.json").is_file() and plist["WorkingDirectory"] == str(state)
    assert plist["StandardErrorPath"] == str(root / home / "Library/Logs/forest-agent/agent.err.log")
    assert f"would run: launchctl bootstrap gui/{os.getuid()} {plist_path}" in result.stdout
    assert "useradd" not in result.stdout  # a LaunchAgent runs as the user who installed it


def test_status_names_the_installed_service(host: StubHost, tmp_path: Path, token_file: Path) -> None:
    root = tmp_path / "root"
    assert install(host, root, token_file).returncode == 0
    result = cli("status", "--json", "--state-dir", str(root / "var/lib/forest-agent"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["service"]["file"] == str(root / "etc/systemd/system/forest-agent.service")


@pytest.mark.skipif(os.geteuid() != 0, reason="checks the refusal given to root")
def test_a_launch_agent_is_not_installed_by_root(host: StubHost, tmp_path: Path, token_file: Path) -> None:
    result = cli("install", "--platform", "darwin", "--state-dir", str(tmp_path / "state"),
                 "--host", host.url, "--token-file", str(token_file))
    assert result.returncode == 2 and "service_needs_user" in result.stderr
    assert host.enrollments == []
