"""The edge against Debian's real nginx (unprivileged, non-daemon, its own prefix) with certificates from a
test CA: one broken route never holds back the others, a changed route whose new form nginx refuses keeps
serving its previous form, the flag off renders nothing, and ``manage.py forest_edge --once`` reports it.

The upstream is a loopback "mesh" address with a plain HTTP server standing in for the agent's proxy
(tests/e2e/test_native_ingress.py runs the real agent and its nginx)."""
from __future__ import annotations

import http.server
import socket
import ssl
import threading

import httpx
import pytest
from django.core.management import CommandError, call_command

from apps.flags.services import flag_override_set
from apps.ingress import services
from apps.ingress.devtls import CertificateAuthority
from apps.ingress.models import IngressRoute
from tests.e2e.test_native_workload import free_port
from tests.ingress.conftest import FLAG
from tests.ingress.nginx import NginxProcess
from tests.pipelines.conftest import wait_for

pytestmark = pytest.mark.django_db
MESH = "127.0.0.34"


class _Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if (self.headers.get("Upgrade") == "websocket"
                and "upgrade" in self.headers.get("Connection", "").lower()):
            # The upgrade reached us: switch, then echo raw bytes both ways (a tunnel, as a WebSocket is).
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.end_headers()
            self.wfile.flush()
            self.connection.sendall(self.connection.recv(64))
            self.close_connection = True
            return
        body = f"{self.headers['Host']} {self.headers['X-Forwarded-Proto']}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def edge(settings, tmp_path):
    ca = CertificateAuthority(tmp_path / "tls")
    for name in ("shop.apps.example.com", "blog.apps.example.com"):
        ca.issue(name, tmp_path / "tls" / f"{name}.crt", tmp_path / "tls" / f"{name}.key")
    proxy = http.server.ThreadingHTTPServer((MESH, 0), _Proxy)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    https = free_port()
    settings.FOREST_MESH_NETWORKS = ["127.0.0.32/28"]
    settings.FOREST_EDGE_CERT_PATH = str(tmp_path / "tls" / "{hostname}.crt")
    settings.FOREST_EDGE_KEY_PATH = str(tmp_path / "tls" / "{hostname}.key")
    settings.FOREST_EDGE_HTTPS_LISTEN, settings.FOREST_EDGE_HTTPS_PORT = f"127.0.0.1:{https}", https
    settings.FOREST_EDGE_HTTP_LISTEN = f"127.0.0.1:{free_port()}"
    nginx = NginxProcess(tmp_path / "edge").start()
    settings.FOREST_EDGE_CONF_DIR = nginx.conf_dir
    settings.FOREST_EDGE_NGINX_CONFIG, settings.FOREST_EDGE_NGINX_PREFIX = str(nginx.main), str(nginx.root)
    yield {"nginx": nginx, "ca": str(ca.pem), "https": https, "tls": tmp_path / "tls",
           "proxy_port": proxy.server_address[1]}
    nginx.stop()
    proxy.shutdown()


def _get(env, hostname: str) -> str | None:
    # To 127.0.0.1 with the public name as SNI and Host (curl's --resolve), verified against the test CA.
    try:
        with httpx.Client(verify=ssl.create_default_context(cafile=env["ca"]), timeout=5) as client:
            response = client.request("GET", f"https://127.0.0.1:{env['https']}/", headers={"Host": hostname},
                                      extensions={"sni_hostname": hostname})
    except httpx.HTTPError:
        return None
    return response.text if response.status_code == 200 else None


def _tls(env, hostname: str):
    raw = socket.create_connection(("127.0.0.1", env["https"]), timeout=10)
    return ssl.create_default_context(cafile=env["ca"]).wrap_socket(raw, server_hostname=hostname)


def test_websockets_upgrade_and_the_body_limit_holds(edge, mesh_grove, live_workload, ingress_on, settings):
    settings.FOREST_EDGE_MAX_BODY = "1k"
    grove = _grove(mesh_grove, edge)
    live_workload("shop", grove, ["shop.apps.example.com"])
    services.edge_pass()
    wait_for(lambda: _get(edge, "shop.apps.example.com"), what="shop via the edge")
    with _tls(edge, "shop.apps.example.com") as conn:
        conn.sendall(b"GET /socket HTTP/1.1\r\nHost: shop.apps.example.com\r\nUpgrade: websocket\r\n"
                     b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                     b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            head += conn.recv(1024)
        assert head.startswith(b"HTTP/1.1 101"), head
        conn.sendall(b"ping through both directions")
        assert conn.recv(64) == b"ping through both directions"
    with httpx.Client(verify=ssl.create_default_context(cafile=edge["ca"]), timeout=5) as client:
        too_big = client.request("POST", f"https://127.0.0.1:{edge['https']}/", content=b"x" * 4096,
                                 headers={"Host": "shop.apps.example.com"},
                                 extensions={"sni_hostname": "shop.apps.example.com"})
    assert too_big.status_code == 413


def _grove(mesh_grove, env):
    from apps.groves.models import Grove

    grove = mesh_grove(address=MESH)
    Grove.objects.filter(pk=grove.pk).update(mesh_proxy_port=env["proxy_port"])
    return grove


def test_one_broken_route_never_holds_back_the_others(edge, mesh_grove, live_workload, ingress_on):
    grove = _grove(mesh_grove, edge)
    live_workload("shop", grove, ["shop.apps.example.com"])
    assert services.edge_pass().serving == ["shop.apps.example.com"]
    wait_for(lambda: _get(edge, "shop.apps.example.com") == "shop.apps.example.com https", what="shop via the edge")
    (edge["tls"] / "blog.apps.example.com.crt").unlink()
    live_workload("blog", grove, ["blog.apps.example.com", "news.apps.example.com"])
    result = services.edge_pass()
    # news has no certificate either: both of blog's names fail on their own, shop keeps serving.
    assert result.serving == ["shop.apps.example.com"]
    assert sorted(result.failed) == ["blog.apps.example.com", "news.apps.example.com"]
    states = dict(IngressRoute.objects.values_list("hostname", "state"))
    assert states == {"shop.apps.example.com": "serving", "blog.apps.example.com": "failed",
                      "news.apps.example.com": "failed"}
    assert "cannot load certificate" in IngressRoute.objects.get(hostname="news.apps.example.com").last_error
    assert _get(edge, "shop.apps.example.com") == "shop.apps.example.com https"
    conf = (edge["nginx"].conf_dir / services.EDGE_FILE).read_text()
    assert "blog.apps.example.com" not in conf


def test_a_changed_route_that_nginx_refuses_keeps_its_previous_form(edge, mesh_grove, live_workload, ingress_on,
                                                                    settings):
    grove = _grove(mesh_grove, edge)
    live_workload("shop", grove, ["shop.apps.example.com"])
    services.edge_pass()
    before = (edge["nginx"].conf_dir / services.EDGE_FILE).read_text()
    settings.FOREST_EDGE_CERT_PATH = str(edge["tls"] / "missing-{hostname}.crt")
    result = services.edge_pass()
    assert result.serving == [] and list(result.failed) == ["shop.apps.example.com"]
    assert (edge["nginx"].conf_dir / services.EDGE_FILE).read_text() == before
    assert IngressRoute.objects.get().state == "failed"
    assert _get(edge, "shop.apps.example.com") == "shop.apps.example.com https"


def test_the_flag_off_renders_nothing_and_the_command_reports(edge, mesh_grove, live_workload, capsys):
    grove = _grove(mesh_grove, edge)
    flag_override_set(name=FLAG, enabled=True, reason="test")
    live_workload("shop", grove, ["shop.apps.example.com"])
    live_workload("blog", grove, ["blog.apps.example.com"])
    (edge["tls"] / "blog.apps.example.com.key").write_text("not a key\n")
    with pytest.raises(CommandError, match="1 route"):
        call_command("forest_edge", "--once")
    out = capsys.readouterr().out
    assert "serving  shop.apps.example.com" in out and "failed   blog.apps.example.com" in out
    flag_override_set(name=FLAG, enabled=False, reason="test")
    call_command("forest_edge", "--once")
    out = capsys.readouterr().out
    assert "host.deploy.native_ingress is off" in out
    conf = (edge["nginx"].conf_dir / services.EDGE_FILE).read_text()
    assert "forest-section" not in conf and "shop.apps.example.com" not in conf
    assert not IngressRoute.objects.exists()
    wait_for(lambda: _get(edge, "shop.apps.example.com") is None, what="the edge to drop the name")


@pytest.mark.django_db(transaction=True)
def test_serve_starts_its_nginx_once_the_flag_is_on_and_stops_it_with_itself(tmp_path):
    """``manage.py forest_edge --serve`` as ``make run`` starts it: a child process on this test's database;
    its private nginx (own prefix, non-daemon) answers only after the flag is turned on, and goes with it."""
    import os
    import signal
    import subprocess
    import sys

    from django.db import connection

    from apps.ingress.selectors import ingress_status

    http = free_port()
    database = connection.settings_dict
    env = {**os.environ, "DATABASE_URL": f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/"
                                         f"{database['NAME']}",
           "FOREST_VAR_DIR": str(tmp_path / "var"), "FLAGS_CACHE_TTL_S": "0", "DEBUG": "0",
           "SECRET_KEY": "edge-serve-test", "FOREST_EDGE_HTTP_LISTEN": f"127.0.0.1:{http}",
           "FOREST_EDGE_HTTPS_LISTEN": f"127.0.0.1:{free_port()}", "FOREST_EDGE_CONF_DIR": str(tmp_path / "conf.d")}
    log = tmp_path / "edge.log"
    with open(log, "w") as sink:
        edge = subprocess.Popen([sys.executable, "manage.py", "forest_edge", "--serve", "--interval", "0.2"],
                                env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        assert ingress_status()["enabled"] is False
        wait_for(lambda: "edge waiting: host.deploy.native_ingress is off" in log.read_text() or edge.poll(),
                 timeout=60, what="the edge to say it waits for the flag")
        assert not (tmp_path / "var" / "edge" / "nginx.pid").exists()  # no nginx while the flag is off
        flag_override_set(name=FLAG, enabled=True, reason="test")
        wait_for(lambda: (_status(f"http://127.0.0.1:{http}/") == 404) or edge.poll() is not None,
                 timeout=60, what="the edge's nginx to answer once the flag is on")
        assert edge.poll() is None
        assert (tmp_path / "var" / "edge" / "nginx.pid").exists()
    finally:
        edge.send_signal(signal.SIGTERM)
        edge.wait(timeout=60)
    output = log.read_text()
    assert edge.returncode == 0, output
    assert "edge nginx serving" in output
    wait_for(lambda: _status(f"http://127.0.0.1:{http}/") is None, what="the edge's nginx to stop with it")


def _status(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return None


@pytest.mark.parametrize(("slipped", "code"), [
    ({"mesh_address": "127.0.0.33"}, "mesh_address_reserved"),  # the edge's own proxy bind
    ({"mesh_address": "127.0.0.40"}, "mesh_address_reserved"),  # one of Host's own services
    ({"mesh_address": "127.0.0.1"}, "mesh_address_outside_range"),
    ({"mesh_proxy_port": 22}, "mesh_port_out_of_range"),
])
def test_the_edge_refuses_an_upstream_that_slipped_into_the_database(edge, mesh_grove, live_workload, ingress_on,
                                                                     settings, slipped, code):
    """Issue 33: the heartbeat refuses these; the edge re-checks every upstream before it renders one, so a
    bad value written some other way still never becomes a proxy_pass."""
    from apps.groves.models import Grove

    settings.FOREST_EDGE_PROXY_BIND = "127.0.0.33"
    settings.FOREST_OWN_SERVICE_URLS = ["postgres://forest@127.0.0.40:5432/forest"]
    grove = _grove(mesh_grove, edge)
    live_workload("shop", grove, ["shop.apps.example.com"])
    assert services.edge_pass().serving == ["shop.apps.example.com"]
    Grove.objects.filter(pk=grove.pk).update(**slipped)
    result = services.edge_pass()
    assert result.serving == [] and code in result.failed["shop.apps.example.com"]
    rendered = (edge["nginx"].conf_dir / services.EDGE_FILE).read_text()
    assert "proxy_pass" not in rendered
    assert IngressRoute.objects.get(hostname="shop.apps.example.com").state == "failed"


def test_the_edge_refuses_an_address_two_groves_share(edge, mesh_grove, live_workload, ingress_on):
    from apps.groves.models import Grove

    first = _grove(mesh_grove, edge)
    second = mesh_grove(name="twin", address="127.0.0.35")
    live_workload("shop", first, ["shop.apps.example.com"])
    live_workload("blog", second, ["blog.apps.example.com"])
    Grove.objects.filter(pk=second.pk).update(mesh_address=MESH)  # slipped past the heartbeat's claim
    result = services.edge_pass()
    assert result.serving == []
    assert all("mesh_address_taken" in error for error in result.failed.values())
