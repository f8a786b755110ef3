"""A native workload end to end: Host's generation writer, the real ``forest-agent`` process and a signed
bundle served from Host's CAS.

A tiny HTTP server in a signed tar.gz becomes live and answers; a new generation replaces it; a
crash-looping generation is reported to Host. Nothing is faked. (Ingress through Host's edge and the
agent's nginx: tests/e2e/test_native_ingress.py.)
"""
from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import os
import signal
import socket
import sys
import tarfile

import httpx
import psutil
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from apps.artifacts.services import artifact_blob_create
from apps.groves.models import Grove
from apps.workloads import services
from apps.workloads.models import WorkloadGeneration
from tests.pipelines.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e, pytest.mark.slow]
SECRET = "tok-9f8e7d6c5b4a"

SERVER = b'''
import http.server, os
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("ok" if self.path == "/healthz" else
                f"{os.environ['COLOR']} token-length={len(os.environ.get('API_TOKEN', ''))}").encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
'''


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def signing_key(tmp_path):
    key = Ed25519PrivateKey.generate()
    public = tmp_path / "release.pem"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return key, public


# Answers its pid, and on SIGTERM only notes it in $MARK and keeps running: a SIGKILL alone ends it.
STUBBORN = b'''
import http.server, os, pathlib, signal
signal.signal(signal.SIGTERM, lambda *_: pathlib.Path(os.environ["MARK"]).write_text("SIGTERM"))
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = str(os.getpid()).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
'''


def _bundle(key: Ed25519PrivateKey, script: bytes = SERVER):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo("server.py")
        info.size, info.mode = len(script), 0o644
        tar.addfile(info, io.BytesIO(script))
    data = buffer.getvalue()
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    signature = base64.b64encode(key.sign(digest.encode())).decode()
    return artifact_blob_create(chunks=[data], expected_digest=digest, media_type="application/gzip",
                                signature=signature, signing_key_id="release")


def _get(url: str) -> str | None:
    try:
        response = httpx.get(url, timeout=5)
    except httpx.TransportError:
        return None
    return response.text if response.status_code == 200 else None


def _state(generation: WorkloadGeneration, *states: str, timeout: float = 60) -> WorkloadGeneration:
    return wait_for(lambda: WorkloadGeneration.objects.filter(pk=generation.pk, state__in=states).first(),
                    timeout=timeout, what=f"generation {generation.number} to be {'/'.join(states)}")


def test_signed_bundle_goes_live_is_replaced_and_a_crash_loop_is_reported(
        live_server, enrolled, agents, signing_key, settings):
    grove, state_dir = enrolled
    key, public = signing_key
    settings.FOREST_NATIVE_WORKLOAD_DISPATCH = True
    settings.FOREST_PUBLIC_URL = live_server.url
    agent = agents(state_dir, "--enable-native-workloads", "--trusted-key", f"release={public}")
    try:
        wait_for(lambda: "native.workload" in Grove.objects.get(pk=grove.pk).change_kinds,
                 what="the agent to advertise native.workload")
        bundle = _bundle(key)
        services.workload_secret_set(team="", environment="default", name="API_TOKEN", value=SECRET)
        app_port = free_port()
        spec = {"slug": "hello", "bundle_digest": bundle.digest, "grove": grove.slug,
                "command": [sys.executable, "server.py"], "env": {"PORT": str(app_port), "COLOR": "blue"},
                "secret_refs": ["API_TOKEN"], "ports": [{"name": "http", "port": app_port}],
                "probes": {"readiness": {"type": "http", "path": "/healthz", "port": app_port, "period_s": 1}},
                "restart": {"backoff_initial_s": 1, "backoff_max_s": 2, "crash_loop_after": 2}}
        _, first = services.native_workload_apply(body=spec)
        first = _state(first, "live")
        assert first.live and first.probes.get("readiness") == "passing"
        assert first.reason == "", (first.reason, first.message, agent.output())
        answer = wait_for(lambda: _get(f"http://127.0.0.1:{app_port}/"), what="the workload to answer")
        assert answer == f"blue token-length={len(SECRET)}"

        _, second = services.native_workload_apply(body={**spec, "env": {**spec["env"], "COLOR": "green"}})
        _state(second, "live")
        wait_for(lambda: (_get(f"http://127.0.0.1:{app_port}/") or "").startswith("green"),
                 what="the new generation to answer")
        assert WorkloadGeneration.objects.get(pk=first.pk).state == "superseded"

        crashing = {**spec, "command": [sys.executable, "-c", "import sys; sys.exit(3)"]}
        _, third = services.native_workload_apply(body=crashing)
        third = _state(third, "crash_loop")
        # crash_loop_after=2: the second consecutive exit (one restart) declares the loop.
        assert third.restarts >= 1 and not third.live
    finally:
        agent.stop()
    assert SECRET not in agent.output()
    assert SECRET not in str(Grove.objects.get(pk=grove.pk).log_tail)
    assert SECRET not in str(list(WorkloadGeneration.objects.values_list("spec", "log_tail", "message")))


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_declared_stop_grace_reaches_the_agent_which_sigkills_after_it(live_server, enrolled, agents,
                                                                          signing_key, settings, tmp_path):
    """Issue 38: Host sends the workload's ``stop_grace_s``; the agent, whose own ``--kill-grace`` is 600 s,
    stops a workload that ignores SIGTERM with SIGKILL after the declared 1 s, so it exits within the
    deadline below (with its own grace it would still be waiting)."""
    grove, state_dir = enrolled
    key, public = signing_key
    settings.FOREST_NATIVE_WORKLOAD_DISPATCH = True
    settings.FOREST_PUBLIC_URL = live_server.url
    agent = agents(state_dir, "--enable-native-workloads", "--trusted-key", f"release={public}",
                   "--kill-grace", "600")
    wait_for(lambda: "native.workload" in Grove.objects.get(pk=grove.pk).change_kinds,
             what="the agent to advertise native.workload")
    app_port, mark = free_port(), tmp_path / "sigterm-seen"
    _, generation = services.native_workload_apply(body={
        "slug": "stubborn", "bundle_digest": _bundle(key, STUBBORN).digest, "grove": grove.slug,
        "command": [sys.executable, "server.py"], "env": {"PORT": str(app_port), "MARK": str(mark)},
        "probes": {"readiness": {"type": "http", "path": "/", "port": app_port, "period_s": 1}},
        "stop_grace_s": 1})
    assert generation.spec["stop_grace_s"] == 1
    _state(generation, "live")
    pid = int(wait_for(lambda: _get(f"http://127.0.0.1:{app_port}/"), what="the workload to answer"))
    try:
        agent.proc.send_signal(signal.SIGTERM)  # as systemd and launchd stop a service
        assert agent.proc.wait(timeout=60) == 0, agent.output()
        assert mark.read_text() == "SIGTERM"  # asked first
        wait_for(lambda: not _alive(pid), timeout=10, what="the stubborn workload to be gone")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_bundle_signed_by_an_untrusted_key_is_refused_and_reported(live_server, enrolled, agents, signing_key,
                                                                      settings):
    grove, state_dir = enrolled
    _, public = signing_key
    settings.FOREST_NATIVE_WORKLOAD_DISPATCH = True
    settings.FOREST_PUBLIC_URL = live_server.url
    agent = agents(state_dir, "--enable-native-workloads", "--trusted-key", f"release={public}")
    wait_for(lambda: "native.workload" in Grove.objects.get(pk=grove.pk).change_kinds,
             what="the agent to advertise native.workload")
    forged = _bundle(Ed25519PrivateKey.generate())  # signed, but not by the key this agent trusts
    _, generation = services.native_workload_apply(body={
        "slug": "forged", "bundle_digest": forged.digest, "grove": grove.slug,
        "command": [sys.executable, "server.py"], "env": {"PORT": str(free_port()), "COLOR": "red"}})
    generation = _state(generation, "failed")
    assert generation.reason == "bundle_signature_invalid", (generation.reason, generation.message)
    # The signature is checked before anything is extracted: the bundle's file never reached the disk.
    assert not any(path.name == "server.py" for path in state_dir.rglob("*")), agent.output()
