"""Benchmark: forest-agent bundle install vs the shell floor, plus the agent's idle cost.

1. Builds a ~200 MB tar.gz bundle (many small files + one large file) in a temp dir and serves it
   from a local HTTP server (a separate `python -m http.server` process).
2. Times the agent's install (streamed download with size limit + sha256 while streaming + Ed25519
   signature check + safe extraction) against the floor `curl URL | tee >(openssl dgst -sha256) | tar -xz`
   (or the download, then the hash, then `tar -xzf` when curl is absent) on the same file in the same run, and
   prints both and the median of the per-round ratios (aim: <= 1.3): floor and agent share each round's load.
   The floor hashes with OpenSSL, as the agent does through ``hashlib`` (``_common.hash_floor_argv``):
   coreutils ``sha256sum`` is slower and flattered the ratio.
3. Runs the real agent (`forest-agent run`, heartbeats every 5 s) against the agent tests' stub
   Host for 60 s and prints its RSS and CPU.

Run: .venv/bin/python bench/bundle_install.py [--quick]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import psutil
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from forest_agent.native.bundles import BundleInstaller, BundleLimits
from forest_agent.native.signing import TrustedKeys
from forest_agent.wire.messages import BundleRef

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "agent" / "tests"))
from stub_host import StubHost  # noqa: E402  (the wire stand-in the agent tests use)

sys.path.insert(0, str(ROOT))
from bench import _common as common  # noqa: E402


def log(message: str) -> None:
    print(message, flush=True)


def build_bundle(workdir: Path, total_mb: int) -> Path:
    """Many small files (~20% of the bytes) and one large file, as `tar -czf` (gzip level 6) packs them."""
    src = workdir / "src"
    small_dir = src / "lib"
    small_dir.mkdir(parents=True)
    small_total = total_mb * 1024 * 1024 // 5
    count = small_total // 4096
    seed = os.urandom(2048)
    for i in range(count):
        # Half random, half repetitive: roughly what source and assets compress like.
        (small_dir / f"f{i:05d}.dat").write_bytes(
            seed[(i * 7) % 1024 :][:1024] + os.urandom(1024) + b"x" * 2048
        )
    with open(src / "model.bin", "wb") as big:
        for _ in range(total_mb - small_total // (1024 * 1024)):
            big.write(os.urandom(512 * 1024) + bytes(512 * 1024))
    archive = workdir / "bundle.tar.gz"
    if shutil.which("tar"):
        # What a release pipeline would run; GNU format (no per-file PAX headers).
        subprocess.run(["tar", "-czf", str(archive), "-C", str(src), "."], check=True)
    else:
        with tarfile.open(archive, "w:gz", compresslevel=6) as tar:
            tar.add(src, arcname=".")
    shutil.rmtree(src)
    log(f"bundle: {count + 1} files, {total_mb} MB content, {archive.stat().st_size / 1e6:.1f} MB compressed")
    return archive


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "http.server",
            str(port),
            "--bind",
            "127.0.0.1",
            "--directory",
            str(directory),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port}/bundle.tar.gz"


def floor_once(url: str, dest: Path) -> float:
    dest.mkdir()
    started = time.perf_counter()
    hash_stdin = shlex.join(common.hash_floor_argv())
    if shutil.which("curl"):
        cmd = f"set -o pipefail; curl -sf '{url}' | tee >({hash_stdin} > '{dest}.sha') | tar -xzf - -C '{dest}'"
    else:
        # No curl: download with the stdlib, then the separate hash + tar -x floor.
        fetch = (
            "import shutil, urllib.request; "
            f"shutil.copyfileobj(urllib.request.urlopen('{url}'), open('{dest}.tgz', 'wb'))"
        )
        hash_file = shlex.join(common.hash_floor_argv(Path(f"{dest}.tgz")))
        cmd = f'{sys.executable} -c "{fetch}" && {hash_file} > /dev/null && tar -xzf {dest}.tgz -C {dest}'

    subprocess.run(["bash", "-c", cmd], check=True)
    return time.perf_counter() - started


def agent_once(installer: BundleInstaller, ref: BundleRef, dest: Path) -> float:
    dest.mkdir(mode=0o700)
    started = time.perf_counter()
    installer.install(ref, dest)
    return time.perf_counter() - started


def bench_install(size_mb: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="forest-bench-") as tmp:
        work = Path(tmp)
        archive = build_bundle(work, size_mb)
        data_digest = hashlib.sha256()
        with open(archive, "rb") as handle:
            while chunk := handle.read(1 << 20):
                data_digest.update(chunk)
        digest = "sha256:" + data_digest.hexdigest()
        key = Ed25519PrivateKey.generate()
        import base64

        ref = BundleRef(
            url="",
            digest=digest,
            size=archive.stat().st_size,
            signature=base64.b64encode(key.sign(digest.encode())).decode(),
            key_id="bench",
        )
        installer = BundleInstaller(
            keys=TrustedKeys({"bench": key.public_key()}),
            limits=BundleLimits(max_download_bytes=4 * 1024**3),
            platform="linux",
        )
        server, url = serve(work)
        ref = BundleRef(url=url, digest=ref.digest, size=ref.size, signature=ref.signature, key_id=ref.key_id)
        floors, agents = [], []
        try:
            for i in range(rounds):
                floors.append(floor_once(url, work / f"floor{i}"))
                shutil.rmtree(work / f"floor{i}")
                agents.append(agent_once(installer, ref, work / f"agent{i}"))
                shutil.rmtree(work / f"agent{i}")
                log(f"round {i + 1}/{rounds}: floor {floors[-1]:.2f}s  agent {agents[-1]:.2f}s")
        finally:
            server.terminate()
            server.wait()
        # Floor and agent run back to back in each round, so they see the same load on this shared box:
        # the honest figure is the median of the per-round ratios, not best-of floor over best-of agent
        # picked from different rounds.
        ratios = [agent / floor for floor, agent in zip(floors, agents, strict=True)]
        log(
            f"install {size_mb} MB bundle over {rounds} rounds: floor median {statistics.median(floors):.2f}s, "
            f"agent median {statistics.median(agents):.2f}s, per-round ratios "
            f"{', '.join(f'{r:.2f}' for r in ratios)}; median ratio {statistics.median(ratios):.2f} (aim <= 1.3)"
        )


def bench_idle(seconds: int) -> None:
    host = StubHost().start()
    with tempfile.TemporaryDirectory(prefix="forest-idle-") as tmp:
        state = Path(tmp) / "state"
        agent_cmd = [sys.executable, "-m", "forest_agent"]
        subprocess.run(
            [*agent_cmd, "enroll", "--state-dir", str(state), "--host", host.url, "--token", "good-token"],
            check=True,
            capture_output=True,
        )
        proc = subprocess.Popen(
            [
                *agent_cmd,
                "run",
                "--state-dir",
                str(state),
                "--heartbeat-interval",
                "5",
                "--enable-native-jobs",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            host.wait_for(lambda: host.heartbeats, timeout=15, what="first heartbeat")
            time.sleep(2)  # past start-up imports and the first inventory
            ps = psutil.Process(proc.pid)
            before, beats = ps.cpu_times(), len(host.heartbeats)
            started = time.monotonic()
            rss_samples = []
            while time.monotonic() - started < seconds:
                time.sleep(min(5, seconds))
                rss_samples.append(ps.memory_info().rss)
            after, elapsed = ps.cpu_times(), time.monotonic() - started
            cpu = (after.user + after.system) - (before.user + before.system)
            log(
                f"idle agent over {elapsed:.0f}s: {len(host.heartbeats) - beats} heartbeats, "
                f"RSS {max(rss_samples) / 2**20:.1f} MiB (max), CPU {cpu:.2f}s = {100 * cpu / elapsed:.2f}% of one core"
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)
            host.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 MB bundle, 1 round, 10 s idle (smoke run)")
    parser.add_argument("--size-mb", type=int, help="bundle content size (default 200)")
    parser.add_argument("--rounds", type=int, help="install rounds (default 5)")
    parser.add_argument("--idle-seconds", type=int, help="idle measurement length (default 60)")
    args = parser.parse_args()
    size = args.size_mb or (20 if args.quick else 200)
    rounds = args.rounds or (1 if args.quick else 5)
    idle = args.idle_seconds or (10 if args.quick else 60)
    bench_install(size, rounds)
    bench_idle(idle)


if __name__ == "__main__":
    main()
