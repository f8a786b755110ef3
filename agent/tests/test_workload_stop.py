"""The agent stops what it started: a workload's whole process group (its children too) goes when the
agent stops, SIGTERM first and SIGKILL after the grace the generation declares — also when the agent is
killed the way systemd and launchd kill a service (SIGTERM, then SIGKILL after their timeout), and when a
second signal arrives during the stop (`make run`'s Ctrl-C). `--leave-workloads-running` keeps them and
the next agent adopts them.

The agent runs as a separate process (`python -m forest_agent run`) against the stub Host (a real HTTP
server standing in for Host: tests/stub_host.py); the workloads, the signals and the guardian are real.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from helpers import Signer, digest_of, file_entry, free_port, make_tar, wait_for
from stub_host import StubHost

AGENT = [sys.executable, "-m", "forest_agent"]

# A workload that leaves a tree behind: it starts a child (a sleeper) and serves /healthz. Both write
# "<name> got SIGTERM" to the log; `stubborn` ones then keep running, so only a SIGKILL ends them.
WORKLOAD_PY = b"""
import http.server, os, signal, subprocess, sys
mode, port = sys.argv[1], int(sys.argv[2])
def on_term(name):
    def handler(signum, frame):
        print(name, "got SIGTERM", flush=True)
        if mode != "stubborn":
            os._exit(0)
    return handler
if sys.argv[3:] == ["child"]:
    signal.signal(signal.SIGTERM, on_term("child"))
    while True:
        signal.pause()
signal.signal(signal.SIGTERM, on_term("leader"))
subprocess.Popen([sys.executable, __file__, mode, str(port), "child"])
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_GET(self):
        body = str(os.getpid()).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


class Agent:
    def __init__(self, state: Path, keys: Path, log: Path, *flags: str) -> None:
        self.log = open(log, "ab")  # noqa: SIM115 - closed in finish()
        self.proc = subprocess.Popen(
            [*AGENT, "run", "--state-dir", str(state), "--heartbeat-interval", "0.3", "--poll-wait", "1",
             "--backoff-max", "1", "--kill-grace", "1", "--enable-native-workloads",
             "--trusted-keys-dir", str(keys), *flags],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def finish(self, timeout: float = 30) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.log.close()


@pytest.fixture
def rig(host: StubHost, signer: Signer, tmp_path: Path) -> Iterator[dict]:  # type: ignore[type-arg]
    state = tmp_path / "state"
    enrolled = subprocess.run([*AGENT, "enroll", "--state-dir", str(state), "--host", host.url,
                               "--token", "good-token", "--name", "box"], capture_output=True, text=True,
                              timeout=30, check=False)
    assert enrolled.returncode == 0, enrolled.stderr
    keys = tmp_path / "keys"
    signer.write_public(keys)
    started: list[Agent] = []
    pgids: list[int] = []

    def start(*flags: str) -> Agent:
        agent = Agent(state, keys, tmp_path / f"agent-{len(started)}.log", *flags)
        started.append(agent)
        return agent

    yield {"state": state, "start": start, "pgids": pgids, "tmp": tmp_path}
    for agent in started:
        if agent.proc.poll() is None:
            agent.proc.kill()
            agent.proc.wait()
    for pgid in pgids:  # whatever a failed test left behind
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def generation(host: StubHost, signer: Signer, mode: str, port: int, grace_s: float) -> dict:  # type: ignore[type-arg]
    data = make_tar([file_entry("workload.py", WORKLOAD_PY)])
    digest = digest_of(data)
    return {
        "generation_id": str(uuid.uuid4()), "workload": "web", "generation": 1,
        "bundle": {"url": host.add_blob(f"web-{uuid.uuid4()}", data), "digest": digest, "size": len(data),
                   "signature": signer.sign(digest), "key_id": signer.key_id},
        "command": [sys.executable, "workload.py", mode, str(port)],
        "ports": [{"name": "http", "port": port}],
        "probes": {"readiness": {"type": "http", "path": "/", "port": port, "period_s": 1}},
        "stop_grace_s": grace_s,
    }


def go_live(rig: dict, host: StubHost, signer: Signer, mode: str, grace_s: float) -> tuple[dict, list[int]]:  # type: ignore[type-arg]
    """Send one generation, wait until it is live and its child is up; returns it and its processes."""
    port = free_port()
    gen = generation(host, signer, mode, port, grace_s)
    host.add_workload(gen)
    host.status_with(gen["generation_id"], "live", timeout=30)
    leader = int(httpx.get(f"http://127.0.0.1:{port}/", timeout=5).text)
    rig["pgids"].append(os.getpgid(leader))
    tree = wait_for(lambda: [leader, *[c.pid for c in psutil.Process(leader).children(recursive=True)]]
                    if psutil.Process(leader).children() else None, what="the workload's child")
    gen["port"] = port
    return gen, tree


def alive(pids: list[int]) -> list[int]:
    left = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.NoSuchProcess:
            continue
    return left


def group_left(pgid: int) -> list[int]:
    from forest_agent.native.processes import group_members

    return group_members(pgid)


def output_of(rig: dict, gen: dict) -> str:  # type: ignore[type-arg]
    path = rig["state"] / "workloads" / "web" / "generations" / gen["generation_id"] / "output.log"
    return path.read_text()


def test_sigterm_stops_the_whole_process_group_sigterm_first(rig, host: StubHost, signer: Signer) -> None:  # type: ignore[no-untyped-def]
    agent = rig["start"]()
    gen, tree = go_live(rig, host, signer, "polite", grace_s=5)
    agent.proc.send_signal(signal.SIGTERM)
    assert agent.finish() == 0
    # The agent waits for its workloads before it exits: nothing of the tree is left, child included.
    assert alive(tree) == [] and group_left(tree[0]) == []
    assert "child got SIGTERM" in output_of(rig, gen)  # the group was signalled, not only the leader
    host.status_with(gen["generation_id"], "stopped")


def test_killed_like_systemd_and_launchd_do_nothing_of_its_workloads_is_left(rig, host: StubHost,  # type: ignore[no-untyped-def]
                                                                             signer: Signer) -> None:
    """SIGTERM, then SIGKILL after the service manager's timeout, which here is shorter than the grace the
    generation declares: the agent dies mid-stop and its guardian finishes the job."""
    agent = rig["start"]()
    gen, tree = go_live(rig, host, signer, "stubborn", grace_s=3)
    agent.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "leader got SIGTERM" in output_of(rig, gen), what="the workload to get SIGTERM")
    agent.proc.send_signal(signal.SIGKILL)  # the stop timeout ran out
    agent.finish()
    wait_for(lambda: not alive(tree) and not group_left(tree[0]), timeout=30,
             what="the guardian to SIGKILL the workload's group after its grace")


def test_a_sigkilled_agent_leaves_nothing_behind(rig, host: StubHost, signer: Signer) -> None:  # type: ignore[no-untyped-def]
    agent = rig["start"]()
    gen, tree = go_live(rig, host, signer, "polite", grace_s=5)
    agent.proc.send_signal(signal.SIGKILL)  # kill -9, the OOM killer: no stop at all
    agent.finish()
    wait_for(lambda: not alive(tree) and not group_left(tree[0]), what="the guardian to stop the workload")
    assert "leader got SIGTERM" in output_of(rig, gen)  # politely first


def test_a_second_signal_hurries_the_stop_and_still_stops_the_workloads(rig, host: StubHost,  # type: ignore[no-untyped-def]
                                                                        signer: Signer) -> None:
    """`make run`'s Ctrl-C: honcho SIGTERMs the agent's process group and local-agent.sh's trap sends
    one more. The second signal used to kill the agent at once, before it stopped anything."""
    agent = rig["start"]()
    gen, tree = go_live(rig, host, signer, "stubborn", grace_s=3600)
    agent.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "leader got SIGTERM" in output_of(rig, gen), what="the workload to get SIGTERM")
    agent.proc.send_signal(signal.SIGTERM)
    assert agent.finish() == 0  # it finished its stop instead of dying on the default action
    assert alive(tree) == [] and group_left(tree[0]) == []


def test_leave_workloads_running_keeps_them_and_the_next_agent_adopts_them(rig, host: StubHost,  # type: ignore[no-untyped-def]
                                                                           signer: Signer) -> None:
    agent = rig["start"]("--leave-workloads-running")
    gen, tree = go_live(rig, host, signer, "polite", grace_s=5)
    agent.proc.send_signal(signal.SIGTERM)
    assert agent.finish() == 0
    assert alive(tree) == tree  # the operator asked: nothing was stopped, not even by the guardian
    assert "got SIGTERM" not in output_of(rig, gen)

    host.statuses.clear()
    second = rig["start"]()  # restores the generation from disk, finds its process running, adopts it
    host.status_with(gen["generation_id"], "live", timeout=30)
    assert int(httpx.get(f"http://127.0.0.1:{gen['port']}/", timeout=5).text) == tree[0]
    snapshot = wait_for(lambda: json.loads((rig["state"] / "status.json").read_text()).get("workloads"),
                        what="the status snapshot")
    assert snapshot[0]["pid"] == tree[0]
    second.proc.send_signal(signal.SIGTERM)  # this agent was not asked to leave them: they go
    assert second.finish() == 0
    assert alive(tree) == [] and group_left(tree[0]) == []


@pytest.mark.parametrize(("value", "ok"), [(30, True), (0.5, True), (None, True), (0, False), (-1, False),
                                           (True, False), ("30", False), (3601, False)])
def test_stop_grace_s_is_checked_on_the_wire(host: StubHost, signer: Signer, value: object, ok: bool) -> None:
    from forest_agent.wire.messages import Generation, MessageInvalid

    raw = {**generation(host, signer, "polite", 8080, 1), "stop_grace_s": value}
    if ok:
        assert Generation.parse(raw).stop_grace_s == (None if value is None else float(value))  # type: ignore[arg-type]
    else:
        with pytest.raises(MessageInvalid, match="stop_grace_s"):
            Generation.parse(raw)


def test_the_generations_grace_is_the_one_used_and_told_to_the_guardian(tmp_path: Path) -> None:
    """The supervisor tells its watcher (the guardian) each group with the generation's own grace; the agent's
    --kill-grace is only the default. The watcher here is a recorder: nothing else is faked."""
    from forest_agent.native.supervisor import ProcessSpec, Supervisor, SupervisorTiming
    from forest_agent.wire.messages import RestartPolicy

    class Recorder:
        def __init__(self) -> None:
            self.starts: list[tuple[int, float]] = []
            self.ends: list[int] = []

        def started(self, pid: int, start_time: float, grace_s: float) -> None:
            self.starts.append((pid, grace_s))

        def ended(self, pid: int) -> None:
            self.ends.append(pid)

    timing = SupervisorTiming(startsecs=0.1, kill_grace_s=1.0, tick_s=0.02)
    for declared, expected in ((7.0, 7.0), (None, 1.0)):
        recorder = Recorder()
        idle = [sys.executable, "-c", "import signal; signal.pause()"]  # runs until it is signalled
        spec = ProcessSpec(name="w", argv=idle, cwd=tmp_path,
                           env={"PATH": os.environ["PATH"]}, log_path=tmp_path / "out.log",
                           restart=RestartPolicy(), stop_grace_s=declared)
        supervisor = Supervisor(spec, timing=timing, watch=recorder)
        supervisor.start()
        wait_for(lambda r=recorder: r.starts, what="the supervisor to report its process")
        [(pid, grace)] = recorder.starts
        assert grace == expected and supervisor.grace_s == expected
        supervisor.stop()
        assert recorder.ends == [pid] and alive([pid]) == []
