"""Native workloads end to end inside the agent: a signed bundle holding a tiny HTTP server becomes
live, a new generation supersedes it, a crash-looping one is reported, a refused bundle leaves the
live one alone, rollback re-activates the previous generation, and secrets stay private.
Real HTTP (stub Host), real Ed25519, real processes."""

from __future__ import annotations

import json
import os
import stat
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import SERVER_PY, Signer, digest_of, file_entry, free_port, make_tar
from stub_host import StubHost

from forest_agent.logring import LogRing, Redactor
from forest_agent.native.bundles import BundleInstaller, BundleLimits
from forest_agent.native.generations import GenerationStore
from forest_agent.native.signing import TrustedKeys
from forest_agent.native.status_reporter import StatusReporter
from forest_agent.native.supervisor import SupervisorTiming
from forest_agent.native.workloads import WorkloadManager, WorkloadSettings
from forest_agent.wire.client import WireClient

TIMING = SupervisorTiming(startsecs=0.2, stable_after_s=5.0, kill_grace_s=1.0, tick_s=0.02)
SECRET = "s3cr3t-value-never-logged"


class Rig:
    def __init__(self, host: StubHost, signer: Signer, tmp_path: Path, *, enabled: bool = True) -> None:
        grove_id, credential = host.add_grove()
        self.host = host
        self.signer = signer
        self.wire = WireClient(host.url, credential=credential, grove_id=grove_id)
        self.reporter = StatusReporter(self.wire)
        self.reporter.start()
        self.ring = LogRing(200, Redactor())
        self.store = GenerationStore(tmp_path / "workloads")
        signer.write_public(tmp_path / "keys")
        installer = BundleInstaller(
            keys=TrustedKeys.load(keys_dir=tmp_path / "keys"), limits=BundleLimits(), platform="linux"
        )
        self.manager = WorkloadManager(
            store=self.store,
            installer=installer,
            reporter=self.reporter,
            redactor=self.ring.redactor,
            settings=WorkloadSettings(enabled=enabled, timing=TIMING),
        )

    def generation(
        self, mode: str, port: int, *, number: int = 1, secrets_mode: str = "env", data: bytes | None = None
    ) -> dict[str, object]:
        data = data or make_tar([file_entry("server.py", SERVER_PY)])
        digest = digest_of(data)
        return {
            "generation_id": str(uuid.uuid4()),
            "workload": "shop",
            "generation": number,
            "bundle": {
                "url": self.host.add_blob(f"{mode}-{number}", data),
                "digest": digest,
                "size": len(data),
                "signature": self.signer.sign(digest),
                "key_id": self.signer.key_id,
            },
            "command": [sys.executable, "server.py", mode, str(port)],
            "env": {"COLOR": mode},
            "secrets": {"API_KEY": SECRET},
            "secrets_mode": secrets_mode,
            "ports": [{"name": "http", "port": port}],
            "probes": {"readiness": {"type": "http", "path": "/healthz", "port": port, "period_s": 1}},
            "restart": {"backoff_initial_s": 0.05, "backoff_max_s": 0.2, "crash_loop_after": 3},
        }

    def close(self) -> None:
        self.manager.stop_all()
        self.reporter.stop()
        self.wire.close()


@pytest.fixture
def rig(host: StubHost, signer: Signer, tmp_path: Path) -> Iterator[Rig]:
    made = Rig(host, signer, tmp_path)
    yield made
    made.close()


def get(port: int, path: str = "/") -> str:
    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2).text


def test_a_signed_bundle_becomes_live_with_env_secrets(rig: Rig, host: StubHost) -> None:
    port = free_port()
    gen = rig.generation("blue", port)
    rig.manager.apply(gen)
    live = host.status_with(gen["generation_id"], "live")
    assert live["live"] is True and live["probes"]["readiness"] == "passing"
    states = [s["state"] for s in host.statuses[gen["generation_id"]]]
    assert states[0] == "pending" and "starting" in states
    env = json.loads(get(port, "/env"))
    assert env["API_KEY"] == SECRET and env["COLOR"] == "blue"
    assert "PYTEST_CURRENT_TEST" not in env
    # The server printed the secret; no status report carries it.
    rig.manager._report(rig.manager._active["shop"])
    rig.reporter.flush(5)
    assert "server starting" in " ".join(host.statuses[gen["generation_id"]][-1]["log_tail"])
    assert SECRET not in json.dumps(host.statuses)
    assert rig.store.current("shop") == gen["generation_id"]


def test_file_secrets_are_0600_in_a_0700_dir_and_go_with_the_generation(rig: Rig, host: StubHost) -> None:
    port = free_port()
    gen = rig.generation("blue", port, secrets_mode="file")
    rig.manager.apply(gen)
    host.status_with(gen["generation_id"], "live")
    assert get(port, "/secret-file") == SECRET
    assert "API_KEY" not in json.loads(get(port, "/env"))
    secrets = rig.store.generation_dir("shop", gen["generation_id"]) / "secrets"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700
    assert stat.S_IMODE((secrets / "API_KEY").stat().st_mode) == 0o600
    spec = (rig.store.generation_dir("shop", gen["generation_id"]) / "spec.json").read_text()
    assert SECRET not in spec
    # Two newer generations later, this one is pruned, secrets included.
    for number in (2, 3):
        newer = rig.generation("green", free_port(), number=number)
        rig.manager.apply(newer)
        host.status_with(newer["generation_id"], "live")
    assert not secrets.exists()


def test_a_new_generation_supersedes_the_old_and_previous_is_kept(rig: Rig, host: StubHost) -> None:
    port = free_port()
    blue = rig.generation("blue", port)
    rig.manager.apply(blue)
    host.status_with(blue["generation_id"], "live")
    green = rig.generation("green", port, number=2)
    rig.manager.apply(green)
    host.status_with(green["generation_id"], "live")
    host.status_with(blue["generation_id"], "superseded")
    assert get(port) == "green ok"
    assert rig.store.current("shop") == green["generation_id"]
    assert rig.store.previous("shop") == blue["generation_id"]
    assert os.readlink(rig.store.workload_dir("shop") / "current") == f"generations/{green['generation_id']}"


def test_rollback_reactivates_the_previous_generation_without_downloading(rig: Rig, host: StubHost) -> None:
    port = free_port()
    blue = rig.generation("blue", port)
    rig.manager.apply(blue)
    host.status_with(blue["generation_id"], "live")
    green = rig.generation("green", port, number=2)
    rig.manager.apply(green)
    host.status_with(green["generation_id"], "live")
    host.blobs.clear()  # a second download would now fail
    host.statuses[blue["generation_id"]].clear()
    rig.manager.apply(blue)
    host.status_with(blue["generation_id"], "live")
    assert get(port) == "blue ok"
    assert rig.store.current("shop") == blue["generation_id"]


def test_a_crash_looping_generation_is_reported(rig: Rig, host: StubHost) -> None:
    gen = rig.generation("crash", free_port())
    rig.manager.apply(gen)
    status = host.status_with(gen["generation_id"], "crash_loop")
    assert status["live"] is False
    assert "exited with 3" in status["message"]


def test_a_refused_bundle_is_failed_and_the_live_generation_keeps_serving(rig: Rig, host: StubHost) -> None:
    port = free_port()
    blue = rig.generation("blue", port)
    rig.manager.apply(blue)
    host.status_with(blue["generation_id"], "live")
    bad = rig.generation("green", port, number=2)
    bad["bundle"]["signature"] = Signer(rig.signer.key_id).sign(bad["bundle"]["digest"])
    rig.manager.apply(bad)
    failed = host.status_with(bad["generation_id"], "failed")
    assert failed["reason"] == "bundle_signature_invalid"
    assert get(port) == "blue ok"
    assert rig.store.current("shop") == blue["generation_id"]
    assert not any(
        p.name.startswith(bad["generation_id"])
        for p in (rig.store.workload_dir("shop") / "generations").iterdir()
    )


def test_invalid_generation_is_refused_with_payload_invalid(rig: Rig, host: StubHost) -> None:
    gen = rig.generation("blue", free_port())
    gen["command"] = "not a list"
    rig.manager.apply(gen)
    assert host.status_with(gen["generation_id"], "failed")["reason"] == "payload_invalid"


def test_workloads_disabled_refuses(host: StubHost, signer: Signer, tmp_path: Path) -> None:
    rig = Rig(host, signer, tmp_path, enabled=False)
    try:
        gen = rig.generation("blue", free_port())
        rig.manager.apply(gen)
        assert host.status_with(gen["generation_id"], "failed")["reason"] == "native_workloads_disabled"
    finally:
        rig.close()


def test_restore_brings_the_current_generation_back_after_a_restart(
    host: StubHost, signer: Signer, tmp_path: Path
) -> None:
    port = free_port()
    first = Rig(host, signer, tmp_path)
    gen = first.generation("blue", port)
    first.manager.apply(gen)
    host.status_with(gen["generation_id"], "live")
    first.close()
    host.status_with(gen["generation_id"], "stopped")
    host.statuses.clear()
    second = Rig(host, signer, tmp_path)
    try:
        second.manager.restore()
        host.status_with(gen["generation_id"], "live")
        assert json.loads(get(port, "/env"))["API_KEY"] == SECRET
    finally:
        second.close()
