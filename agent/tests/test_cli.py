"""The agent as a separate process (`python -m forest_agent`) against the stub Host: enrollment,
single-instance lock, heartbeats with capacity, advertised change kinds, a job, SIGTERM, SIGKILL
mid-job and restart, Host down without a busy loop, revocation, and one-line misconfiguration errors."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from stub_host import StubHost

AGENT = [sys.executable, "-m", "forest_agent"]


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AGENT, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


class AgentProcess:
    def __init__(self, state: Path, *flags: str) -> None:
        self.proc = subprocess.Popen(
            [
                *AGENT,
                "run",
                "--state-dir",
                str(state),
                "--heartbeat-interval",
                "0.3",
                "--poll-wait",
                "1",
                "--backoff-max",
                "1",
                "--kill-grace",
                "1",
                *flags,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out


@pytest.fixture
def enrolled(host: StubHost, tmp_path: Path) -> Path:
    state = tmp_path / "state"
    result = cli(
        "enroll", "--state-dir", str(state), "--host", host.url, "--token", "good-token", "--name", "mac-1"
    )
    assert result.returncode == 0, result.stderr
    return state


@pytest.fixture
def agents() -> Iterator[list[AgentProcess]]:
    running: list[AgentProcess] = []
    yield running
    for agent in running:
        if agent.proc.poll() is None:
            agent.proc.kill()
            agent.proc.wait()


def test_help_lists_every_command() -> None:
    result = cli("--help")
    assert result.returncode == 0
    for command in ("enroll", "run", "status", "inventory"):
        assert command in result.stdout
    assert "--enable-native-jobs" in cli("run", "--help").stdout


def test_enroll_persists_a_private_identity(enrolled: Path, host: StubHost) -> None:
    identity = enrolled / "identity.json"
    assert stat.S_IMODE(identity.stat().st_mode) == 0o600
    assert stat.S_IMODE(enrolled.stat().st_mode) == 0o700
    data = json.loads(identity.read_text())
    assert data["grove_id"] and data["credential"].startswith("cred-")
    [body] = host.enrollments
    assert body["substrate"] == "native" and body["name"] == "mac-1"
    assert body["platforms"][0].startswith("linux/")


def test_enroll_again_needs_force(enrolled: Path, host: StubHost) -> None:
    result = cli("enroll", "--state-dir", str(enrolled), "--host", host.url, "--token", "x")
    assert result.returncode == 2
    assert "already enrolled" in result.stderr and "--force" in result.stderr


def test_a_refused_token_is_one_line_and_exit_3(host: StubHost, tmp_path: Path) -> None:
    result = cli("enroll", "--state-dir", str(tmp_path / "s"), "--host", host.url, "--token", "wrong")
    assert result.returncode == 3
    assert result.stderr.strip().splitlines() == [
        "forest-agent: error: enrollment_token_invalid: the enrollment token is unknown or used"
    ]
    assert "wrong" not in result.stderr


def test_an_unreachable_host_is_exit_4(tmp_path: Path) -> None:
    result = cli("enroll", "--state-dir", str(tmp_path / "s"), "--host", "http://127.0.0.1:9", "--token", "t")
    assert result.returncode == 4
    assert "host_unreachable" in result.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run"], "not_enrolled"),
        (["run", "--enable-native-workloads"], "needs at least one trusted key"),
        (["run", "--trusted-keys-dir", "/nonexistent"], "is not a directory"),
        (["run", "--nginx-conf-dir", "/nonexistent"], "is not a directory"),
        (["run", "--proxy-port", "8480"], "needs --mesh-address or --mesh-interface"),
        (["run", "--proxy-port", "8480", "--mesh-address", "10.8.0.5"], "needs --mesh-allow"),
        (["run", "--mesh-address", "10.8.0.5", "--mesh-interface", "wg0"], "not both"),
        (["run", "--proxy-port", "8480", "--mesh-address", "10.8.0.5", "--mesh-allow", "mesh.example"],
         "is not an IP address or network"),
        (["enroll", "--host", "ftp://x", "--token", "t"], "Host URL must look like"),
        (["enroll", "--host", "http://x"], "needs --token"),
    ],
)
def test_misconfigurations_are_one_clear_line(tmp_path: Path, args: list[str], needle: str) -> None:
    result = cli(*args, "--state-dir", str(tmp_path / "empty"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr


def test_state_dir_from_the_environment(host: StubHost, tmp_path: Path) -> None:
    state = tmp_path / "from-env"
    result = cli(
        "enroll", "--host", host.url, "--token", "good-token", env={"FOREST_AGENT_STATE_DIR": str(state)}
    )
    assert result.returncode == 0, result.stderr
    assert (state / "identity.json").exists()


def test_run_heartbeats_capacity_and_advertises_nothing_by_default(enrolled, host, agents) -> None:
    agent = AgentProcess(enrolled)
    agents.append(agent)
    beat = host.wait_for(lambda: host.heartbeats and host.heartbeats[-1], what="a heartbeat")
    assert beat["change_kinds"] == [] and beat["isolation"] == ["host_process"]
    unit = beat["capacity"]["placement_units"][0]
    assert unit["id"] == "machine" and unit["cpu_milli"]["allocatable"] >= 1000
    code, out = agent.stop()
    assert code == 0, out
    assert "shutting down" in out


def test_second_agent_on_the_same_state_dir_is_refused(enrolled, host, agents) -> None:
    first = AgentProcess(enrolled)
    agents.append(first)
    host.wait_for(lambda: host.heartbeats, what="first agent up")
    result = cli("run", "--state-dir", str(enrolled))
    assert result.returncode == 2
    assert f"another forest-agent (pid {first.proc.pid})" in result.stderr


def test_a_job_runs_and_status_shows_it(enrolled, host, agents) -> None:
    agent = AgentProcess(enrolled, "--enable-native-jobs")
    agents.append(agent)
    host.wait_for(
        lambda: host.heartbeats and host.heartbeats[-1]["change_kinds"] == ["native.job"],
        what="native.job advertised",
    )
    host.add_job(
        {
            "job_id": "cli-1",
            "change_kind": "native.job",
            "payload": {
                "command": [sys.executable, "-c", "import time; time.sleep(6); print('done')"],
                "env": {},
                "timeout_s": 30,
            },
        }
    )
    host.wait_for(lambda: host.reports.get("cli-1"), what="running report")
    status = host.wait_for(
        lambda: (s := json.loads(cli("status", "--json", "--state-dir", str(enrolled)).stdout))["jobs"] and s,
        what="status lists the job",
    )
    assert status["agent_running"] and status["host"]["reachable"]
    assert status["jobs"] == [{"job_id": "cli-1", "state": "running"}]
    report = host.terminal_report("cli-1")
    assert report["state"] == "succeeded" and "done" in report["log_tail"]


def test_sigkilled_agent_mid_job_reports_it_after_restart(enrolled, host, agents, tmp_path) -> None:
    """The job outlives the killed agent and ends only after the restarted agent says it re-attached
    (a release file the test writes on that event), so a slow machine cannot end it while no agent runs."""
    release = tmp_path / "release"
    agent = AgentProcess(enrolled, "--enable-native-jobs")
    agents.append(agent)
    host.add_job(
        {
            "job_id": "cli-2",
            "change_kind": "native.job",
            "payload": {
                "command": [
                    sys.executable,
                    "-c",
                    "import os, sys, time\n"
                    "while not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
                    "print('survived')",
                    str(release),
                ],
                "env": {},
                "timeout_s": 120,
            },
        }
    )
    host.wait_for(lambda: host.reports.get("cli-2"), what="running report")
    agent.stop(signal.SIGKILL)
    seen = len(host.heartbeats)
    restarted = AgentProcess(enrolled, "--enable-native-jobs")
    agents.append(restarted)
    host.wait_for(
        lambda: any("re-attached" in line
                    for beat in host.heartbeats[seen:] for line in beat.get("log_tail", [])),
        timeout=60,
        what="the restarted agent re-attaching to the job",
    )
    release.touch()
    report = host.terminal_report("cli-2", timeout=60)
    assert report["state"] == "succeeded" and "survived" in report["log_tail"]
    code, out = restarted.stop()
    assert code == 0
    assert "re-attached" in out


def test_host_down_means_backoff_not_a_busy_loop(enrolled, host, agents) -> None:
    host.down = True
    agent = AgentProcess(enrolled)
    agents.append(agent)
    # Both loops have met the outage once (the agent is up, whatever its start-up cost on a busy machine)...
    host.wait_for(lambda: {p.rsplit("/", 1)[-1] for p in host.refused_while_down} >= {"heartbeat", "changes"},
                  timeout=60, what="a heartbeat and a poll refused")
    time.sleep(3)  # ...then a 3 s window in which retries are counted (a busy machine only lowers the count)
    code, out = agent.stop()
    assert code == 0
    # --backoff-max 1: at most a handful of tries per loop in about 3 s, never hundreds.
    assert 1 <= out.count("poll failed") <= 10
    assert 1 <= out.count("heartbeat failed") <= 10


def test_revoked_credential_stops_the_agent_with_exit_3(enrolled, host, agents) -> None:
    host.revoked.add(json.loads((enrolled / "identity.json").read_text())["credential"])
    agent = AgentProcess(enrolled)
    agents.append(agent)
    code, out = agent.stop(signal.SIGCONT)
    assert code == 3
    assert "credential_revoked" in out and "re-enroll" in out


def test_inventory_prints_the_report() -> None:
    result = cli("inventory")
    assert result.returncode == 0
    data = json.loads(result.stdout)
    assert data["capacity"]["placement_units"][0]["id"] == "machine"
    assert data["change_kinds_when_enabled"] == ["native.job", "native.workload"]


def test_a_relative_state_dir_is_made_absolute(tmp_path, monkeypatch) -> None:
    """Job wrappers write their exit code into the state dir from the job's own working directory."""
    import argparse

    from forest_agent.cli import _state

    monkeypatch.chdir(tmp_path)
    state = _state(argparse.Namespace(state_dir=Path("var/agent")))
    assert state.path == tmp_path / "var" / "agent" and state.path.is_absolute()
