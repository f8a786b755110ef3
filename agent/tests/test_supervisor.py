"""The workload supervisor with real processes: readiness, crash loop, backoff, liveness restarts,
spawn failures, graceful stop; and the lifecycle tables themselves."""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import SERVER_PY, free_port

from forest_agent.errors import IllegalTransition
from forest_agent.lifecycle import Lifecycle
from forest_agent.native import generation_states, job_states, process_states
from forest_agent.native.process_states import ProcessState
from forest_agent.native.supervisor import ProcessSpec, Supervisor, SupervisorTiming
from forest_agent.wire.messages import Probe, RestartPolicy

FAST = SupervisorTiming(startsecs=0.2, stable_after_s=5.0, kill_grace_s=1.0, tick_s=0.02)
QUICK_RESTART = RestartPolicy(backoff_initial_s=0.05, backoff_max_s=0.2, crash_loop_after=3)


def http_probe(port: int, path: str = "/healthz") -> Probe:
    return Probe(
        type="http", port=port, path=path, command=[], period_s=0.1, timeout_s=1.0, failure_threshold=2
    )


def spec(tmp_path: Path, argv: list[str], **kwargs: object) -> ProcessSpec:
    (tmp_path / "server.py").write_bytes(SERVER_PY)
    return ProcessSpec(
        name="w",
        argv=argv,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        log_path=tmp_path / "out.log",
        restart=kwargs.pop("restart", QUICK_RESTART),
        **kwargs,
    )


def wait(predicate, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_http_readiness_makes_it_ready_and_stop_is_graceful(tmp_path: Path) -> None:
    port = free_port()
    changes: list[str] = []
    sup = Supervisor(
        spec(tmp_path, [sys.executable, "server.py", "serve", str(port)], readiness=http_probe(port)),
        timing=FAST,
        on_change=lambda s: changes.append(s.state.value),
    )
    sup.start()
    wait(lambda: sup.ready, what="ready")
    assert sup.probe_status()["readiness"] == "passing"
    pid = sup.pid
    sup.stop()
    assert sup.state is ProcessState.STOPPED
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    # Probe verdicts notify too; collapse repeats to see the state sequence.
    states = [s for i, s in enumerate(changes) if i == 0 or changes[i - 1] != s]
    assert states == ["starting", "running", "stopping", "stopped"]


def test_tcp_probe(tmp_path: Path) -> None:
    port = free_port()
    probe = Probe(
        type="tcp", port=port, path="", command=[], period_s=0.1, timeout_s=1.0, failure_threshold=1
    )
    sup = Supervisor(
        spec(tmp_path, [sys.executable, "server.py", "serve", str(port)], readiness=probe), timing=FAST
    )
    sup.start()
    try:
        wait(lambda: sup.ready, what="tcp ready")
    finally:
        sup.stop()


def test_exec_probe_failing_keeps_it_not_ready(tmp_path: Path) -> None:
    probe = Probe(
        type="exec",
        port=None,
        path="",
        command=["/bin/false"],
        period_s=0.1,
        timeout_s=1.0,
        failure_threshold=1,
    )
    sup = Supervisor(
        spec(tmp_path, [sys.executable, "-c", "import time; time.sleep(30)"], readiness=probe), timing=FAST
    )
    sup.start()
    try:
        wait(
            lambda: sup.probe_status()["readiness"] == "failing" and sup.state is ProcessState.RUNNING,
            what="running with readiness failing",
        )
        assert not sup.ready
    finally:
        sup.stop()


def test_a_crashing_process_backs_off_then_crash_loops(tmp_path: Path) -> None:
    seen: list[str] = []
    sup = Supervisor(
        spec(tmp_path, [sys.executable, "server.py", "crash", "1"]),
        timing=FAST,
        on_change=lambda s: seen.append(s.state.value),
    )
    sup.start()
    try:
        wait(lambda: sup.state is ProcessState.CRASH_LOOP, what="crash loop")
        assert seen.count("backoff") == 2
        assert sup.failures == 3 and sup.last_exit == 3
        assert "exited with 3" in (sup.last_reason or "")
        wait(lambda: sup.restarts >= 3, what="a retry after the crash-loop delay")
    finally:
        sup.stop()
    assert sup.state is ProcessState.STOPPED


def test_backoff_delays_grow(tmp_path: Path) -> None:
    policy = RestartPolicy(backoff_initial_s=0.2, backoff_max_s=0.8, crash_loop_after=10)
    starts: list[float] = []
    sup = Supervisor(
        spec(tmp_path, [sys.executable, "-c", "raise SystemExit(1)"], restart=policy),
        timing=FAST,
        on_change=lambda s: starts.append(time.monotonic()) if s.state.value == "starting" else None,
    )
    sup.start()
    try:
        wait(lambda: len(starts) >= 4, what="four starts")
    finally:
        sup.stop()
    gaps = [b - a for a, b in itertools.pairwise(starts)][:3]
    assert gaps[1] > gaps[0] and gaps[2] > gaps[1]


def test_liveness_failure_restarts_the_process(tmp_path: Path) -> None:
    port = free_port()
    # Liveness checks a port nothing listens on: the process is killed and restarted.
    liveness = Probe(
        type="tcp", port=free_port(), path="", command=[], period_s=0.1, timeout_s=0.5, failure_threshold=2
    )
    sup = Supervisor(
        spec(
            tmp_path,
            [sys.executable, "server.py", "serve", str(port)],
            liveness=liveness,
            restart=RestartPolicy(0.05, 0.2, 50),
        ),
        timing=FAST,
    )
    sup.start()
    try:
        wait(lambda: sup.pid is not None, what="first pid")
        first = sup.pid
        wait(lambda: sup.restarts >= 1 and sup.pid != first, what="restart after liveness failure")
        assert sup.last_reason == "liveness_failed"
    finally:
        sup.stop()


def test_spawn_failure_is_backed_off_not_raised(tmp_path: Path) -> None:
    sup = Supervisor(spec(tmp_path, [str(tmp_path / "missing-binary")]), timing=FAST)
    sup.start()
    try:
        wait(lambda: sup.state is ProcessState.CRASH_LOOP, what="crash loop from spawn failures")
        assert "spawn failed" in (sup.last_reason or "")
    finally:
        sup.stop()


@pytest.mark.parametrize("module", [job_states, process_states, generation_states])
def test_every_state_table_refuses_an_illegal_move(module) -> None:
    states = list(next(iter(module.ALLOWED)).__class__)
    for source, targets in module.ALLOWED.items():
        for target in states:
            machine = Lifecycle("t", source, module.ALLOWED)
            if target in targets:
                machine.transition(target)
                assert machine.state is target
            else:
                with pytest.raises(IllegalTransition):
                    machine.transition(target)
                assert machine.state is source
