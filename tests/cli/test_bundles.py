"""``forest bundles``: what the CLI builds and signs is what ``forest-agent`` verifies — checked with the
agent's own ``TrustedKeys.verify`` and ``extract_tar`` (the two sides may not import each other, so this test
is where the shared format is held) — and uploads through Host's public upload API (a live server, real
PostgreSQL). Swapped keys are refused on both sides with a sentence naming which key does what; the agent
refuses at start (a real ``forest-agent`` process)."""
from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from forest_agent.errors import BundleRefused, ConfigError
from forest_agent.native.extract import ExtractLimits, extract_tar
from forest_agent.native.signing import TrustedKeys
from typer.testing import CliRunner

from apps.artifacts.models import Artifact
from forest_cli import bundles
from forest_cli.main import app
from tests.console import console_script
from tests.factories import api_token_for

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def keys(tmp_path):
    result = runner.invoke(app, ["bundles", "keygen", str(tmp_path / "release")])
    assert result.exit_code == 0, result.output
    private, public = tmp_path / "release.key", tmp_path / "release.pem"
    assert private.stat().st_mode & 0o077 == 0  # the signing key is private to its owner
    return private, public


@pytest.fixture
def source(tmp_path):
    root = tmp_path / "app"
    (root / "lib").mkdir(parents=True)
    (root / "server.py").write_text("print('hi')\n")
    (root / "run.sh").write_text("#!/bin/sh\nexec python3 server.py\n")
    (root / "run.sh").chmod(0o755)
    (root / "lib" / "data.txt").write_text("data\n")
    (root / "current").symlink_to("lib/data.txt")
    return root


def test_a_built_and_signed_bundle_verifies_and_extracts_with_the_agents_own_code(tmp_path, keys, source):
    private, public = keys
    built = runner.invoke(app, ["bundles", "build", str(source), "-o", str(tmp_path / "app.tar.gz")])
    assert built.exit_code == 0, built.output
    data = (tmp_path / "app.tar.gz").read_bytes()
    digest = built.stdout.strip().splitlines()[-1]
    assert digest == bundles.digest_of(data)
    signed = runner.invoke(app, ["bundles", "sign", str(tmp_path / "app.tar.gz"), "--key", str(private)])
    assert signed.exit_code == 0, signed.output
    signature = (tmp_path / "app.tar.gz.sig").read_text().strip()

    trusted = TrustedKeys.load(key_flags=[f"release={public}"])
    trusted.verify(key_id="release", digest=digest, signature_b64=signature)  # raises when the format drifts
    with pytest.raises(BundleRefused) as wrong:
        trusted.verify(key_id="release", digest=bundles.digest_of(data + b"x"), signature_b64=signature)
    assert wrong.value.code == "bundle_signature_invalid"

    dest = tmp_path / "extracted"
    dest.mkdir()
    with (tmp_path / "app.tar.gz").open("rb") as stream:
        extract_tar(stream, dest, ExtractLimits())
    assert (dest / "server.py").read_text() == "print('hi')\n"
    assert os.access(dest / "run.sh", os.X_OK) and not os.access(dest / "server.py", os.X_OK)
    assert (dest / "current").read_text() == "data\n"


def test_the_same_directory_always_builds_the_same_digest(source):
    first = bundles.build(source)
    os.utime(source / "server.py", (1, 1))
    (source / "lib" / "data.txt").chmod(0o600)  # only the executable bit is kept
    assert bundles.build(source) == first
    (source / "server.py").write_text("print('changed')\n")
    assert bundles.digest_of(bundles.build(source)) != bundles.digest_of(first)
    with tarfile.open(fileobj=__import__("io").BytesIO(first)) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["current", "lib", "lib/data.txt", "run.sh", "server.py"]
    assert {(m.uid, m.gid, m.mtime) for m in members} == {(0, 0, 0)}


def test_what_the_agent_would_refuse_is_refused_at_build(tmp_path, source):
    (source / "escape").symlink_to("../../etc/passwd")
    with pytest.raises(bundles.BundleError) as escaping:
        bundles.build(source)
    assert escaping.value.code == "bundle_path_escape"
    (source / "escape").unlink()
    os.mkfifo(source / "pipe")
    result = runner.invoke(app, ["bundles", "build", str(source)])
    assert result.exit_code == 1 and "bundle_special_file" in result.output
    assert runner.invoke(app, ["bundles", "build", str(tmp_path / "nope")]).exit_code == 1


def test_signing_with_the_public_key_is_refused_naming_both_roles(tmp_path, keys, source):
    _, public = keys
    result = runner.invoke(app, ["--host", "http://127.0.0.1:9", "--token", "x", "bundles", "publish", str(source),
                                 "--key", str(public), "--key-id", "release"])
    assert result.exit_code == 1
    assert "is a public key" in result.output and "private key" in result.output
    assert "key_is_public" in result.output
    (tmp_path / "b.tar.gz").write_bytes(bundles.build(source))
    signed = runner.invoke(app, ["bundles", "sign", str(tmp_path / "b.tar.gz"), "--key", str(public)])
    assert signed.exit_code == 1 and "key_is_public" in signed.output
    assert not (tmp_path / "b.tar.gz.sig").exists()


def test_the_agent_refuses_a_private_key_as_its_trusted_key_at_start(tmp_path, keys):
    private, public = keys
    with pytest.raises(ConfigError) as refused:
        TrustedKeys.load(key_flags=[f"release={private}"])
    assert "PRIVATE key" in str(refused.value) and "PUBLIC key" in str(refused.value)
    assert TrustedKeys.load(key_flags=[f"release={public}"])  # the public one is fine
    # The real agent process: it stops before enrolling state is even read, with that sentence.
    result = subprocess.run([console_script("forest-agent"), "run", "--state-dir", str(tmp_path / "state"),
                             "--enable-native-workloads", "--trusted-key", f"release={private}"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "is a PRIVATE key" in result.stderr + result.stdout, result.stderr


def test_keygen_never_overwrites_a_key(tmp_path, keys):
    private, _ = keys
    before = private.read_bytes()
    result = runner.invoke(app, ["bundles", "keygen", str(tmp_path / "release")])
    assert result.exit_code == 1 and "key_exists" in result.output
    assert private.read_bytes() == before


@pytest.mark.django_db(transaction=True)
def test_publish_and_upload_put_a_signed_bundle_into_hosts_artifacts(live_server, staff_user, tmp_path, keys,
                                                                    source):
    private, public = keys
    token = api_token_for(staff_user, "bundles")
    base = ["--host", live_server.url, "--token", token]
    published = runner.invoke(app, [*base, "bundles", "publish", str(source), "--key", str(private),
                                    "--key-id", "release"])
    assert published.exit_code == 0, published.output
    digest = published.stdout.strip().splitlines()[-1]
    artifact = Artifact.objects.get(digest=digest)
    assert artifact.signing_key_id == "release" and artifact.media_type == bundles.MEDIA_TYPE
    # What Host stored is what the agent will be told: it verifies with the public key.
    TrustedKeys.load(key_flags=[f"release={public}"]).verify(key_id="release", digest=artifact.digest,
                                                             signature_b64=artifact.signature)

    (source / "server.py").write_text("print('v2')\n")
    bundle = tmp_path / "v2.tar.gz"
    runner.invoke(app, ["bundles", "build", str(source), "-o", str(bundle)])
    unsigned = runner.invoke(app, [*base, "bundles", "upload", str(bundle), "--key-id", "release"])
    assert unsigned.exit_code == 1 and "bundle_unsigned" in unsigned.output
    runner.invoke(app, ["bundles", "sign", str(bundle), "--key", str(private)])
    uploaded = runner.invoke(app, [*base, "bundles", "upload", str(bundle), "--key-id", "release"])
    assert uploaded.exit_code == 0, uploaded.output
    stored = Artifact.objects.get(digest=bundles.digest_of(bundle.read_bytes()))
    assert base64.b64decode(stored.signature) and stored.signing_key_id == "release"
    refused = runner.invoke(app, [*base, "bundles", "upload", str(bundle), "--key-id", "release",
                                  "--signature", "x", "--team", "no-such-team"])
    assert refused.exit_code == 1  # Host's refusal, printed with its code


@pytest.fixture
def local_agent_script(tmp_path):
    """scripts/local-agent.sh (honcho's `agent` line) in a stand-in checkout whose `.venv/bin/python` is this
    interpreter (the script names its checkout's venv, as the Procfile does)."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    (checkout / ".venv" / "bin").mkdir(parents=True)
    script = checkout / "scripts" / "local-agent.sh"
    script.write_text((ROOT / "scripts" / "local-agent.sh").read_text())
    python = checkout / ".venv" / "bin" / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    return checkout, script


def test_make_runs_local_agent_stops_at_once_on_a_private_key(tmp_path, keys, local_agent_script):
    """A private key as FOREST_LOCAL_AGENT_TRUSTED_KEY stops the script before it waits for Host, enrolls or
    starts nginx (honcho then stops the stack), with the agent's own sentence."""
    private, _ = keys
    checkout, script = local_agent_script
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "FOREST_ENV_FILE": "",
           "FOREST_LOCAL_HOST_URL": "http://127.0.0.1:9"}
    result = subprocess.run(["bash", str(script)], env={**env, "FOREST_LOCAL_AGENT_TRUSTED_KEY": f"release={private}"},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 78, result.stderr
    assert "FOREST_LOCAL_AGENT_TRUSTED_KEY" in result.stderr and "is a PRIVATE key" in result.stderr
    assert sorted(p.name for p in checkout.iterdir()) == [".venv", "scripts"]  # nothing started, nothing enrolled


def test_the_local_agent_takes_hosts_port_from_the_settings_not_honchos_port(tmp_path, local_agent_script):
    """Under honcho every Procfile line gets its own $PORT; the agent's line must still find Host's web port
    (and its proxy port) in the settings `make run` wrote. Stopped once it has said where it goes (it would
    next wait for that Host)."""
    from apps.core import localenv

    checkout, script = local_agent_script
    settings_file = tmp_path / "forest.env"
    localenv.write(settings_file, environ={"PORT": "9100", "FOREST_LOCAL_PROXY_PORT": "9480"})
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "FOREST_ENV_FILE": str(settings_file),
           "PORT": "9600"}  # what honcho gives the sixth line for base port 9100
    proc = subprocess.Popen(["bash", str(script)], env=env, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stderr is not None
        said = proc.stderr.readline()  # the script's first line; a hang here ends in the test timeout
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert said.strip() == (f"local agent: Host http://127.0.0.1:9100, Grove {localenv.local_grove_name()}, "
                            "mesh proxy port 9480"), said
    assert not (checkout / "var").exists()
