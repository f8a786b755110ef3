"""Bytes no HTTP library would send, written to a live Host server over a raw socket: NUL and invalid
UTF-8 in the request line, the Authorization header and the body. None may answer 5xx or change a row."""
from __future__ import annotations

import socket
from urllib.parse import urlsplit

import pytest

from tests.factories import api_token_for
from tests.fingerprint import changed_tables, table_fingerprint


def _send(url: str, raw: bytes) -> int:
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as conn:
        conn.sendall(raw)
        head = b""
        while b"\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                break
            head += chunk
    return int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0


def _request(method: bytes, target: bytes, headers: dict[bytes, bytes], body: bytes = b"") -> bytes:
    lines = [method + b" " + target + b" HTTP/1.1", b"Host: localhost", b"Connection: close"]
    lines += [name + b": " + value for name, value in headers.items()]
    if body or method == b"POST":
        lines += [b"Content-Type: application/json", b"Content-Length: " + str(len(body)).encode()]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


@pytest.mark.django_db(transaction=True)
def test_raw_hostile_bytes_never_answer_5xx(live_server, fresh_grove, staff_user):
    grove, _credential = fresh_grove(name="raw")
    staff = {b"Authorization": b"Token " + api_token_for(staff_user, "raw").encode()}
    v1 = b"/api/forest/v1"
    gid = str(grove.id).encode()
    cases = [
        _request(b"POST", v1 + b"/groves/enroll", {}, b'{"token": "fet_\x00abc.def"}'),
        _request(b"POST", v1 + b"/groves/enroll", {}, b'{"token": "fet_\\u0000abc.def", "name": "x", '
                                                        b'"substrate": "native", "platforms": ["linux/amd64"]}'),
        _request(b"POST", v1 + b"/groves/enroll", {}, b"[" * 10_000 + b"]" * 10_000),
        _request(b"POST", v1 + b"/groves/" + gid + b"/heartbeat", {b"Authorization": b"Bearer fgc_\x00ab.cd"}, b"{}"),
        _request(b"POST", v1 + b"/groves/" + gid + b"/heartbeat", {b"Authorization": b"Bearer fgc_\xff\xfe.cd"}, b"{}"),
        _request(b"GET", v1 + b"/groves", {b"Authorization": b"Token fat_\x00ab.cd"}),
        _request(b"GET", v1 + b"/groves", {b"Authorization": b"Token \xff\xfe\xfd"}),
        _request(b"GET", v1 + b"/groves/" + gid + b"/changes?wait=%00", {b"Authorization": b"Bearer x"}),
        _request(b"GET", v1 + b"/workloads/%00", staff),
        _request(b"GET", v1 + b"/workloads/\xff\xfe", staff),
        _request(b"GET", v1 + b"/pipelines/runs?environment=%ff%00", staff),
        _request(b"GET", v1 + b"/pipelines/runs?page_size=99999999999999999999999&page=-1", staff),
        _request(b"GET", v1 + b"/placements/99999999999999999999999999", staff),
        _request(b"POST", v1 + b"/compute/jobs", staff, b'{"name": "x", "steps": [], "grove": "sec-a\\u0000"}'),
    ]
    before = table_fingerprint()
    statuses = [_send(live_server.url, raw) for raw in cases]
    assert all(0 < status < 500 for status in statuses), statuses
    assert statuses[-3:] == [404, 404, 400], statuses  # reached the API and were refused there
    assert changed_tables(before, table_fingerprint()) == []
