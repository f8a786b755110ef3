"""Benchmark: a 1 GB upload through Host into the filesystem CAS (streamed, verified by digest) against
the floor ``openssl dgst -sha256 FILE && cp FILE DEST`` of the same file in the same run (OpenSSL is what
Forest hashes with, through ``hashlib``; coreutils ``sha256sum`` is slower and flattered the ratio).

Host runs as in production (uvicorn, ASGI) on PostgreSQL; the upload is ``curl -T`` (streaming, no
client-side buffering) to ``POST /api/forest/v1/artifacts/blobs?digest=...``. Prints throughput of both,
their ratio (aim: <= 1.5), and the Host process's peak RSS during the upload (constant memory: it must not
grow with the blob). Uses a scratch database of its own (bench/_common.py: ``--database-url``) and a
temporary directory for files and the CAS.

Run: .venv/bin/python bench/cas_upload.py [--size-mb 1024] [--rounds 3]     (tiny: --size-mb 1 --rounds 1)
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import _common as common  # noqa: E402

ENV = {"FOREST_CAS_BACKEND": "filesystem", "FOREST_MAX_BLOB_BYTES": str(8 * 1024**3)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_token() -> str:
    import django

    django.setup()
    from django.contrib.auth.models import Permission, User

    from apps.accounts.services import api_token_create

    user = User.objects.create(username="bench", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="artifacts"))
    return api_token_create(user=user, name="bench")[1]


def make_file(path: Path, size_mb: int) -> str:
    """Incompressible bytes (random blocks), and their digest."""
    hasher = hashlib.sha256()
    block = os.urandom(1 << 20)
    with path.open("wb") as out:
        for i in range(size_mb):
            chunk = block[i % 251:] + block[:i % 251]  # every MiB differs; cheap to make
            hasher.update(chunk)
            out.write(chunk)
    return f"sha256:{hasher.hexdigest()}"


class PeakRss:
    """Samples the RSS of a process and its children every 20 ms in a thread."""

    def __init__(self, pid: int):
        self.process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _rss(self) -> int:
        total = 0
        for proc in [self.process, *self.process.children(recursive=True)]:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                continue
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            self._stop.wait(0.02)

    def __enter__(self) -> PeakRss:
        self.peak = self._rss()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def floor_round(src: Path, work: Path) -> float:
    return common.hash_and_copy_floor(src, work / "floor-copy")


def host_round(src: Path, digest: str, url: str, token: str, cas: Path) -> float:
    started = time.perf_counter()
    result = subprocess.run(
        ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "-T", str(src), "-H", "Expect:",
         "-H", f"Authorization: Token {token}", "-H", "Content-Type: application/octet-stream",
         f"{url}/api/forest/v1/artifacts/blobs?digest={digest}"], check=True, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.stdout.strip() != "201":
        raise SystemExit(f"upload failed: HTTP {result.stdout.strip()} {result.stderr}")
    shutil.rmtree(cas / "sha256")  # the next round stores it afresh (same work each time)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    common.add_options(parser)
    args = parser.parse_args()
    for tool in ("curl", "cp"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is needed for this benchmark")

    work = Path(tempfile.mkdtemp(prefix="forest-bench-cas-", dir=os.environ.get("BENCH_TMP")))
    cas = work / "cas"
    web = None
    try:
        common.prepare(args, "cas", env={**ENV, "FOREST_CAS_ROOT": str(cas)})
        token = make_token()
        src = work / "blob.bin"
        digest = make_file(src, args.size_mb)
        port = free_port()
        log = open(work / "web.log", "wb")  # noqa: SIM115 - lives as long as the process
        web = subprocess.Popen([str(ROOT / ".venv/bin/uvicorn"), "forest_host.asgi:application", "--host",
                                "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"],
                               cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while subprocess.run(["curl", "-s", "-o", "/dev/null", f"{url}/healthz"]).returncode != 0:
            if time.monotonic() > deadline or web.poll() is not None:
                raise SystemExit(f"Host did not start: {(work / 'web.log').read_text()[-2000:]}")
            time.sleep(0.2)
        idle_rss = PeakRss(web.pid)._rss()
        floors, hosts, peaks = [], [], []
        for _ in range(args.rounds):
            floors.append(floor_round(src, work))
            with PeakRss(web.pid) as rss:
                hosts.append(host_round(src, digest, url, token, cas))
            peaks.append(rss.peak)
        mb = args.size_mb
        floor_s, host_s = statistics.median(floors), statistics.median(hosts)
        print(f"uptime: {common.uptime()}")
        print(f"CAS upload of {mb} MiB (filesystem backend, uvicorn, verified by digest), median of {args.rounds}")
        print(f"  floor  {common.hash_floor_name()} + cp: {floor_s:7.2f} s  {mb / floor_s:8.1f} MiB/s")
        print(f"  Host   POST blobs     : {host_s:7.2f} s  {mb / host_s:8.1f} MiB/s")
        print(f"  ratio Host/floor      : {host_s / floor_s:7.2f}  (aim <= 1.5)")
        print(f"  Host RSS idle {idle_rss / 2**20:.0f} MiB, peak during upload {max(peaks) / 2**20:.0f} MiB "
              f"(blob {mb} MiB)")
    finally:
        if web is not None and web.poll() is None:
            os.killpg(web.pid, signal.SIGTERM)
            web.wait(timeout=15)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
