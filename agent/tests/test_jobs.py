"""Native jobs with real subprocesses against the stub Host: claim, run in a clean process group,
exit codes, timeout, cancellation, refusals, and the restart journal (reported or re-attached)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest
from stub_host import StubHost

from forest_agent.native import processes
from forest_agent.native.jobs import JobManager, JobSettings
from forest_agent.native.journal import JobJournal, JournalEntry
from forest_agent.wire.client import WireClient


def job(
    job_id: str,
    code: str,
    *,
    timeout_s: int = 30,
    env: dict[str, str] | None = None,
    change_kind: str = "native.job",
    **payload: object,
) -> dict[str, object]:
    return {
        "job_id": job_id,
        "run_id": "run-1",
        "node": "step",
        "change_kind": change_kind,
        "idempotency_key": f"run-1:step:{job_id}",
        "payload": {
            "command": [sys.executable, "-c", code],
            "env": env or {},
            "timeout_s": timeout_s,
            **payload,
        },
    }


@pytest.fixture
def manager(host: StubHost, tmp_path: Path):
    grove_id, credential = host.add_grove()
    wire = WireClient(host.url, credential=credential, grove_id=grove_id)
    made: list[JobManager] = []

    def make(enabled: bool = True) -> JobManager:
        m = JobManager(
            wire=wire,
            journal=JobJournal(tmp_path / "jobs"),
            settings=JobSettings(enabled=enabled, kill_grace_s=1.0, running_report_interval_s=0.3),
        )
        made.append(m)
        return m

    yield make
    for m in made:
        m.shutdown(timeout_s=2)
    wire.close()


def test_success_reports_running_then_succeeded_with_log_tail(
    host: StubHost, manager, tmp_path: Path
) -> None:
    m = manager()
    host.add_job(job("j1", "print('hello from the job')"))
    m.submit(host.pending_jobs["j1"])
    report = host.terminal_report("j1")
    assert report["state"] == "succeeded"
    assert report["exit_code"] == 0
    assert "hello from the job" in report["log_tail"]
    assert host.reports["j1"][0]["state"] == "running"
    host.wait_for(lambda: not (tmp_path / "jobs" / "j1").exists(), what="journal removed after report")


def test_failure_reports_the_exit_code(host: StubHost, manager) -> None:
    m = manager()
    host.add_job(job("j2", "import sys; print('boom'); sys.exit(7)"))
    m.submit(host.pending_jobs["j2"])
    report = host.terminal_report("j2")
    assert (report["state"], report["exit_code"]) == ("failed", 7)
    assert "reason" not in report


def test_environment_is_clean_and_payload_env_is_passed(host: StubHost, manager, monkeypatch) -> None:
    monkeypatch.setenv("AGENT_ONLY_SECRET", "must-not-leak")
    m = manager()
    code = "import os, json; print(json.dumps(dict(os.environ), sort_keys=True))"
    host.add_job(job("j3", code, env={"GREETING": "hi"}))
    m.submit(host.pending_jobs["j3"])
    report = host.terminal_report("j3")
    env = json.loads(report["log_tail"][-1])
    assert env["GREETING"] == "hi"
    assert "AGENT_ONLY_SECRET" not in env
    forest_vars = {
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "FOREST_OUTPUTS_FILE",
        "FOREST_NEEDS_OUTPUTS",
    }
    assert set(env) <= {"PATH", "HOME", "LANG", "GREETING", "PWD", "SHLVL", "_", *forest_vars}
    # No claim, no GPU: CUDA sees no device at all.
    assert (env["CUDA_VISIBLE_DEVICES"], env["NVIDIA_VISIBLE_DEVICES"]) == ("", "void")
    assert env["HOME"].endswith("/home")


def test_job_runs_in_its_own_process_group_and_session(host: StubHost, manager) -> None:
    m = manager()
    code = f"import os; print(os.getpgid(0) == os.getsid(0), os.getpgid(0) != {os.getpgid(0)})"
    host.add_job(job("j4", code))
    m.submit(host.pending_jobs["j4"])
    assert host.terminal_report("j4")["log_tail"][-1] == "True True"


def test_timeout_terminates_the_group_and_reports_timed_out(host: StubHost, manager) -> None:
    m = manager()
    host.add_job(job("j5", "import time; time.sleep(60)", timeout_s=1))
    started = time.monotonic()
    m.submit(host.pending_jobs["j5"])
    report = host.terminal_report("j5", timeout=15)
    assert (report["state"], report["reason"]) == ("timed_out", "timeout")
    assert time.monotonic() - started < 10


def test_cancellation_sigterm_then_sigkill_after_grace(host: StubHost, manager, tmp_path: Path) -> None:
    m = manager()
    # Ignores SIGTERM, and leaves a grandchild in the group: both must die.
    code = (
        "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        "print('child', child.pid, flush=True); time.sleep(60)"
    )
    host.add_job(job("j6", code))
    m.submit(host.pending_jobs["j6"])
    host.wait_for(
        lambda: (
            any("child" in line for r in host.reports.get("j6", []) for line in r.get("log_tail", []))
            or (
                (tmp_path / "jobs" / "j6" / "output.log").exists()
                and "child" in (tmp_path / "jobs" / "j6" / "output.log").read_text()
            )
        ),
        what="child started",
    )
    grandchild = int((tmp_path / "jobs" / "j6" / "output.log").read_text().split()[1])
    started = time.monotonic()
    m.cancel("j6")
    report = host.terminal_report("j6", timeout=15)
    assert (report["state"], report["reason"]) == ("cancelled", "cancelled")
    assert time.monotonic() - started >= 0.9  # waited out the 1 s grace before SIGKILL
    host.wait_for(
        lambda: (
            not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE
        ),
        what="grandchild killed",
    )


def test_cancellation_from_host_poll_is_routed(host: StubHost, manager) -> None:
    m = manager()
    host.add_job(job("j7", "import time; time.sleep(60)"))
    m.submit(host.pending_jobs["j7"])
    host.wait_for(lambda: host.reports.get("j7"), what="running report")
    host.cancel("j7")
    cancel_list = WireClient(host.url, credential="cred-1", grove_id="grove-1").changes(wait_s=0)["cancel"]
    for job_id in cancel_list:
        m.cancel(job_id)
    assert host.terminal_report("j7")["state"] == "cancelled"


def test_claim_conflict_runs_nothing(host: StubHost, manager) -> None:
    m = manager()
    host.add_job(job("j8", "open('/tmp/should-not-run', 'w')"))
    host.claimed.add("j8")
    m.submit(host.pending_jobs["j8"])
    host.wait_for(lambda: not m.running(), what="runner finished")
    assert "j8" not in host.reports


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"change_kind": "k8s.job"}, "unsupported_change_kind"),
        ({"image": "registry.example/x@sha256:" + "0" * 64}, "unsupported_payload"),
    ],
)
def test_jobs_this_agent_cannot_run_are_claimed_and_failed_with_a_reason(
    host, manager, payload, reason
) -> None:
    m = manager()
    host.add_job(job("j9", "print(1)", **payload))
    m.submit(host.pending_jobs["j9"])
    report = host.terminal_report("j9")
    assert (report["state"], report["reason"]) == ("failed", reason)


def test_native_jobs_disabled_are_refused(host: StubHost, manager) -> None:
    m = manager(enabled=False)
    host.add_job(job("j10", "print(1)"))
    m.submit(host.pending_jobs["j10"])
    assert host.terminal_report("j10")["reason"] == "native_jobs_disabled"


def test_missing_command_is_spawn_failed(host: StubHost, manager) -> None:
    m = manager()
    host.add_job(
        {
            "job_id": "j11",
            "change_kind": "native.job",
            "payload": {"command": ["no-such-binary-here"], "env": {}, "timeout_s": 5},
        }
    )
    m.submit(host.pending_jobs["j11"])
    report = host.terminal_report("j11")
    assert (report["state"], report["reason"]) == ("failed", "spawn_failed")


def test_invalid_payload_is_payload_invalid(host: StubHost, manager) -> None:
    m = manager()
    host.add_job({"job_id": "j12", "change_kind": "native.job", "payload": {"command": "not a list"}})
    m.submit(host.pending_jobs["j12"])
    assert host.terminal_report("j12")["reason"] == "payload_invalid"


def _orphan(tmp_path: Path, job_id: str, code: str, *, alive: bool) -> JournalEntry:
    """Leave behind what an agent that died mid-job would: a running process and its journal entry."""
    journal = JobJournal(tmp_path / "jobs")
    job_dir = journal.job_dir(job_id)
    job_dir.mkdir(parents=True)
    exit_file = job_dir / "exit_code"
    wrapper = 'f=$1; shift; "$@"; rc=$?; echo "$rc" > "$f"; exit "$rc"'
    proc = processes.spawn(
        ["/bin/sh", "-c", wrapper, "x", str(exit_file), sys.executable, "-c", code],
        cwd=job_dir,
        env=processes.clean_env({}, job_dir),
        log_path=job_dir / "output.log",
    )
    started = processes.start_time(proc.pid)
    if not alive:
        proc.wait()
    entry = JournalEntry(
        job_id=job_id,
        phase="running",
        job={"job_id": job_id},
        pid=proc.pid,
        pgid=proc.pid,
        start_time=started,
        deadline_wall=time.time() + 60,
    )
    journal.write(entry)
    return entry


def test_restart_reattaches_to_a_job_that_is_still_running(host: StubHost, manager, tmp_path: Path) -> None:
    # The orphan ends only when the test releases it, after recovery saw it running (no race on a busy box).
    release = tmp_path / "release"
    code = (f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.05)\n"
            "print('finished after restart')")
    _orphan(tmp_path, "r1", code, alive=True)
    m = manager()
    m.recover()
    assert m.running() == [{"job_id": "r1", "state": "running"}]
    release.touch()
    report = host.terminal_report("r1", timeout=10)
    assert (report["state"], report["exit_code"]) == ("succeeded", 0)
    assert "finished after restart" in report["log_tail"]


def test_restart_reports_a_vanished_job_as_agent_restarted(host: StubHost, manager, tmp_path: Path) -> None:
    journal = JobJournal(tmp_path / "jobs")
    # Recorded pid is this test process, but with a start time that does not match: a recycled pid.
    journal.write(
        JournalEntry(
            job_id="r2",
            phase="running",
            job={"job_id": "r2"},
            pid=os.getpid(),
            pgid=os.getpid(),
            start_time=1.0,
            deadline_wall=time.time() + 60,
        )
    )
    m = manager()
    m.recover()
    report = host.terminal_report("r2")
    assert (report["state"], report["reason"]) == ("failed", "agent_restarted")


def test_restart_reports_the_real_outcome_of_a_job_that_finished_meanwhile(host, manager, tmp_path) -> None:
    _orphan(tmp_path, "r3", "import sys; sys.exit(3)", alive=False)
    m = manager()
    m.recover()
    report = host.terminal_report("r3")
    assert (report["state"], report["exit_code"]) == ("failed", 3)


def test_restart_resends_an_undelivered_terminal_report(host: StubHost, manager, tmp_path: Path) -> None:
    journal = JobJournal(tmp_path / "jobs")
    from forest_agent.native.journal import Outcome

    journal.write(
        JournalEntry(
            job_id="r4",
            phase="finished",
            job={"job_id": "r4"},
            outcome=Outcome("timed_out", exit_code=-15, reason="timeout"),
        )
    )
    manager().recover()
    report = host.terminal_report("r4")
    assert (report["state"], report["reason"], report["exit_code"]) == ("timed_out", "timeout", -15)


def test_claimed_but_never_started_is_agent_restarted(host: StubHost, manager, tmp_path: Path) -> None:
    JobJournal(tmp_path / "jobs").write(JournalEntry(job_id="r5", phase="claimed", job={"job_id": "r5"}))
    manager().recover()
    assert host.terminal_report("r5")["reason"] == "agent_restarted"


def test_terminal_report_is_retried_until_host_is_back(host: StubHost, manager) -> None:
    m = manager()
    host.add_job(job("j13", "import time; time.sleep(0.3)"))
    m.submit(host.pending_jobs["j13"])
    host.wait_for(lambda: host.reports.get("j13"), what="running report")
    host.down = True
    time.sleep(0.8)
    assert host.reports["j13"][-1]["state"] == "running"
    host.down = False
    assert host.terminal_report("j13", timeout=15)["state"] == "succeeded"


def test_agent_shutdown_leaves_the_job_running_with_its_journal(
    host: StubHost, manager, tmp_path: Path
) -> None:
    m = manager()
    host.add_job(job("j14", "import time; time.sleep(30)"))
    m.submit(host.pending_jobs["j14"])
    host.wait_for(lambda: host.reports.get("j14"), what="running report")
    m.shutdown(timeout_s=2)
    [entry] = JobJournal(tmp_path / "jobs").entries()
    assert entry.phase == "running"
    assert processes.same_process_alive(entry.pid, entry.start_time)
    os.killpg(entry.pgid, signal.SIGKILL)


def test_an_nvidia_job_sees_only_the_gpus_host_claimed(host: StubHost, manager) -> None:
    """Inventory from recorded `nvidia-smi` output (8 x H100); Host claimed two of them; the job
    prints its environment: CUDA/NVIDIA_VISIBLE_DEVICES name exactly those two, never all eight."""
    from forest_agent.inventory.nvidia import parse_nvidia_smi

    recorded = Path(__file__).parent / "recorded" / "nvidia_smi_h100_x8.csv"
    gpus = parse_nvidia_smi(recorded.read_text())
    assert len(gpus) == 8
    claimed = [gpus[5].id, gpus[2].id]
    claim = {"unit_id": "machine", "devices": [{"inventory_id": d, "count": 1} for d in claimed]}
    m = manager()
    code = "import os, json; print(json.dumps(dict(os.environ), sort_keys=True))"
    # The payload cannot widen its claim by naming the variables itself.
    host.add_job(job("gpu1", code, env={"CUDA_VISIBLE_DEVICES": "all"}, accelerators={"count": 2},
                     accelerator_claim=claim))
    m.submit(host.pending_jobs["gpu1"])
    env = json.loads(host.terminal_report("gpu1")["log_tail"][-1])
    assert env["CUDA_VISIBLE_DEVICES"] == f"{gpus[5].id},{gpus[2].id}"
    assert env["NVIDIA_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"]
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert set(env["CUDA_VISIBLE_DEVICES"].split(",")) == set(claimed)


def test_a_malformed_accelerator_claim_is_refused(host: StubHost, manager) -> None:
    m = manager()
    bad = {"unit_id": "machine", "devices": [{"inventory_id": "GPU-a,GPU-b", "count": 2}]}
    host.add_job(job("gpu2", "print(1)", accelerator_claim=bad))
    m.submit(host.pending_jobs["gpu2"])
    assert host.terminal_report("gpu2")["reason"] == "payload_invalid"


def test_outputs_file_and_needs_outputs(host: StubHost, manager) -> None:
    m = manager()
    code = (
        "import json, os; seen = json.loads(os.environ['FOREST_NEEDS_OUTPUTS']);"
        "open(os.environ['FOREST_OUTPUTS_FILE'], 'w')"
        ".write(json.dumps({'got': seen['prepare']['nonce']}))"
    )
    host.add_job(job("out1", code, needs_outputs={"prepare": {"nonce": "n-42"}}))
    m.submit(host.pending_jobs["out1"])
    assert host.terminal_report("out1")["outputs"] == {"got": "n-42"}
    host.add_job(job("out2", "import os; open(os.environ['FOREST_OUTPUTS_FILE'], 'w').write('[1, 2]')"))
    m.submit(host.pending_jobs["out2"])
    assert "outputs" not in host.terminal_report("out2")  # not an object: not sent
