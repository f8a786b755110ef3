"""The agent's mesh hop against Debian's real nginx, started by the test (unprivileged, its own prefix) on
a high port of a loopback address standing in for the mesh address. Needs the `nginx` package."""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import SERVER_PY, free_port

from forest_agent.errors import IngressRefused
from forest_agent.native.nginx import MeshHop, NginxCommand, NginxProxyManager, render_server_block
from forest_agent.wire.messages import Ingress

MESH = "127.0.0.33"  # this Grove's "mesh address": a loopback address of its own

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
pytestmark = pytest.mark.skipif(NGINX is None, reason="Debian package `nginx` is not installed")


class Nginx:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf_dir = root / "conf.d"
        self.conf_dir.mkdir(parents=True)
        (root / "logs").mkdir()
        temp = "\n".join(
            f"    {kind}_temp_path {root}/{kind};"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        self.main = root / "nginx.conf"
        self.main.write_text(f"""
pid {root}/nginx.pid;
error_log {root}/logs/error.log;
worker_processes 1;
events {{ worker_connections 64; }}
http {{
    access_log off;
{temp}
    include {self.conf_dir}/*.conf;
}}
""")
        self.command = NginxCommand(binary=NGINX or "nginx", main_config=self.main, prefix=root)

    def start(self) -> None:
        subprocess.run(self.command.argv(), check=True, capture_output=True)

    def stop(self) -> None:
        """By the master's pid, not ``nginx -s quit``: that parses the configuration first, and several tests
        leave a broken file behind on purpose (the signal was never sent and nginx outlived the test)."""
        pid_file = self.root / "nginx.pid"
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGQUIT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[Nginx]:
    server = Nginx(tmp_path / "nginx")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[int]:
    port = free_port()
    script = tmp_path / "server.py"
    script.write_bytes(SERVER_PY)
    proc = subprocess.Popen([sys.executable, str(script), "blue", str(port)], stdout=subprocess.DEVNULL)
    wait_for_http(f"http://127.0.0.1:{port}/", "blue ok")
    yield port
    proc.kill()
    proc.wait()


def get(url: str, host: str | None = None, source: str | None = None) -> httpx.Response:
    transport = httpx.HTTPTransport(local_address=source) if source else None
    with httpx.Client(transport=transport, timeout=1.0) as client:
        return client.get(url, headers={"Host": host} if host else {})


def wait_for_status(url: str, status: int, *, host: str | None = None, source: str | None = None,
                    timeout: float = 10.0) -> None:
    """Until ``url`` answers ``status``: right after a reload the old worker may still take a connection with
    the previous configuration, so what the new one answers is waited for, never asserted at once."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = get(url, host, source).status_code
        if last == status:
            return
        time.sleep(0.05)
    raise AssertionError(f"{url} never answered {status}; last: {last}")


def wait_for_http(url: str, expected: str, timeout: float = 10.0, host: str | None = None) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            last = get(url, host).text
            if last == expected:
                return
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(0.05)
    raise AssertionError(f"{url} never answered {expected!r}; last: {last!r}")


def hop(port: int, allow: tuple[str, ...] = ("127.0.0.0/8",)) -> MeshHop:
    return MeshHop(listen=f"{MESH}:{port}", allow=allow)


def shop(port: int, prefix: str = "/") -> Ingress:
    return Ingress(hostnames=("shop.example.com", "www.shop.example.com"), port=port, path_prefix=prefix)


def test_apply_routes_the_mesh_listener_to_the_workload_by_host_name(nginx: Nginx, backend: int) -> None:
    listen = free_port()
    manager = NginxProxyManager(nginx.conf_dir, nginx.command, hop=hop(listen))
    path = manager.apply("shop", shop(backend))
    assert path == nginx.conf_dir / "forest-shop.conf"
    wait_for_http(f"http://{MESH}:{listen}/", "blue ok", host="shop.example.com")
    # Waited for too, not asserted at once: during a reload the old worker may still take a new connection.
    wait_for_http(f"http://{MESH}:{listen}/", "blue ok", host="www.shop.example.com")
    # Any other host is misdirected, never sent to a workload.
    assert get(f"http://{MESH}:{listen}/", host="other.example.com").status_code == 421
    assert get(f"http://{MESH}:{listen}/").status_code == 421


def test_only_the_mesh_range_and_the_edge_are_accepted(nginx: Nginx, backend: int) -> None:
    listen = free_port()
    manager = NginxProxyManager(nginx.conf_dir, nginx.command, hop=hop(listen, allow=("127.0.0.34/32",)))
    manager.apply("shop", shop(backend))
    deadline = time.monotonic() + 10
    while get(f"http://{MESH}:{listen}/", host="shop.example.com", source="127.0.0.34").text != "blue ok":
        assert time.monotonic() < deadline, "the allowed source never got through"
        time.sleep(0.05)
    wait_for_status(f"http://{MESH}:{listen}/", 403, host="shop.example.com", source="127.0.0.35")


def test_a_source_outside_the_mesh_is_refused_whatever_host_it_names(nginx: Nginx, backend: int) -> None:
    """The catch-all answers only the mesh range too: an outsider learns nothing (403), not that the name is
    unknown here (421), and an insider asking for an unknown name still gets 421."""
    listen = free_port()
    manager = NginxProxyManager(nginx.conf_dir, nginx.command, hop=hop(listen, allow=("127.0.0.34/32",)))
    manager.apply("shop", shop(backend))
    wait_for_status(f"http://{MESH}:{listen}/", 421, host="other.example.com", source="127.0.0.34")
    wait_for_status(f"http://{MESH}:{listen}/", 403, host="other.example.com", source="127.0.0.35")
    assert get(f"http://{MESH}:{listen}/", source="127.0.0.35").status_code == 403


def test_a_path_prefix_limits_what_is_sent(nginx: Nginx, backend: int) -> None:
    listen = free_port()
    manager = NginxProxyManager(nginx.conf_dir, nginx.command, hop=hop(listen))
    manager.apply("shop", shop(backend, prefix="/api/"))
    wait_for_http(f"http://{MESH}:{listen}/api/items", "blue ok", host="shop.example.com")
    wait_for_status(f"http://{MESH}:{listen}/other", 404, host="shop.example.com")


def test_failed_nginx_test_restores_the_previous_file(nginx: Nginx, backend: int) -> None:
    listen = free_port()
    manager = NginxProxyManager(nginx.conf_dir, nginx.command, hop=hop(listen))
    manager.apply("shop", shop(backend))
    wait_for_http(f"http://{MESH}:{listen}/", "blue ok", host="shop.example.com")
    before = manager.path_for("shop").read_text()
    (nginx.conf_dir / "zz-someone-elses.conf").write_text("this is not nginx syntax\n")
    with pytest.raises(IngressRefused) as caught:
        manager.apply("shop", shop(1))
    assert caught.value.code == "ingress_config_rejected"
    assert "[emerg]" in caught.value.message
    assert manager.path_for("shop").read_text() == before
    wait_for_http(f"http://{MESH}:{listen}/", "blue ok", host="shop.example.com")


def test_failed_first_apply_leaves_no_file(nginx: Nginx) -> None:
    (nginx.conf_dir / "zz-broken.conf").write_text("nope\n")
    manager = NginxProxyManager(nginx.conf_dir, nginx.command, hop=hop(free_port()))
    with pytest.raises(IngressRefused):
        manager.apply("shop", shop(8080))
    assert not manager.path_for("shop").exists()


def test_without_a_mesh_proxy_ingress_is_unavailable(nginx: Nginx) -> None:
    manager = NginxProxyManager(nginx.conf_dir, nginx.command)
    with pytest.raises(IngressRefused) as caught:
        manager.apply("shop", shop(8080))
    assert caught.value.code == "ingress_unavailable"


def test_remove_takes_the_route_away(nginx: Nginx, backend: int) -> None:
    listen = free_port()
    manager = NginxProxyManager(nginx.conf_dir, nginx.command, hop=hop(listen))
    manager.apply("shop", shop(backend))
    wait_for_http(f"http://{MESH}:{listen}/", "blue ok", host="shop.example.com")
    manager.remove("shop")
    assert not manager.path_for("shop").exists()
    deadline = time.monotonic() + 10
    while get(f"http://{MESH}:{listen}/", host="shop.example.com").status_code != 421:
        assert time.monotonic() < deadline, "the host is still routed after remove"
        time.sleep(0.05)


@pytest.mark.parametrize(
    "ingress",
    [
        Ingress(hostnames=("x; include /etc/passwd",), port=8080),
        Ingress(hostnames=("ok.example}",), port=8080),
        Ingress(hostnames=(), port=8080),
        Ingress(hostnames=("ok.example",), port=99999),
        Ingress(hostnames=("ok.example",), port=8080, path_prefix="/a; return 200 /"),
        Ingress(hostnames=("ok.example",), port=8080, path_prefix="noslash"),
    ],
)
def test_injection_attempts_are_refused_before_rendering(ingress: Ingress) -> None:
    with pytest.raises(IngressRefused):
        render_server_block("shop", ingress, hop(8081))


@pytest.mark.parametrize(
    ("listen", "allow"),
    [
        ("127.0.0.1:8081 default_server; root /", ("127.0.0.0/8",)),
        ("evil.example:80", ("127.0.0.0/8",)),
        ("127.0.0.1:99999", ("127.0.0.0/8",)),
        ("127.0.0.1:8081", ()),
        ("127.0.0.1:8081", ("all; allow 0.0.0.0/0",)),
    ],
)
def test_a_hostile_hop_is_refused(listen: str, allow: tuple[str, ...]) -> None:
    with pytest.raises(IngressRefused):
        MeshHop(listen=listen, allow=allow)


class _Upgrading(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        assert self.headers.get("Upgrade") == "websocket", dict(self.headers)
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.end_headers()
        self.wfile.flush()
        self.connection.sendall(self.connection.recv(64))
        self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


def test_websocket_upgrades_pass_the_mesh_hop(nginx: Nginx) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Upgrading)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    listen = free_port()
    manager = NginxProxyManager(nginx.conf_dir, nginx.command, hop=hop(listen))
    manager.apply("chat", Ingress(hostnames=("chat.example.com",), port=server.server_address[1]))
    deadline = time.monotonic() + 10
    while True:
        with socket.create_connection((MESH, listen), timeout=5) as conn:
            conn.sendall(b"GET /ws HTTP/1.1\r\nHost: chat.example.com\r\nUpgrade: websocket\r\n"
                         b"Connection: Upgrade\r\n\r\n")
            head = conn.recv(1024)
            if head.startswith(b"HTTP/1.1 101"):
                conn.sendall(b"hello over the mesh")
                assert conn.recv(64) == b"hello over the mesh"
                break
        assert time.monotonic() < deadline, head
        time.sleep(0.05)
    server.shutdown()
