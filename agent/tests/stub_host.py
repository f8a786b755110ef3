"""A minimal, real HTTP server speaking the Grove wire contract (docs/wire.md).

It stands in for Host **only for the agent's unit tests**; the real Host (Django on PostgreSQL) is
exercised by the end-to-end tests that run this agent as a separate process. It implements exactly
what the agent uses: enroll, heartbeat, the bounded `changes` long-poll, job claim/report, workload
status, and a blob endpoint for bundles. Everything it receives is recorded for assertions.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import helpers

API = "/api/forest/v1/"


class StubHost:
    def __init__(self) -> None:
        self.tokens: set[str] = {"good-token"}
        self.groves: dict[str, str] = {}  # credential -> grove id
        self.revoked: set[str] = set()
        self.down = False  # answer 503 to every API call
        self.refused_while_down: list[str] = []  # the paths answered 503 while down, in order
        self.heartbeats: list[dict[str, Any]] = []
        self.enrollments: list[dict[str, Any]] = []
        self.reports: dict[str, list[dict[str, Any]]] = {}
        self.statuses: dict[str, list[dict[str, Any]]] = {}
        self.poll_times: list[float] = []
        self.blobs: dict[str, bytes] = {}
        self.pending_jobs: dict[str, dict[str, Any]] = {}
        self.claimed: set[str] = set()
        self.pending_workloads: list[dict[str, Any]] = []
        self.pending_cancel: list[str] = []
        self.terminal: set[str] = set()
        self.cond = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> StubHost:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- test controls -------------------------------------------------------------------------
    def add_grove(self, grove_id: str = "grove-1", credential: str = "cred-1") -> tuple[str, str]:
        self.groves[credential] = grove_id
        return grove_id, credential

    def add_job(self, job: dict[str, Any]) -> None:
        with self.cond:
            self.pending_jobs[job["job_id"]] = job
            self.cond.notify_all()

    def add_workload(self, generation: dict[str, Any]) -> None:
        with self.cond:
            self.pending_workloads.append(generation)
            self.cond.notify_all()

    def cancel(self, job_id: str) -> None:
        with self.cond:
            self.pending_cancel.append(job_id)
            self.cond.notify_all()

    def add_blob(self, name: str, data: bytes) -> str:
        self.blobs[name] = data
        return f"{self.url}/blobs/{name}"

    def wait_for(self, predicate: Any, timeout: float = 10.0, what: str = "condition") -> Any:
        return helpers.wait_for(predicate, timeout, what)

    def terminal_report(self, job_id: str, timeout: float = 10.0) -> dict[str, Any]:
        def find() -> dict[str, Any] | None:
            for report in self.reports.get(job_id, []):
                if report["state"] != "running":
                    return report
            return None

        return self.wait_for(find, timeout, f"terminal report of {job_id}")

    def status_with(self, generation_id: str, state: str, timeout: float = 10.0) -> dict[str, Any]:
        def find() -> dict[str, Any] | None:
            for status in self.statuses.get(generation_id, []):
                if status["state"] == state:
                    return status
            return None

        return self.wait_for(find, timeout, f"{generation_id} in state {state}")

    # -- HTTP ----------------------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        host = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return

            def _send(self, status: int, body: Any = None, raw: bytes | None = None) -> None:
                data = raw if raw is not None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header(
                    "Content-Type", "application/json" if raw is None else "application/octet-stream"
                )
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, code: str, detail: str) -> None:
                self._send(status, {"code": code, "detail": detail})

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length) or b"{}")

            def _grove(self, grove_id: str) -> bool:
                auth = self.headers.get("Authorization", "")
                credential = auth.removeprefix("Bearer ")
                if credential in host.revoked:
                    self._error(401, "credential_revoked", "this credential was revoked")
                    return False
                if credential not in host.groves:
                    self._error(401, "not_authenticated", "a Grove credential is required")
                    return False
                if host.groves[credential] != grove_id:
                    self._error(403, "grove_mismatch", "this credential acts for another Grove")
                    return False
                return True

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                if parts.path.startswith("/blobs/"):
                    data = host.blobs.get(parts.path.removeprefix("/blobs/"))
                    if data is None:
                        self._error(404, "not_found", "no such blob")
                    else:
                        self._send(200, raw=data)
                    return
                if host.down:
                    host.refused_while_down.append(parts.path)
                    self._error(503, "unavailable", "stub Host is down")
                    return
                match = re.fullmatch(API + r"groves/([^/]+)/changes", parts.path)
                if not match:
                    self._error(404, "not_found", "no such endpoint")
                    return
                if not self._grove(match.group(1)):
                    return
                host.poll_times.append(time.monotonic())
                wait = min(30, max(0, int(parse_qs(parts.query).get("wait", ["20"])[0])))
                deadline = time.monotonic() + wait
                with host.cond:
                    while True:
                        jobs = [j for k, j in host.pending_jobs.items() if k not in host.claimed]
                        if jobs or host.pending_workloads or host.pending_cancel:
                            break
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        host.cond.wait(min(remaining, 0.2))
                    answer = {
                        "jobs": jobs,
                        "workloads": list(host.pending_workloads),
                        "cancel": list(host.pending_cancel),
                    }
                    host.pending_workloads.clear()
                    host.pending_cancel.clear()
                self._send(200, answer)

            def do_POST(self) -> None:
                path = urlsplit(self.path).path
                if host.down:
                    host.refused_while_down.append(path)
                    self._error(503, "unavailable", "stub Host is down")
                    return
                body = self._body()
                if path == API + "groves/enroll":
                    host.enrollments.append(body)
                    if body.get("token") not in host.tokens:
                        self._error(
                            403, "enrollment_token_invalid", "the enrollment token is unknown or used"
                        )
                        return
                    host.tokens.discard(body["token"])
                    grove_id, credential = str(uuid.uuid4()), "cred-" + uuid.uuid4().hex
                    host.groves[credential] = grove_id
                    self._send(201, {"grove_id": grove_id, "credential": credential})
                    return
                match = re.fullmatch(
                    API + r"groves/([^/]+)/(heartbeat|jobs/([^/]+)/(claim|report)|"
                    r"workloads/([^/]+)/status)",
                    path,
                )
                if not match:
                    self._error(404, "not_found", "no such endpoint")
                    return
                if not self._grove(match.group(1)):
                    return
                if match.group(2) == "heartbeat":
                    host.heartbeats.append(body)
                    self._send(200, {"server_time": time.time(), "stale_after_s": 90})
                elif match.group(4) == "claim":
                    job_id = match.group(3)
                    with host.cond:
                        if job_id in host.claimed:
                            self._error(409, "already_claimed", "another agent claimed this job")
                            return
                        if job_id not in host.pending_jobs:
                            self._error(404, "job_not_found", "no such job")
                            return
                        host.claimed.add(job_id)
                    self._send(200, {"job": host.pending_jobs[job_id]})
                elif match.group(4) == "report":
                    job_id = match.group(3)
                    accepted = job_id not in host.terminal
                    host.reports.setdefault(job_id, []).append(body)
                    if body.get("state") != "running":
                        host.terminal.add(job_id)
                    self._send(200, {"job_id": job_id, "status": body.get("state"), "accepted": accepted})
                else:
                    generation_id = match.group(5)
                    host.statuses.setdefault(generation_id, []).append(body)
                    self._send(200, {"generation_id": generation_id, "state": body.get("state")})

        return Handler
