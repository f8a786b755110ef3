"""Native ingress overhead: requests per second and p99 latency through both hops against the same
workload reached directly, measured in the same run.

    .venv/bin/python bench/ingress.py [--requests 5000] [--concurrency 8]     (tiny: --requests 200 --concurrency 2)

Three unprivileged nginx processes, each with a prefix of its own under a temporary directory (Debian's
nginx, non-daemon children): the *workload*, a trivial server block answering ``200 ok`` on 127.0.0.1; the
*agent's mesh proxy* on 127.0.0.42 (the simulated mesh address), rendered by ``forest_agent.nginx`` exactly
as the agent renders it (host name routing, mesh allow-list, 421 default); and *Host's edge* on 127.0.0.1,
rendered by the same module exactly as ``manage.py forest_edge`` renders it (TLS 1.2/1.3 with a certificate
from a CA made here, HSTS, X-Forwarded-*, upgrade map, proxy_bind from 127.0.0.41 on the mesh). The clients
are ``--concurrency`` processes started together, each with one httpx keep-alive connection (HTTP/1.1; TLS
verified against the CA, SNI = the public name): the floor (the workload directly, plain HTTP) and the same
count through edge + mesh proxy, in two alternating rounds. Prints each side's rps and p50/p99, and the
ratios (no target yet: the issue asks for the number). The clients share the machine with the three nginx:
on a small, busy machine the figures are noisy, so read several runs.
"""
from __future__ import annotations

import argparse
import multiprocessing
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "agent" / "src")]

from forest_agent.nginx import (  # noqa: E402
    EdgeRoute,
    EdgeSettings,
    MeshHop,
    NginxCommand,
    NginxConfigFiles,
    join_sections,
    render_edge_header,
    render_edge_route,
    render_mesh_default,
    render_mesh_server,
    write_atomic,
)

from apps.ingress.devtls import CertificateAuthority  # noqa: E402

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
HOSTNAME = "bench.apps.example.com"
EDGE_SOURCE, MESH_ADDRESS = "127.0.0.41", "127.0.0.42"


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


class Nginx:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf_dir = root / "conf.d"
        self.conf_dir.mkdir(parents=True)
        (root / "logs").mkdir()
        temp = "".join(f"    {k}_temp_path {root}/{k};\n" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        self.main = root / "nginx.conf"
        write_atomic(self.main, f"pid {root}/nginx.pid;\nerror_log {root}/logs/error.log;\nworker_processes 1;\n"
                                f"events {{ worker_connections 4096; }}\nhttp {{\n    access_log off;\n{temp}"
                                f"    keepalive_requests 100000;\n    include {self.conf_dir}/*.conf;\n}}\n")
        self.command = NginxCommand(NGINX, self.main, root)
        self.proc: subprocess.Popen | None = None

    def start(self) -> Nginx:
        self.proc = subprocess.Popen(self.command.argv("-g", "daemon off;"), stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not (self.root / "nginx.pid").exists():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"nginx under {self.root} did not start")
            time.sleep(0.02)
        return self

    def install(self, name: str, text: str) -> None:
        NginxConfigFiles(self.conf_dir, self.command).install(self.conf_dir / name, text, name)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def _worker(url: str, count: int, cafile: str | None, host: str | None, barrier, results) -> None:
    """One client process: a keep-alive connection (TLS verified against ``cafile``, SNI = ``host``), one
    warm-up request, the start barrier, then ``count`` timed GETs; puts (start, end, latencies in ms)."""
    verify = ssl.create_default_context(cafile=cafile) if cafile else False
    headers = {"Host": host} if host else {}
    extensions = {"sni_hostname": host} if host else {}
    latencies = []
    with httpx.Client(verify=verify, timeout=30) as client:
        client.request("GET", url, headers=headers, extensions=extensions)
        barrier.wait()
        started = time.perf_counter()
        for _ in range(count):
            begin = time.perf_counter()
            response = client.request("GET", url, headers=headers, extensions=extensions)
            latencies.append((time.perf_counter() - begin) * 1000)
            if response.status_code != 200 or response.text != "ok":
                raise SystemExit(f"{url}: {response.status_code} {response.text[:200]!r}")
        results.put((started, time.perf_counter(), latencies))


def load(url: str, *, requests: int, concurrency: int, cafile: str | None = None,
         host: str | None = None) -> tuple[float, list[float]]:
    """(requests per second, latencies in ms) for ``requests`` GETs from ``concurrency`` client processes
    that start together (processes, not asyncio tasks: one Python event loop is slower than nginx and would
    measure itself)."""
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(concurrency), context.Queue()
    share = max(1, requests // concurrency)
    workers = [context.Process(target=_worker, args=(url, share, cafile, host, barrier, results))
               for _ in range(concurrency)]
    for worker in workers:
        worker.start()
    done = [results.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join()
    wall = max(end for _, end, _ in done) - min(start for start, _, _ in done)
    latencies = [value for _, _, values in done for value in values]
    return len(latencies) / wall, latencies


def p(latencies: list[float], q: int) -> float:
    return statistics.quantiles(latencies, n=100)[q - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="forest-bench-ingress-") as tmp:
        tmp_path = Path(tmp)
        ca = CertificateAuthority(tmp_path / "tls")
        cert, key = tmp_path / "tls" / "bench.crt", tmp_path / "tls" / "bench.key"
        ca.issue(HOSTNAME, cert, key)
        app_port, proxy_port, https_port, http_port = (free_port(), free_port(MESH_ADDRESS), free_port(),
                                                       free_port())
        workload, hop, edge = (Nginx(tmp_path / name).start() for name in ("workload", "hop", "edge"))
        try:
            workload.install("app.conf", f"server {{\n    listen 127.0.0.1:{app_port};\n"
                                         "    location / {\n        return 200 ok;\n    }\n}\n")
            mesh = MeshHop(listen=f"{MESH_ADDRESS}:{proxy_port}", allow=(f"{EDGE_SOURCE}/32",))
            hop.install("forest-00-mesh-default.conf", render_mesh_default(mesh))
            hop.install("forest-bench.conf", render_mesh_server("bench", [HOSTNAME], "/", app_port, mesh))
            settings = EdgeSettings(http_listen=f"127.0.0.1:{http_port}", https_listen=f"127.0.0.1:{https_port}",
                                    https_port=https_port, proxy_bind=EDGE_SOURCE)
            route = EdgeRoute(hostname=HOSTNAME, path_prefix="/", upstream_address=MESH_ADDRESS,
                              upstream_port=proxy_port, certificate=str(cert), certificate_key=str(key))
            edge.install("forest-edge.conf", join_sections(render_edge_header(settings),
                                                           {HOSTNAME: render_edge_route(route, settings)}))
            time.sleep(0.5)  # the reloads' new workers take over (not part of any measurement)
            # Two alternating rounds, so a busy moment on the machine does not land on one side only.
            direct_rates, edge_rates, direct, through = [], [], [], []
            for _ in range(2):
                rate, latencies = load(f"http://127.0.0.1:{app_port}/", requests=args.requests // 2,
                                       concurrency=args.concurrency)
                direct_rates.append(rate)
                direct += latencies
                rate, latencies = load(f"https://127.0.0.1:{https_port}/", requests=args.requests // 2,
                                       concurrency=args.concurrency, cafile=str(ca.pem), host=HOSTNAME)
                edge_rates.append(rate)
                through += latencies
            direct_rps, edge_rps = statistics.mean(direct_rates), statistics.mean(edge_rates)
        finally:
            for server in (edge, hop, workload):
                server.stop()
    print(f"ingress bench: {args.requests} GETs from {args.concurrency} client processes")
    print(f"  floor   workload directly (HTTP)           {direct_rps:9.0f} rps  "
          f"p50 {p(direct, 50):7.2f} ms  p99 {p(direct, 99):7.2f} ms")
    print(f"  forest  edge (TLS) + mesh proxy + workload {edge_rps:9.0f} rps  "
          f"p50 {p(through, 50):7.2f} ms  p99 {p(through, 99):7.2f} ms")
    print(f"  ratio   rps {edge_rps / direct_rps:.2f}x of the floor, p99 {p(through, 99) / p(direct, 99):.2f}x "
          "the floor's")


if __name__ == "__main__":
    main()
