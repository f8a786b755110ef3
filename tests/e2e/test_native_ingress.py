"""Native ingress through both hops, nothing faked: Host's edge (``apps.ingress.services.edge_pass``, what
``manage.py forest_edge`` runs) renders Debian's real nginx with TLS from a test CA; the real
``forest-agent`` reports its mesh address and renders its own real nginx (the mesh hop); a signed bundle's
tiny HTTP server is the workload. Both nginx run unprivileged as non-daemon children with their own prefix.

The mesh is simulated with loopback addresses of its own: the edge sends from 127.0.0.17, the agent's
proxy listens on 127.0.0.18, and the mesh range is 127.0.0.16/28. Clients use curl with ``--resolve``
(SNI and Host are the public name, the connection goes to 127.0.0.1) and verify against the test CA.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from apps.accounts.models import AuditEvent
from apps.flags.services import flag_override_set
from apps.groves.models import Grove
from apps.ingress import services as ingress
from apps.ingress.devtls import CertificateAuthority
from apps.ingress.models import IngressRoute
from apps.ingress.selectors import ingress_status
from apps.workloads import services
from apps.workloads.models import NativeWorkload, WorkloadGeneration
from tests.e2e.test_native_workload import _bundle, _state, free_port, signing_key  # noqa: F401
from tests.ingress.nginx import NginxProcess
from tests.pipelines.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e, pytest.mark.slow]
EDGE_SOURCE, MESH_ADDRESS, MESH_RANGE = "127.0.0.17", "127.0.0.18", "127.0.0.16/28"
SHOP, BROKEN = "shop.forest.test", "broken.forest.test"

# The workload answers with its colour and the headers the two hops set.
ECHO = b'''
import http.server, json, os
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/healthz":
            body = b"ok"
        else:
            body = json.dumps({"color": os.environ["COLOR"], "path": self.path,
                               "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
'''


def curl(url: str, *, resolve: str, ca, host: str | None = None) -> tuple[int, dict[str, str], str]:
    """(status, headers, body) from curl, or (0, {}, error) when no HTTP answer came (TLS refused)."""
    argv = ["curl", "-sS", "--max-time", "10", "--resolve", resolve, "--cacert", str(ca), "-D", "-", url]
    if host:
        argv += ["-H", f"Host: {host}"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        return 0, {}, result.stderr
    head, _, body = result.stdout.partition("\n\n")  # text mode: curl's CRLFs are newlines here
    lines = head.splitlines()
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


@pytest.fixture
def ingress_env(settings, tmp_path):
    """Host's ingress settings, two nginx (edge and mesh hop) and a test CA with a certificate for SHOP."""
    ca = CertificateAuthority(tmp_path / "tls")
    ca.issue(SHOP, tmp_path / "tls" / f"{SHOP}.crt", tmp_path / "tls" / f"{SHOP}.key")
    https, http = free_port(), free_port()
    settings.FOREST_MESH_NETWORKS = [MESH_RANGE]
    settings.FOREST_INGRESS_DOMAINS = ["forest.test"]
    settings.FOREST_EDGE_CERT_PATH = str(tmp_path / "tls" / "{hostname}.crt")
    settings.FOREST_EDGE_KEY_PATH = str(tmp_path / "tls" / "{hostname}.key")
    settings.FOREST_EDGE_HTTPS_LISTEN, settings.FOREST_EDGE_HTTPS_PORT = f"127.0.0.1:{https}", https
    settings.FOREST_EDGE_HTTP_LISTEN = f"127.0.0.1:{http}"
    settings.FOREST_EDGE_PROXY_BIND = EDGE_SOURCE
    settings.FOREST_EDGE_READ_TIMEOUT_S = 30
    settings.FOREST_NATIVE_WORKLOAD_DISPATCH = True
    edge, hop = NginxProcess(tmp_path / "edge").start(), NginxProcess(tmp_path / "hop").start()
    settings.FOREST_EDGE_CONF_DIR = edge.conf_dir
    yield {"ca": ca.pem, "https": https, "http": http, "edge": edge, "hop": hop}
    edge.stop()
    hop.stop()


def test_a_workload_answers_over_https_through_the_edge_and_the_mesh_hop(
        live_server, enrolled, agents, signing_key, settings, ingress_env):  # noqa: F811
    grove, state_dir = enrolled
    key, public = signing_key
    env, hop = ingress_env, ingress_env["hop"]
    settings.FOREST_PUBLIC_URL = live_server.url
    flag_override_set(name="host.deploy.native_ingress", enabled=True, reason="e2e")
    proxy_port = free_port()
    agent = agents(state_dir, "--enable-native-workloads", "--trusted-key", f"release={public}",
                   "--nginx-conf-dir", str(hop.conf_dir), "--nginx-binary", hop.command.binary,
                   "--nginx-config", str(hop.main), "--nginx-prefix", str(hop.root),
                   "--mesh-address", MESH_ADDRESS, "--proxy-port", str(proxy_port), "--mesh-allow", MESH_RANGE)
    files = env["edge"].files()
    https = f"https://{SHOP}:{env['https']}"
    resolve = f"{SHOP}:{env['https']}:127.0.0.1"

    def through_edge(path: str = "/", host: str | None = None):
        return curl(f"{https}{path}", resolve=resolve, ca=env["ca"], host=host)

    def serving(color: str):
        status, headers, body = through_edge("/")
        if status != 200:
            return None
        echoed = json.loads(body)
        return (headers, echoed) if echoed["color"] == color else None

    try:
        # (1) The heartbeat carries the mesh address and proxy port; Host keeps them.
        wait_for(lambda: Grove.objects.filter(pk=grove.pk, mesh_address=MESH_ADDRESS,
                                              mesh_proxy_port=proxy_port).exists(),
                 what=f"the Grove's mesh address {agent.output()}")
        bundle = _bundle_of(key)
        app_port = free_port()
        spec = {"slug": "shop", "bundle_digest": bundle.digest, "grove": grove.slug,
                "command": [sys.executable, "server.py"], "env": {"PORT": str(app_port), "COLOR": "blue"},
                "ports": [{"name": "http", "port": app_port}],
                "probes": {"readiness": {"type": "http", "path": "/healthz", "port": app_port, "period_s": 1}},
                "ingress": {"hostnames": [SHOP], "port": app_port}}
        _, first = services.native_workload_apply(body=spec)
        first = _state(first, "live")
        assert first.reason == "", (first.reason, first.message, agent.output())

        # (2) The edge renders the route; a request reaches the workload through both hops, TLS verified.
        result = ingress.edge_pass(files=files)
        assert result.serving == [SHOP] and result.failed == {}
        route = IngressRoute.objects.get(hostname=SHOP)
        assert (route.state, route.upstream, route.workload_slug) == ("serving", f"{MESH_ADDRESS}:{proxy_port}",
                                                                      "shop")
        headers, echoed = wait_for(lambda: serving("blue"), what="the workload through the edge")
        assert headers["strict-transport-security"].startswith("max-age=")
        assert echoed["headers"]["x-forwarded-proto"] == "https"
        assert echoed["headers"]["x-forwarded-host"] == SHOP
        assert echoed["headers"]["x-forwarded-for"].split(",")[0].strip() == "127.0.0.1"
        assert AuditEvent.objects.filter(action="ingress.route_appeared", target_id=SHOP).count() == 1
        # Plain HTTP is redirected to HTTPS.
        status, headers, _ = curl(f"http://{SHOP}:{env['http']}/x?y=1", resolve=f"{SHOP}:{env['http']}:127.0.0.1",
                                  ca=env["ca"])
        assert status == 308 and headers["location"] == f"{https}/x?y=1"

        # (3) Unknown names: 404 over HTTP, 421 over TLS for another Host header, no handshake for its SNI.
        assert curl(f"http://nope.forest.test:{env['http']}/", resolve=f"nope.forest.test:{env['http']}:127.0.0.1",
                    ca=env["ca"])[0] == 404
        assert through_edge("/", host="nope.forest.test")[0] == 421
        assert curl(f"https://nope.forest.test:{env['https']}/", ca=env["ca"],
                    resolve=f"nope.forest.test:{env['https']}:127.0.0.1")[0] == 0
        # The agent's hop: plain HTTP from the mesh only, by host name; an unknown host is misdirected.
        hop_url = f"http://{MESH_ADDRESS}:{proxy_port}/"
        assert _hop_get(hop_url, SHOP, EDGE_SOURCE)[0] == 200
        assert _hop_get(hop_url, "nope.forest.test", EDGE_SOURCE)[0] == 421
        assert _hop_get(hop_url, SHOP, "127.0.0.1")[0] == 403
        assert _hop_get(hop_url, "nope.forest.test", "127.0.0.1")[0] == 403  # outsiders learn no name is unknown

        # (4) A new generation keeps serving: same route, now the new process.
        spec = {**spec, "env": {**spec["env"], "COLOR": "green"}}
        _, second = services.native_workload_apply(body=spec)
        _state(second, "live")
        assert ingress.edge_pass(files=files).serving == [SHOP]
        wait_for(lambda: serving("green"), what="the new generation through the edge")
        assert AuditEvent.objects.filter(action="ingress.route_gone").count() == 0

        # (5) A broken certificate path: the edge keeps its previous configuration and reports `failed`.
        _, third = services.native_workload_apply(body={**spec, "ingress": {"hostnames": [SHOP, BROKEN],
                                                                              "port": app_port}})
        _state(third, "live")
        before = (env["edge"].conf_dir / ingress.EDGE_FILE).read_text()
        result = ingress.edge_pass(files=files)
        assert result.serving == [SHOP] and list(result.failed) == [BROKEN]
        broken = IngressRoute.objects.get(hostname=BROKEN)
        assert broken.state == "failed" and "cannot load certificate" in broken.last_error, broken.last_error
        assert (env["edge"].conf_dir / ingress.EDGE_FILE).read_text() == before
        wait_for(lambda: serving("green"), what="the route that still works to keep serving")

        # (6) The flag off: nothing rendered, and the API's answer says why; on again, the route is back.
        flag_override_set(name="host.deploy.native_ingress", enabled=False, reason="e2e")
        assert ingress.edge_pass(files=files).serving == []
        assert SHOP not in (env["edge"].conf_dir / ingress.EDGE_FILE).read_text()
        assert IngressRoute.objects.count() == 0
        assert ingress_status()["enabled"] is False and "host.deploy.native_ingress" in ingress_status()["reason"]
        wait_for(lambda: through_edge("/")[0] == 0, what="the edge to stop serving the name")
        flag_override_set(name="host.deploy.native_ingress", enabled=True, reason="e2e")
        assert ingress.edge_pass(files=files).serving == [SHOP]
        wait_for(lambda: serving("green"), what="the route back")

        # (7) The workload removed: its route is gone after the next render.
        services.native_workload_delete(workload=NativeWorkload.objects.get(slug="shop"))
        assert ingress.edge_pass(files=files).serving == []
        assert not IngressRoute.objects.exists()
        assert AuditEvent.objects.filter(action="ingress.route_gone", target_id=SHOP).exists()
        wait_for(lambda: through_edge("/")[0] == 0, what="the removed workload's name to go")
        assert not WorkloadGeneration.objects.exists()
    finally:
        agent.stop()


def _bundle_of(key):
    return _bundle(key, ECHO)


def _hop_get(url: str, host: str, source: str) -> tuple[int, str]:
    import httpx

    with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=5) as client:
        response = client.get(url, headers={"Host": host})
    return response.status_code, response.text
