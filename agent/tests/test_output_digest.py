"""An output upload is checked against Host's answer (forest_agent.data.upload_output): the digest Host says
it stored must be the one the agent computed over the bytes it sent, or the step fails with
`output_digest_mismatch` (a proxy or a Host bug that altered the bytes must not pass as the step's output).

Host is a small HTTP server of the test's own on 127.0.0.1 that reads the upload and answers with the
digest the test chooses (the true one, or a wrong one)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from forest_agent import data
from forest_agent.errors import DataRefused
from forest_agent.wire.messages import DataOutput

PAYLOAD = b"model weights\n" * 100


class _Host:
    """Answers every PUT with `{"id", "digest", "size"}`; `lie` swaps the digest for another one."""

    def __init__(self) -> None:
        self.lie = False
        self.received: list[bytes] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.received.append(body)
                digest = "sha256:" + hashlib.sha256(body + (b"!" if outer.lie else b"")).hexdigest()
                answer = json.dumps({"id": 7, "digest": digest, "size": len(body)}).encode()
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/forest/v1/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def host() -> Iterator[_Host]:
    served = _Host()
    yield served
    served.close()


def _upload(host: _Host, root: Path, scratch: Path) -> dict:
    output = DataOutput(name="model", path="out/model.bin", key="attempt-1/model")
    with httpx.Client(timeout=10) as http:
        return data.upload_output(http, base_url=host.url, headers={}, run_id="r1", node="train",
                                  output=output, root=root, scratch=scratch)


def test_an_output_whose_stored_digest_differs_from_the_sent_one_fails_the_step(host: _Host,
                                                                                  tmp_path: Path) -> None:
    root, scratch = tmp_path / "work", tmp_path / "scratch"
    (root / "out").mkdir(parents=True)
    scratch.mkdir()
    (root / "out" / "model.bin").write_bytes(PAYLOAD)
    sent = "sha256:" + hashlib.sha256(PAYLOAD).hexdigest()

    assert _upload(host, root, scratch)["digest"] == sent  # Host stored what was sent: accepted

    host.lie = True
    with pytest.raises(DataRefused) as refused:
        _upload(host, root, scratch)
    assert refused.value.code == "output_digest_mismatch"
    assert sent in str(refused.value) and host.received[-1] == PAYLOAD
