"""The nginx proxy manager against Debian's real nginx, started by the test on a high port with a
config, prefix and include directory the test owns. Needs the `nginx` package (skipped without it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import SERVER_PY, free_port

from forest_agent.errors import IngressRefused
from forest_agent.native.nginx import NginxCommand, NginxProxyManager, render_server_block
from forest_agent.wire.messages import Ingress

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
        subprocess.run(self.command.argv("-s", "quit"), capture_output=True, check=False)


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


def wait_for_http(url: str, expected: str, timeout: float = 10.0, host: str | None = None) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            last = httpx.get(url, headers={"Host": host} if host else {}, timeout=1.0).text
            if last == expected:
                return
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(0.05)
    raise AssertionError(f"{url} never answered {expected!r}; last: {last!r}")


def test_apply_routes_the_mesh_listener_to_the_workload(nginx: Nginx, backend: int) -> None:
    manager = NginxProxyManager(nginx.conf_dir, nginx.command)
    listen = free_port()
    path = manager.apply(
        "shop", Ingress(listen=f"127.0.0.1:{listen}", server_name="shop.example", port=backend)
    )
    assert path == nginx.conf_dir / "forest-shop.conf"
    wait_for_http(f"http://127.0.0.1:{listen}/", "blue ok", host="shop.example")


def test_failed_nginx_test_restores_the_previous_file(nginx: Nginx, backend: int) -> None:
    manager = NginxProxyManager(nginx.conf_dir, nginx.command)
    listen = free_port()
    manager.apply("shop", Ingress(listen=f"127.0.0.1:{listen}", server_name="shop.example", port=backend))
    wait_for_http(f"http://127.0.0.1:{listen}/", "blue ok", host="shop.example")
    before = manager.path_for("shop").read_text()
    (nginx.conf_dir / "zz-someone-elses.conf").write_text("this is not nginx syntax\n")
    with pytest.raises(IngressRefused) as caught:
        manager.apply("shop", Ingress(listen=f"127.0.0.1:{free_port()}", server_name="shop.example", port=1))
    assert caught.value.code == "ingress_config_rejected"
    assert "[emerg]" in caught.value.message
    assert manager.path_for("shop").read_text() == before
    wait_for_http(f"http://127.0.0.1:{listen}/", "blue ok", host="shop.example")


def test_failed_first_apply_leaves_no_file(nginx: Nginx) -> None:
    (nginx.conf_dir / "zz-broken.conf").write_text("nope\n")
    manager = NginxProxyManager(nginx.conf_dir, nginx.command)
    with pytest.raises(IngressRefused):
        manager.apply(
            "shop", Ingress(listen=f"127.0.0.1:{free_port()}", server_name="shop.example", port=8080)
        )
    assert not manager.path_for("shop").exists()


def test_remove_takes_the_route_away(nginx: Nginx, backend: int) -> None:
    manager = NginxProxyManager(nginx.conf_dir, nginx.command)
    listen = free_port()
    manager.apply("shop", Ingress(listen=f"127.0.0.1:{listen}", server_name="shop.example", port=backend))
    wait_for_http(f"http://127.0.0.1:{listen}/", "blue ok", host="shop.example")
    manager.remove("shop")
    assert not manager.path_for("shop").exists()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{listen}/", timeout=0.5)
        except httpx.ConnectError:
            return
        time.sleep(0.05)
    raise AssertionError("the listener is still up after remove")


@pytest.mark.parametrize(
    "ingress",
    [
        Ingress(listen="127.0.0.1:8081", server_name="x; include /etc/passwd", port=8080),
        Ingress(listen="127.0.0.1:8081 default_server; root /", server_name="ok.example", port=8080),
        Ingress(listen="evil.example:80", server_name="ok.example", port=8080),
        Ingress(listen="127.0.0.1:8081", server_name="ok.example}", port=8080),
        Ingress(listen="127.0.0.1:99999", server_name="ok.example", port=8080),
    ],
)
def test_injection_attempts_are_refused_before_rendering(ingress: Ingress) -> None:
    with pytest.raises(IngressRefused):
        render_server_block("shop", ingress)
