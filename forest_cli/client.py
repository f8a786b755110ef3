"""A small REST client for the Forest Host API. Every failure becomes ``ForestClientError`` with a
stable code and a sentence, whether Host answered with its error shape or could not be reached."""
from __future__ import annotations

import re
from typing import Any

import httpx

API = "/api/forest/v1"
TERMINAL = {"succeeded", "failed", "cancelled"}


class ForestClientError(Exception):
    def __init__(self, code: str, detail: str, *, status: int | None = None, field: str | None = None):
        super().__init__(detail)
        self.code, self.detail, self.status, self.field = code, detail, status, field

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field else ""
        return f"{self.detail}{where} [{self.code}]"


class ForestClient:
    def __init__(self, host: str | None, token: str | None, *, timeout: float = 30.0):
        if not host:
            raise ForestClientError("host_missing", "No Forest Host given: pass --host or set FOREST_HOST.")
        if not token:
            raise ForestClientError("token_missing", "No API token given: pass --token or set FOREST_TOKEN.")
        self.host = host.rstrip("/")
        self._http = httpx.Client(base_url=self.host + API, timeout=timeout,
                                  headers={"Authorization": f"Token {token}", "Accept": "application/json"})

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, **kwargs) -> Any:
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
                raise ForestClientError(body["code"], body.get("detail", ""), status=response.status_code,
                                        field=body.get("field"))
            raise ForestClientError("http_error", f"Host answered {response.status_code} to {method} {path}.",
                                    status=response.status_code)
        if body is None:
            raise ForestClientError("bad_response", f"Host's answer to {method} {path} is not JSON.")
        return body

    # compute
    def compute_submit(self, body: dict) -> dict:
        return self.request("POST", "/compute/jobs", json=body)

    def compute_get(self, job_id: str) -> dict:
        return self.request("GET", f"/compute/jobs/{job_id}")

    def compute_list(self) -> list[dict]:
        return self.request("GET", "/compute/jobs")

    def compute_cancel(self, job_id: str) -> dict:
        return self.request("POST", f"/compute/jobs/{job_id}/cancel")

    def compute_logs(self, job_id: str) -> list[dict]:
        return self.request("GET", f"/compute/jobs/{job_id}/logs")

    # staff reads (staff token, host.staff.execution_observability on)
    def groves_list(self, **filters) -> list[dict]:
        return self._all("/staff/groves", filters)

    def inventory(self) -> dict:
        return self.request("GET", "/staff/inventory")

    def placements_list(self, *, limit: int = 50, **filters) -> list[dict]:
        return self._all("/staff/placements", filters, limit=limit)

    def refusals(self, *, since: str | None = None, until: str | None = None) -> dict:
        return self.request("GET", "/staff/refusals", params=_params(since=since, until=until))

    def plan(self, body: dict) -> dict:
        return self.request("POST", "/plan", json=body)

    def _all(self, path: str, filters: dict, *, limit: int | None = None) -> list[dict]:
        """Follow page numbers until ``limit`` rows (or the end); pages are Host's bounded pages."""
        params = {**_params(**filters), "page_size": min(limit or 500, 500)}
        rows: list[dict] = []
        page = 1
        while True:
            body = self.request("GET", path, params={**params, "page": page})
            rows.extend(body["results"])
            if not body.get("next") or (limit is not None and len(rows) >= limit):
                return rows[:limit] if limit is not None else rows
            page += 1

    # runs
    def runs_list(self, **filters) -> list[dict]:
        params = {k: v for k, v in filters.items() if v}
        return self.request("GET", "/pipelines/runs", params=params)["results"]

    def run_get(self, run_id: str) -> dict:
        return self.request("GET", f"/pipelines/runs/{run_id}")

    def run_create(self, body: dict) -> dict:
        return self.request("POST", "/pipelines/runs", json=body)

    def run_cancel(self, run_id: str) -> dict:
        return self.request("POST", f"/pipelines/runs/{run_id}/cancel")

    # placements
    def placements_explain(self, subject: str, step: str | None = None) -> list[dict]:
        """The stored decisions behind ``subject``: a placement id (``17``), a compute job id (every step's, or
        ``step``'s), ``RUN_ID:NODE`` (a node of a run) or ``TYPE:ID`` (``pipeline_node:42``)."""
        subject = subject.strip()
        if subject.isdigit():
            return [self.request("GET", f"/placements/{subject}")]
        if _UUID.fullmatch(subject):
            job = self.compute_get(subject)
            steps = [s for s in job["steps"] if step is None or s["name"] == step]
            if not steps:
                raise ForestClientError("step_not_found", f"Compute job {subject} has no step '{step}'.")
            return [row for s in steps if (s.get("decision") or {}).get("id")
                    for row in [self.request("GET", f"/placements/{s['decision']['id']}")]]
        subject_type, subject_id = _subject(subject)
        if subject_type == "run":
            run_id, node_id = subject_id.split(":", 1)
            node = next((n for n in self.run_get(run_id)["nodes"] if n["id"] == node_id), None)
            if node is None:
                raise ForestClientError("node_not_found", f"Run {run_id} has no node '{node_id}'.")
            subject_type, subject_id = node["placement_subject"].split(":", 1)
        body = self.request("GET", "/placements", params={"subject_type": subject_type, "subject_id": subject_id})
        return body["results"] if isinstance(body, dict) and "results" in body else body


def _params(**values) -> dict:
    """Query parameters without the unset ones; booleans as Host's filters spell them."""
    return {k: ("true" if v else "false") if isinstance(v, bool) else v for k, v in values.items()
            if v is not None and v != ""}


_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _subject(subject: str) -> tuple[str, str]:
    head, sep, tail = subject.partition(":")
    if not sep or not tail:
        raise ForestClientError("invalid_subject", "Give a placement id (17), a compute job id [STEP], RUN_ID:NODE "
                                "or TYPE:ID (pipeline_node:42).")
    if _UUID.match(head):
        return "run", subject
    return head, tail
