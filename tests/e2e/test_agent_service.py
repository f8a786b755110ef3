"""`forest-agent install` against a live Host: the real CLI enrolls with a token file and writes the systemd
unit (relocated with `--root`), systemd's own `systemd-analyze verify` accepts the unit, and the agent then
runs as the unit's ExecStart command line says: it heartbeats, runs a signed native workload, and when it is
stopped the way systemd stops it (SIGTERM, then SIGKILL after TimeoutStopSec) nothing of the workload is
left.

What is not real here: systemd itself does not start the process (this machine's tests run without it), so
the unit's User=, sandbox and cgroup are not applied; the command line, the state directory and the signals
are exactly the unit's.
"""
from __future__ import annotations

import json
import shlex
import shutil
import signal
import subprocess
import sys

import psutil
import pytest

from apps.groves.models import Grove
from apps.groves.services import enrollment_token_create
from apps.workloads import services
from tests.console import console_script
from tests.e2e.test_native_workload import _bundle, _state, free_port, signing_key  # noqa: F401
from tests.pipelines.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e, pytest.mark.slow]
AGENT = console_script("forest-agent")


def _exec_start(unit_text: str) -> list[str]:
    """The unit's ExecStart as the argv systemd would run (its `%%` and `$$` escapes undone)."""
    [line] = [line for line in unit_text.splitlines() if line.startswith("ExecStart=")]
    return [word.replace("%%", "%").replace("$$", "$") for word in shlex.split(line.removeprefix("ExecStart="))]


def _workload_processes(state_dir) -> list[psutil.Process]:
    found = []
    for record in state_dir.glob("workloads/*/generations/*/process.json"):
        pid = json.loads(record.read_text())["pid"]
        try:
            leader = psutil.Process(pid)
            found += [leader, *leader.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    return found


def _alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_installed_unit_verifies_and_its_exec_start_runs_and_stops_clean(live_server, tmp_path, signing_key,  # noqa: F811
                                                                         settings):
    key, public = signing_key
    settings.FOREST_NATIVE_WORKLOAD_DISPATCH = True
    settings.FOREST_PUBLIC_URL = live_server.url
    _, token = enrollment_token_create(roles=["compute", "runtime"], substrate="native")
    token_file = tmp_path / "token"
    token_file.write_text(token)
    root = tmp_path / "root"
    installed = subprocess.run(
        [AGENT, "install", "--platform", "linux", "--root", str(root), "--host", live_server.url,
         "--token-file", str(token_file), "--name", "svc-box", "--stop-timeout", "5", "--",
         "--enable-native-workloads", "--trusted-key", f"release={public}", "--heartbeat-interval", "1",
         "--poll-wait", "2", "--kill-grace", "1"],
        capture_output=True, text=True, timeout=60, check=False)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert token not in installed.stdout + installed.stderr
    grove = Grove.objects.get(name="svc-box")
    unit = root / "etc/systemd/system/forest-agent.service"
    state_dir = root / "var/lib/forest-agent"

    if shutil.which("systemd-analyze"):
        verified = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True,
                                  timeout=60, check=False)
        assert verified.returncode == 0 and verified.stderr.strip() == "", verified.stderr

    argv = _exec_start(unit.read_text())
    assert argv[1:4] == ["run", "--state-dir", str(state_dir)]
    log = open(tmp_path / "agent.log", "ab")  # noqa: SIM115 - closed below
    agent = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: "native.workload" in Grove.objects.get(pk=grove.pk).change_kinds,
                 what="the service's agent to heartbeat and advertise native.workload")
        bundle = _bundle(key)
        port = free_port()
        _, generation = services.native_workload_apply(body={
            "slug": "svc-hello", "bundle_digest": bundle.digest, "grove": grove.slug,
            "command": [sys.executable, "server.py"], "env": {"PORT": str(port), "COLOR": "blue"},
            "ports": [{"name": "http", "port": port}],
            "probes": {"readiness": {"type": "http", "path": "/healthz", "port": port, "period_s": 1}}})
        _state(generation, "live")
        workload = wait_for(lambda: _workload_processes(state_dir), what="the workload's process record")

        agent.send_signal(signal.SIGTERM)  # systemctl stop: SIGTERM to the main process (KillMode=mixed) ...
        try:
            agent.wait(timeout=5)  # ... and SIGKILL once TimeoutStopSec (5 here) has passed
        except subprocess.TimeoutExpired:
            agent.send_signal(signal.SIGKILL)
            agent.wait(timeout=10)
        wait_for(lambda: not _alive(workload), timeout=30, what="nothing of the workload to be left")
        _state(generation, "stopped")
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        log.close()
    assert (state_dir / "identity.json").is_file() and (state_dir / "service.json").is_file()
