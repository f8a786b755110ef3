"""Benchmark: step data through the real agent and Host — a 512 MiB input delivered to a native step and a
512 MiB output uploaded from it — against the floor ``openssl dgst -sha256 FILE && cp FILE DEST`` of the same bytes
in the same run (OpenSSL is what Forest hashes with, through ``hashlib``; coreutils ``sha256sum`` is slower
and flattered the ratio).

Host runs as in production (uvicorn, ASGI) on PostgreSQL with a Celery worker and the runner pool on
Redis; the real ``forest-agent`` enrolls and runs native jobs. Each round submits one compute job through
the HTTP API whose step takes the input by digest (``in/data.bin``) and declares that same file as its
output: the agent streams the input from Host's store (bounded, digest-verified, into the job's
directory), runs ``true``, then streams the file back as the output (hashed while it streams; Host stages
and verifies it). The agent's own log lines time each transfer, so dispatch and polling are not counted.
Prints both ratios (aim <= 1.3) and the peak RSS of the agent and of Host during the transfers against
the file size (constant memory: neither grows with the file).

Run: .venv/bin/python bench/data_path.py [--size-mb 512] [--rounds 3]     (tiny: --size-mb 8 --rounds 1)
Database and broker: bench/_common.py (``--database-url``, ``--broker-url``; a scratch database, own keys).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "agent" / "src"))
from bench import _common as common  # noqa: E402
from bench.cas_upload import PeakRss, free_port, make_file  # noqa: E402

ENV = {"FOREST_CAS_BACKEND": "filesystem", "FOREST_MAX_BLOB_BYTES": str(8 * 1024**3),
       "PYTHONPATH": f"{ROOT}:{ROOT / 'agent' / 'src'}"}
FETCHED = re.compile(r"input data: (\d+) bytes to \S+ in ([0-9.]+)s, digest verified")
UPLOADED = re.compile(r"output out: (\d+) bytes uploaded as \S+ in ([0-9.]+)s")


def prepare(args: argparse.Namespace, work: Path) -> tuple[str, str]:
    """A scratch database, the compute flag on, a staff admin's API token and an enrollment token."""
    common.prepare(args, "data", env={**ENV, "FOREST_CAS_ROOT": str(work / "cas")})
    import django

    django.setup()
    from django.contrib.auth.models import User

    from apps.accounts.services import api_token_create
    from apps.flags.services import flag_override_set
    from apps.groves.services import enrollment_token_create

    flag_override_set(name="host.deploy.forest_compute_jobs", enabled=True, reason="bench")
    user = User.objects.create_superuser(username="bench", password=None)
    _, enrollment = enrollment_token_create(roles=["compute"], substrate="native")
    return api_token_create(user=user, name="bench")[1], enrollment


def api(url: str, token: str, method: str, path: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(f"{url}/api/forest/v1/{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": f"Token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def floor_round(src: Path, work: Path) -> float:
    return common.hash_and_copy_floor(src, work / "floor-copy")


def start(work: Path, name: str, argv: list[str]) -> subprocess.Popen:
    log = open(work / f"{name}.log", "ab")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def wait_for(predicate, what: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    common.add_options(parser)
    args = parser.parse_args()
    for tool in ("curl", "cp"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is needed for this benchmark")
    work = Path(tempfile.mkdtemp(prefix="forest-bench-data-", dir=os.environ.get("BENCH_TMP")))
    procs: list[subprocess.Popen] = []
    try:
        token, enrollment = prepare(args, work)
        src = work / "data.bin"
        digest = make_file(src, args.size_mb)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        web = start(work, "web", [str(ROOT / ".venv/bin/uvicorn"), "forest_host.asgi:application", "--host",
                                  "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"])
        procs.append(web)
        procs.append(start(work, "worker", [str(ROOT / ".venv/bin/celery"), "-A", "forest_host", "worker", "-c", "2",
                                            "--loglevel", "WARNING", "--without-gossip", "--without-mingle"]))
        procs.append(start(work, "runner", [sys.executable, "manage.py", "pipeline_runner", "--loglevel", "WARNING"]))
        wait_for(lambda: subprocess.run(["curl", "-s", "-o", "/dev/null", f"{url}/healthz"]).returncode == 0,
                 "Host to start")
        upload = subprocess.run(
            ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "-T", str(src), "-H", "Expect:",
             "-H", f"Authorization: Token {token}", f"{url}/api/forest/v1/artifacts/blobs?digest={digest}"],
            check=True, capture_output=True, text=True)
        if upload.stdout.strip() != "201":
            raise SystemExit(f"input upload failed: HTTP {upload.stdout} {upload.stderr}")
        state = work / "agent"
        agent_bin = str(ROOT / ".venv/bin/forest-agent")
        subprocess.run([agent_bin, "enroll", "--host", url, "--token", enrollment, "--name", "bench-box",
                        "--state-dir", str(state)], check=True, capture_output=True)
        agent = start(work, "agent", [agent_bin, "run", "--state-dir", str(state), "--enable-native-jobs",
                                      "--heartbeat-interval", "1", "--poll-wait", "2"])
        procs.append(agent)
        from apps.groves.models import Grove

        grove = wait_for(lambda: Grove.objects.filter(name="bench-box", change_kinds__contains=["native.job"]).first(),
                         "the agent's first heartbeat")
        floors, fetches, uploads, agent_peaks, web_peaks = [], [], [], [], []
        for round_no in range(args.rounds):
            floors.append(floor_round(src, work))
            log_mark = (work / "agent.log").stat().st_size
            body = {"name": f"bench-{round_no}", "grove": grove.slug, "steps": [{
                "name": "move", "kind": "native", "command": ["true"], "timeout_s": 3600,
                "inputs": [{"digest": digest, "path": "in/data.bin", "name": "data"}],
                "outputs": [{"name": "out", "path": "in/data.bin"}]}]}
            with PeakRss(agent.pid) as agent_rss, PeakRss(web.pid) as web_rss:
                job = api(url, token, "POST", "compute/jobs", body)
                job = wait_for(lambda j=job: (lambda v: v if v["status"] in ("succeeded", "failed", "cancelled")
                                              else None)(api(url, token, "GET", f"compute/jobs/{j['id']}")),
                               "the job to end", timeout=3600)
            if job["status"] != "succeeded":
                raise SystemExit(f"job {job['status']}: {job['steps'][0]} {(work / 'agent.log').read_text()[-2000:]}")
            text = (work / "agent.log").read_text(errors="replace")[log_mark:]
            fetched, uploaded = FETCHED.search(text), UPLOADED.search(text)
            if not (fetched and uploaded):
                raise SystemExit(f"no transfer timings in the agent log:\n{text[-2000:]}")
            fetches.append(float(fetched.group(2)))
            uploads.append(float(uploaded.group(2)))
            agent_peaks.append(agent_rss.peak)
            web_peaks.append(web_rss.peak)
        mb = args.size_mb
        floor_s, fetch_s, upload_s = statistics.median(floors), statistics.median(fetches), statistics.median(uploads)
        print(f"uptime: {common.uptime()}")
        print(f"Step data, {mb} MiB each way, native agent + Host (uvicorn, filesystem CAS), median of {args.rounds}")
        print(f"  floor  {common.hash_floor_name()} + cp: {floor_s:7.2f} s  {mb / floor_s:8.1f} MiB/s")
        print(f"  input  Host -> agent (fetch): {fetch_s:7.2f} s  {mb / fetch_s:8.1f} MiB/s   "
              f"ratio {fetch_s / floor_s:5.2f}  (aim <= 1.3)")
        print(f"  output agent -> Host (upload): {upload_s:6.2f} s  {mb / upload_s:8.1f} MiB/s   "
              f"ratio {upload_s / floor_s:5.2f}  (aim <= 1.3)")
        print(f"  peak RSS during the job: agent {max(agent_peaks) / 2**20:.0f} MiB, "
              f"Host {max(web_peaks) / 2**20:.0f} MiB (file {mb} MiB)")
    finally:
        for proc in reversed(procs):
            common.stop_group(proc)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
