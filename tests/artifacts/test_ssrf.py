"""Image imports cannot be aimed inward (apps/core/egress.py, apps/artifacts/registry.py).

Only loopback traffic: small HTTP servers of the test's own on 127.0.0.1 (which count the connections
they get), and a resolver stand-in that answers private, link-local, metadata or public addresses for
made-up names without any lookup — a refused address is refused before any socket is opened, so no
packet leaves the machine. The one public address used (``PUBLIC``) is only ever checked, never dialled.
"""
from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from apps.artifacts.models import Artifact
from apps.artifacts.oci import parse_reference
from apps.artifacts.registry import MAX_REDIRECTS, RegistryClient
from apps.core.egress import Egress, EgressRefused, address_refusal, endpoints
from apps.core.errors import ForestError
from tests.artifacts.conftest import V1

pytestmark = pytest.mark.django_db
PUBLIC = "93.184.215.14"  # a global unicast address: checked by the guard, never connected to here
OS_WORDS = ("errno", "refused", "reset", "ssl", "certificate", "timed out", "timeout", "eof", "[", "wrong_version")


class Counting:
    """A loopback HTTP server that counts connections and answers with ``handler(path) -> (status,
    headers, body)``."""

    def __init__(self, handler):
        self.connections = 0
        self.paths: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def setup(self):
                outer.connections += 1
                super().setup()

            def do_GET(self):
                outer.paths.append(self.path)
                status, headers, body = handler(self.path)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.host = f"127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def servers():
    made: list[Counting] = []

    def make(handler=lambda path: (404, {}, b"{}")) -> Counting:
        made.append(Counting(handler))
        return made[-1]

    yield make
    for server in made:
        server.close()


def stand_in(table: dict[str, list[str]]):
    """A resolver that answers from ``table`` (name → addresses) and never looks anything up."""
    def resolve(host: str, port: int) -> list[str]:
        if host in table:
            return table[host]
        raise socket.gaierror(socket.EAI_NONAME, "not in the test's table")
    return resolve


def _import(client, reference, grove):
    return client.post(f"{V1}/artifacts/imports", {"reference": reference, "grove": grove}, format="json")


@pytest.fixture
def grove(enroll):
    return enroll(name="g", substrate="kubernetes", roles=("runtime",), platforms=["linux/amd64"])[0]


# --- through the API -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "127.1.2.3"])
def test_a_loopback_registry_that_nobody_named_is_refused_before_connecting(servers, uploader, grove, name,
                                                                            settings):
    listening = servers()
    settings.FOREST_OCI_INSECURE_REGISTRIES = []
    settings.FOREST_OCI_PRIVATE_REGISTRIES = []
    response = _import(uploader, f"{name}:{listening.port}/forest/app:1", grove.slug)
    assert response.status_code == 403, response.content
    body = response.json()
    assert body["code"] == "registry_address_refused" and body["field"] == "reference"
    assert body["registry"] == f"{name}:{listening.port}" and "loopback" in body["detail"]
    assert listening.connections == 0
    assert not Artifact.objects.exists()


def test_hosts_own_database_and_broker_ports_are_refused(uploader, grove, settings):
    settings.FOREST_OCI_INSECURE_REGISTRIES = []
    for port in (5432, 6379):
        response = _import(uploader, f"127.0.0.1:{port}/forest/app:1", grove.slug)
        assert response.json()["code"] == "registry_address_refused", response.content


def test_failures_read_the_same_whatever_the_os_said(servers, uploader, grove, settings):
    """A closed port and a port that accepts and never answers: one code, one sentence (no OS text that
    would tell them apart)."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    settings.FOREST_OCI_TIMEOUT_S = 0.5
    try:
        settings.FOREST_OCI_INSECURE_REGISTRIES = [f"127.0.0.1:{closed_port}", f"127.0.0.1:{silent.getsockname()[1]}"]
        answers = [_import(uploader, f"127.0.0.1:{port}/forest/app:1", grove.slug).json()
                   for port in (closed_port, silent.getsockname()[1])]
    finally:
        silent.close()
    assert [a["code"] for a in answers] == ["registry_unreachable"] * 2
    details = [a["detail"].replace(a["registry"], "REGISTRY") for a in answers]
    assert details[0] == details[1], details
    assert not any(word in details[0].lower() for word in OS_WORDS), details[0]


# --- the resolver stand-in: private names never dialled ------------------------------------------------------

@pytest.mark.parametrize("address", ["10.0.0.5", "172.16.3.4", "192.168.1.1", "169.254.169.254", "127.0.0.1",
                                     "0.0.0.0", "224.0.0.1", "100.64.0.1", "::1", "fe80::1", "fd00::5",
                                     "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::"])
def test_a_name_resolving_inward_is_refused(address):
    client = RegistryClient(timeout_s=5, resolver=stand_in({"registry.example.com": [address]}))
    with pytest.raises(ForestError) as refused:
        client.manifest(parse_reference("registry.example.com/forest/app:1"))
    assert (refused.value.code, refused.value.status) == ("registry_address_refused", 403)
    assert "registry.example.com" in refused.value.detail


def test_a_name_with_one_public_and_one_private_address_is_refused():
    egress = Egress(timeout_s=5, resolver=stand_in({"mixed.example.com": [PUBLIC, "10.1.2.3"]}))
    with pytest.raises(EgressRefused) as refused:
        egress.admit("mixed.example.com", 443)
    assert "private" in refused.value.reason


def test_a_public_name_is_admitted_and_pinned_to_the_checked_address():
    egress = Egress(timeout_s=5, resolver=stand_in({"registry.example.com": [PUBLIC]}))
    assert egress.admit("registry.example.com", 443) == PUBLIC  # what the socket would connect to
    assert address_refusal(PUBLIC) == ""


def test_hosts_own_services_are_refused_even_on_public_addresses():
    resolve = stand_in({"db.example.com": [PUBLIC], "registry.example.com": [PUBLIC]})
    egress = Egress(timeout_s=5, resolver=resolve, own_services=["postgres://forest@db.example.com:5432/forest"])
    with pytest.raises(EgressRefused) as refused:
        egress.admit("registry.example.com", 5432)
    assert refused.value.reason == "it is one of Host's own services"
    assert egress.admit("registry.example.com", 443) == PUBLIC  # the same address on another port is not
    assert endpoints(["redis://cache:6379/7", "http://h", "sqlite:///x", "garbage"]) == {("cache", 6379), ("h", 80)}


def test_a_name_that_does_not_resolve_is_refused_with_a_code():
    client = RegistryClient(timeout_s=5, resolver=stand_in({}))
    with pytest.raises(ForestError) as refused:
        client.manifest(parse_reference("nowhere.example.com/forest/app:1"))
    assert refused.value.code == "registry_address_refused"


def test_an_operator_named_private_tls_registry_is_dialled(servers, settings):
    """In the private-registry list, a TLS registry on a private address is allowed: the guard lets the
    connection through (here to a plain-HTTP loopback server, so TLS then fails — unreachable, not
    refused — and the server saw the connection)."""
    listening = servers()
    named = f"registry.corp.example:{listening.port}"
    resolve = stand_in({"registry.corp.example": ["127.0.0.1"]})
    refused = RegistryClient(timeout_s=5, resolver=resolve)
    with pytest.raises(ForestError) as error:
        refused.manifest(parse_reference(f"{named}/forest/app:1"))
    assert error.value.code == "registry_address_refused" and listening.connections == 0
    allowed = RegistryClient(timeout_s=5, resolver=resolve, private_registries={named})
    with pytest.raises(ForestError) as error:
        allowed.manifest(parse_reference(f"{named}/forest/app:1"))
    assert error.value.code == "registry_unreachable"
    assert not any(word in error.value.detail.lower() for word in OS_WORDS), error.value.detail
    assert listening.connections == 1


# --- redirects -----------------------------------------------------------------------------------------------

MANIFEST = b'{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "layers": []}'


def test_a_redirect_inward_is_refused_and_never_dialled(servers):
    inner = servers(lambda path: (200, {}, MANIFEST))
    front = servers(lambda path: (302, {"Location": f"http://{inner.host}/v2/forest/app/manifests/1"}, b""))
    client = RegistryClient(timeout_s=5, insecure_registries={front.host})
    with pytest.raises(ForestError) as refused:
        client.manifest(parse_reference(f"{front.host}/forest/app:1"))
    assert (refused.value.code, refused.value.status) == ("registry_redirect_refused", 502)
    assert inner.host in refused.value.detail and inner.connections == 0


def test_a_redirect_to_the_metadata_address_is_refused_and_never_dialled(servers):
    front = servers(lambda path: (307, {"Location": "http://metadata.example.com/latest/meta-data/"}, b""))
    client = RegistryClient(timeout_s=5, insecure_registries={front.host},
                            resolver=stand_in({"127.0.0.1": ["127.0.0.1"],
                                               "metadata.example.com": ["169.254.169.254"]}))
    with pytest.raises(ForestError) as refused:
        client.manifest(parse_reference(f"{front.host}/forest/app:1"))
    assert refused.value.code == "registry_redirect_refused" and "link-local" in refused.value.detail


def test_redirects_within_the_named_registry_are_followed_a_few_times(servers):
    def handler(path):
        hop = int(path.rsplit("hop", 1)[1]) if "hop" in path else 0
        if path.endswith("/manifests/1") or hop < 2:
            return 302, {"Location": f"/v2/forest/app/manifests/1-hop{hop + 1}"}, b""
        return 200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, MANIFEST

    registry = servers(handler)
    fetched = RegistryClient(timeout_s=5, insecure_registries={registry.host}).manifest(
        parse_reference(f"{registry.host}/forest/app:1"))
    assert fetched.data == MANIFEST and len(registry.paths) == 3

    looping = servers(lambda path: (302, {"Location": path}, b""))
    with pytest.raises(ForestError) as refused:
        RegistryClient(timeout_s=5, insecure_registries={looping.host}).manifest(
            parse_reference(f"{looping.host}/forest/app:1"))
    assert refused.value.code == "registry_redirect_refused"
    assert len(looping.paths) == MAX_REDIRECTS + 1


# --- one total deadline ---------------------------------------------------------------------------------------

def test_a_trickling_registry_is_cut_off_at_the_imports_deadline():
    """The registry answers at once, then sends its body a byte at a time: each read is quick, so only a
    deadline over the whole import ends it. The server notices the client hang up before it has sent
    its body (its write fails), which a per-read time limit would never do (it would read all of it)."""
    total = 400
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    sent: list[int] = [0]
    pace = threading.Event()  # never set: only its timeout is used

    def trickle():
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\n"
                         + f"Content-Length: {total}\r\n\r\n".encode())
            try:
                for _ in range(total):
                    conn.sendall(b" ")
                    sent[0] += 1
                    pace.wait(0.05)  # the hostile registry's pace: a byte every 50 ms
            except OSError:  # the client hung up
                pass

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    host = f"127.0.0.1:{listener.getsockname()[1]}"
    client = RegistryClient(timeout_s=0.5, insecure_registries={host})
    try:
        with pytest.raises(ForestError) as cut:
            client.manifest(parse_reference(f"{host}/forest/app:1"))
    finally:
        thread.join(timeout=60)
        listener.close()
    assert cut.value.code == "registry_unreachable" and "0.5 s" in cut.value.detail
    assert sent[0] < total


class _Scripted(RegistryClient):
    """A ``RegistryClient`` whose requests are answered by ``httpx.MockTransport`` (fake: the network and TLS;
    a self-signed TLS registry would need a trust hook Host does not have). What is tested is the client's own
    handling of the answers: which redirects it follows."""

    def __init__(self, handler, **kwargs):
        super().__init__(timeout_s=5, **kwargs)
        self.handler = handler
        self.seen: list[str] = []

    def _client(self, ref):
        def record(request: httpx.Request) -> httpx.Response:
            self.seen.append(str(request.url))
            return self.handler(request)

        return httpx.Client(transport=httpx.MockTransport(record), follow_redirects=False)


def test_a_redirect_from_https_to_plain_http_is_never_followed():
    """The same registry, its own name and port: only the scheme drops to plain HTTP, which a network attacker
    could then read or answer. Refused with its code; a same-scheme hop of the same answer is followed."""
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/manifests/1"):
            return httpx.Response(302, headers={"Location": f"{scheme}://registry.example.com/v2/forest/app/blob"})
        return httpx.Response(200, headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
                              content=MANIFEST)

    scheme = "http"
    client = _Scripted(handler)
    with pytest.raises(ForestError) as refused:
        client.manifest(parse_reference("registry.example.com/forest/app:1"))
    assert refused.value.code == "registry_redirect_refused" and "plain HTTP" in refused.value.detail
    assert client.seen == ["https://registry.example.com/v2/forest/app/manifests/1"]

    scheme = "https"
    client = _Scripted(handler)
    assert client.manifest(parse_reference("registry.example.com/forest/app:1")).data == MANIFEST
    assert len(client.seen) == 2


def test_every_request_of_one_import_shares_its_deadline():
    """Each request answers within the import's time limit, but two of them together do not: one import (one
    client) is cut off on its second request. A registry that pauses before answering stands in for a slow
    one (the pause is the server's pace, never waited on by the test)."""
    pace = threading.Event()  # never set: only its timeout is used

    def slow(path):
        pace.wait(0.3)
        if "/blobs/" in path:
            return 200, {}, b"{}"
        return 200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, MANIFEST

    registry = Counting(slow)
    try:
        client = RegistryClient(timeout_s=0.5, insecure_registries={registry.host})
        ref = parse_reference(f"{registry.host}/forest/app:1")
        with pytest.raises(ForestError) as cut:
            client.manifest(ref)  # 0.3 s: within the limit on its own
            client.blob(ref, "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a")
        assert cut.value.code == "registry_unreachable" and "0.5 s" in cut.value.detail
    finally:
        registry.close()
