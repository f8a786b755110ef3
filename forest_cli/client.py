"""A small REST client for the Forest Host API. Every failure becomes ``ForestClientError`` with a
stable code and a sentence, whether Host answered with its error shape or could not be reached."""
from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import httpx

# One JSON object of Host's answers (Host's serializers are the schema; the CLI reads keys it knows).
JSON = dict[str, Any]

API = "/api/forest/v1"
TERMINAL = {"succeeded", "failed", "cancelled"}
# Host's 503 codes for a lost database or broker: it did nothing, so the same request may be sent again.
OUTAGE_CODES = frozenset({"database_unavailable", "broker_unavailable"})
RETRY_ATTEMPTS = 5
RETRY_AFTER_CAP_S = 30.0


class ForestClientError(Exception):
    def __init__(self, code: str, detail: str, *, status: int | None = None,
                 field: str | None = None) -> None:
        super().__init__(detail)
        self.code, self.detail, self.status, self.field = code, detail, status, field
        self.retry_after_s: float | None = None

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field else ""
        return f"{self.detail}{where} [{self.code}]"


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


class ForestClient:
    def __init__(self, host: str | None, token: str | None, *, timeout: float = 30.0,
                 on_retry: Callable[[ForestClientError, float, int], None] | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not host:
            raise ForestClientError("host_missing", "No Forest Host given: pass --host or set FOREST_HOST.")
        if not token:
            raise ForestClientError("token_missing", "No API token given: pass --token or set FOREST_TOKEN.")
        self.host = host.rstrip("/")
        self._on_retry, self._sleep = on_retry, sleep
        self._http = httpx.Client(base_url=self.host + API, timeout=timeout,
                                  headers={"Authorization": f"Token {token}", "Accept": "application/json"})

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """One call; a 503 outage answer (``OUTAGE_CODES``) is retried after its ``Retry-After``, at most
        ``RETRY_ATTEMPTS`` times, since Host refused it before doing anything."""
        for attempt in range(1, RETRY_ATTEMPTS + 1):
            try:
                return self._request_once(method, path, **kwargs)
            except ForestClientError as exc:
                if exc.code not in OUTAGE_CODES or attempt == RETRY_ATTEMPTS:
                    raise
                delay = min(RETRY_AFTER_CAP_S, exc.retry_after_s or 1.0)
                if self._on_retry is not None:
                    self._on_retry(exc, delay, attempt)
                self._sleep(delay)
        raise AssertionError("unreachable")

    def _request_once(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ForestClientError("host_unreachable", f"Cannot reach Forest Host at {self.host}: {exc}.") from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 400:
            if isinstance(body, dict) and "code" in body:
                error = ForestClientError(body["code"], body.get("detail", ""), status=response.status_code,
                                          field=body.get("field"))
                error.retry_after_s = _retry_after(response.headers.get("Retry-After"))
                raise error
            raise ForestClientError("http_error", f"Host answered {response.status_code} to {method} {path}.",
                                    status=response.status_code)
        if body is None:
            raise ForestClientError("bad_response", f"Host's answer to {method} {path} is not JSON.")
        return body

    def _object(self, method: str, path: str, **kwargs: Any) -> JSON:
        """``request`` for a route whose answer is one JSON object."""
        body = self.request(method, path, **kwargs)
        if not isinstance(body, dict):
            raise ForestClientError("bad_response", f"Host's answer to {method} {path} is not a JSON object.")
        return body

    def _rows(self, method: str, path: str, **kwargs: Any) -> list[JSON]:
        """``request`` for a route whose answer is a JSON array of objects."""
        body = self.request(method, path, **kwargs)
        if not isinstance(body, list):
            raise ForestClientError("bad_response", f"Host's answer to {method} {path} is not a JSON array.")
        return body

    # artifacts
    def blob_upload(self, data: bytes, *, digest: str, media_type: str, signature: str = "", key_id: str = "",
                    team: str | None = None, platform: str | None = None) -> JSON:
        """Upload ``data`` into Host's CAS (``POST /artifacts/blobs``); Host refuses it when ``digest`` is wrong."""
        params = {"digest": digest, "media_type": media_type, "signature": signature, "key_id": key_id}
        params.update({name: value for name, value in (("team", team), ("platform", platform)) if value})
        return self._object("POST", "/artifacts/blobs", params=params, content=data,
                            headers={"Content-Type": "application/octet-stream"})

    # compute
    def compute_submit(self, body: JSON) -> JSON:
        return self._object("POST", "/compute/jobs", json=body)

    def compute_get(self, job_id: str) -> JSON:
        return self._object("GET", f"/compute/jobs/{self.compute_id(job_id)}")

    def compute_id(self, given: str) -> str:
        """A full compute job id, or the one job whose id starts with ``given`` (the prefix a table shows)."""
        return _resolve(given, lambda: [job["id"] for job in self.compute_list()], "compute job")

    def run_id(self, given: str) -> str:
        """A full run id, or the one run whose id starts with ``given``."""
        return _resolve(given, lambda: [run["id"] for run in self.runs_list()], "run")

    def compute_list(self, **filters: Any) -> list[JSON]:
        """Recent compute jobs; ``filters`` are the list's (name, status, environment, team, grove, created_after,
        created_before), the staff page's too."""
        return self._rows("GET", "/compute/jobs", params={k: v for k, v in filters.items() if v})

    def compute_cancel(self, job_id: str) -> JSON:
        return self._object("POST", f"/compute/jobs/{self.compute_id(job_id)}/cancel")

    def compute_logs(self, job_id: str) -> list[JSON]:
        return self._rows("GET", f"/compute/jobs/{self.compute_id(job_id)}/logs")

    # staff reads (staff token, host.staff.execution_observability on)
    def groves_list(self, **filters: Any) -> list[JSON]:
        return self._all("/staff/groves", filters)

    def inventory(self) -> JSON:
        return self._object("GET", "/staff/inventory")

    def placements_list(self, *, limit: int = 50, **filters: Any) -> list[JSON]:
        return self._all("/staff/placements", filters, limit=limit)

    def refusals(self, *, since: str | None = None, until: str | None = None) -> JSON:
        return self._object("GET", "/staff/refusals", params=_params(since=since, until=until))

    def ingress_routes(self, *, state: str | None = None) -> JSON:
        return self._object("GET", "/ingress/routes", params=_params(state=state))

    def plan(self, body: JSON) -> JSON:
        return self._object("POST", "/plan", json=body)

    def _all(self, path: str, filters: dict[str, Any], *, limit: int | None = None) -> list[JSON]:
        """Follow page numbers until ``limit`` rows (or the end); pages are Host's bounded pages."""
        params = {**_params(**filters), "page_size": min(limit or 500, 500)}
        rows: list[JSON] = []
        page = 1
        while True:
            body = self._object("GET", path, params={**params, "page": page})
            rows.extend(body["results"])
            if not body.get("next") or (limit is not None and len(rows) >= limit):
                return rows[:limit] if limit is not None else rows
            page += 1

    # runs
    def runs_list(self, **filters: Any) -> list[JSON]:
        params = {k: v for k, v in filters.items() if v}
        results: list[JSON] = self._object("GET", "/pipelines/runs", params=params)["results"]
        return results

    def run_get(self, run_id: str) -> JSON:
        return self._object("GET", f"/pipelines/runs/{self.run_id(run_id)}")

    def run_create(self, body: JSON) -> JSON:
        return self._object("POST", "/pipelines/runs", json=body)

    def run_cancel(self, run_id: str) -> JSON:
        return self._object("POST", f"/pipelines/runs/{self.run_id(run_id)}/cancel")

    # artifacts
    def artifact_lineage(self, artifact_id: int, *, depth: int | None = None) -> JSON:
        return self._object("GET", f"/artifacts/{artifact_id}/lineage", params=_params(depth=depth))

    def run_lineage(self, run_id: str) -> JSON:
        return self._object("GET", f"/artifacts/runs/{run_id}/lineage")

    # placements
    def placements_explain(self, subject: str, step: str | None = None) -> list[JSON]:
        """The stored decisions behind ``subject``: a placement id (``17``), a compute job id (every step's, or
        ``step``'s), ``RUN_ID:NODE`` (a node of a run) or ``TYPE:ID`` (``pipeline_node:42``)."""
        subject = subject.strip()
        if subject.isdigit():
            return [self._object("GET", f"/placements/{subject}")]
        if _UUID.fullmatch(subject):
            job = self.compute_get(subject)
            steps = [s for s in job["steps"] if step is None or s["name"] == step]
            if not steps:
                raise ForestClientError("step_not_found", f"Compute job {subject} has no step '{step}'.")
            return [row for s in steps if (s.get("decision") or {}).get("id")
                    for row in [self._object("GET", f"/placements/{s['decision']['id']}")]]
        subject_type, subject_id = _subject(subject)
        if subject_type == "run":
            run_id, node_id = subject_id.split(":", 1)
            node = next((n for n in self.run_get(run_id)["nodes"] if n["id"] == node_id), None)
            if node is None:
                raise ForestClientError("node_not_found", f"Run {run_id} has no node '{node_id}'.")
            subject_type, subject_id = node["placement_subject"].split(":", 1)
        body = self.request("GET", "/placements", params={"subject_type": subject_type, "subject_id": subject_id})
        rows: list[JSON] = body["results"] if isinstance(body, dict) and "results" in body else body
        return rows


def _params(**values: Any) -> dict[str, Any]:
    """Query parameters without the unset ones; booleans as Host's filters spell them."""
    return {k: ("true" if v else "false") if isinstance(v, bool) else v for k, v in values.items()
            if v is not None and v != ""}


_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _resolve(given: str, listed: Callable[[], list[str]], noun: str) -> str:
    """Expand an id prefix client-side through the list the CLI already shows (Host's id routes take whole
    UUIDs only); a full id goes straight to Host, so Host's own 404 still answers an unknown one."""
    given = given.strip().lower()
    if _UUID.fullmatch(given):
        return given
    matches = [i for i in listed() if i.lower().startswith(given)] if given else []
    if not matches:
        raise ForestClientError("id_prefix_unknown", f"No {noun} id among the newest listed starts with "
                                f"'{given}'; give the whole id.")
    if len(matches) > 1:
        raise ForestClientError("id_prefix_ambiguous", f"'{given}' starts {len(matches)} {noun} ids "
                                f"({', '.join(sorted(matches)[:3])}...); give more of it.")
    return matches[0]


def _subject(subject: str) -> tuple[str, str]:
    head, sep, tail = subject.partition(":")
    if not sep or not tail:
        raise ForestClientError("invalid_subject", "Give a placement id (17), a compute job id [STEP], RUN_ID:NODE "
                                "or TYPE:ID (pipeline_node:42).")
    if _UUID.match(head):
        return "run", subject
    return head, tail
