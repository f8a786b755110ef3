"""HTTP client for `/api/forest/v1/`: enroll, heartbeat, changes long-poll, job claim/report,
workload status. Field names follow docs/wire.md exactly.

Errors become `WireError` with Host's stable `code` when Host sent one; `retryable` tells the loops
whether to back off and try again (Host down, 5xx) or stop (revoked credential, wrong Grove).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx

API_PATH = "/api/forest/v1/"
# Host caps long-polls at 30 s (docs/wire.md); the HTTP read timeout must outlast the wait.
MAX_WAIT_S = 30
_POLL_TIMEOUT_MARGIN_S = 15.0


def api_base_url(host_url: str) -> str:
    """Accept either the site root (`http://host:8000`) or the API root; return the API root."""
    parts = urlsplit(host_url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"Host URL must look like http(s)://host[:port], got {host_url!r}")
    path = parts.path.rstrip("/")
    if not path.endswith(API_PATH.rstrip("/")):
        path = path + API_PATH.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{path}/"


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header in its delay form; None when absent or a date (Host sends
    seconds) or nonsense. Capped so a wrong header cannot park an executor for long."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return min(max(seconds, 0.0), 300.0) if seconds == seconds else None


class WireError(Exception):
    def __init__(
        self,
        code: str,
        detail: str,
        *,
        status: int | None = None,
        field: str | None = None,
        retryable: bool = False,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.status = status
        self.field = field
        self.retryable = retryable
        # Host's Retry-After (a 503 for a lost database or broker, a 429): the earliest sensible retry.
        self.retry_after_s = retry_after_s


class WireClient:
    def __init__(
        self,
        host_url: str,
        *,
        credential: str | None = None,
        grove_id: str | None = None,
        timeout_s: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = api_base_url(host_url)
        self.grove_id = grove_id
        headers = {"Accept": "application/json", "User-Agent": "forest-agent"}
        if credential:
            headers["Authorization"] = f"Bearer {credential}"
        self._timeout_s = timeout_s
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=timeout_s,
            transport=transport,
            follow_redirects=False,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def same_origin(self, url: str) -> bool:
        """True when `url` is served by this Host; only then may the credential travel with it."""
        mine, other = urlsplit(self.base_url), urlsplit(url)
        return (mine.scheme, mine.netloc) == (other.scheme, other.netloc)

    def auth_headers(self) -> dict[str, str]:
        auth = self._http.headers.get("Authorization")
        return {"Authorization": auth} if auth else {}

    # -- calls ---------------------------------------------------------------------------------
    def enroll(
        self, *, token: str, name: str, platforms: list[str], version: str, substrate: str = "native"
    ) -> dict[str, Any]:
        body = {
            "token": token,
            "name": name,
            "substrate": substrate,
            "platforms": platforms,
            "version": version,
        }
        data = self._request("POST", "groves/enroll", json=body, expect=(201, 200))
        for key in ("grove_id", "credential"):
            if not isinstance(data.get(key), str) or not data[key]:
                raise WireError("bad_response", f"enrollment response lacks {key!r}")
        return data

    def heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", f"groves/{self._grove()}/heartbeat", json=body)

    def changes(self, *, wait_s: int) -> dict[str, Any]:
        wait_s = max(0, min(MAX_WAIT_S, int(wait_s)))
        return self._request(
            "GET",
            f"groves/{self._grove()}/changes",
            params={"wait": wait_s},
            timeout=wait_s + _POLL_TIMEOUT_MARGIN_S,
        )

    def claim(self, job_id: str) -> dict[str, Any]:
        job = self._request("POST", f"groves/{self._grove()}/jobs/{job_id}/claim", json={}).get("job")
        if not isinstance(job, dict):
            raise WireError("bad_response", "claim response lacks 'job'")
        return job

    def data_token(self, job_id: str) -> dict[str, Any]:
        """A short-lived token for a claimed job's step data (`Authorization: Job <token>`)."""
        return self._request("POST", f"groves/{self._grove()}/jobs/{job_id}/data-token", json={})

    def report(self, job_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", f"groves/{self._grove()}/jobs/{job_id}/report", json=body)

    def workload_status(self, generation_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", f"groves/{self._grove()}/workloads/{generation_id}/status", json=body)

    # -- plumbing ------------------------------------------------------------------------------
    def _grove(self) -> str:
        if not self.grove_id:
            raise WireError("not_enrolled", "this client has no Grove id; enroll first")
        return self.grove_id

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
        expect: tuple[int, ...] = (200,),
    ) -> dict[str, Any]:
        try:
            response = self._http.request(
                method,
                path,
                json=json,
                params=params,
                timeout=timeout if timeout is not None else self._timeout_s,
            )
        except httpx.TimeoutException as exc:
            raise WireError(
                "host_timeout", f"Host did not answer {method} {path} in time", retryable=True
            ) from exc
        except httpx.TransportError as exc:
            raise WireError(
                "host_unreachable", f"cannot reach Host at {self.base_url}: {exc}", retryable=True
            ) from exc
        if response.status_code in expect:
            try:
                data = response.json()
            except ValueError as exc:
                raise WireError(
                    "bad_response",
                    f"Host sent non-JSON for {method} {path}",
                    status=response.status_code,
                    retryable=True,
                ) from exc
            if not isinstance(data, dict):
                raise WireError(
                    "bad_response",
                    f"Host sent a non-object for {method} {path}",
                    status=response.status_code,
                    retryable=True,
                )
            return data
        raise self._error(method, path, response)

    @staticmethod
    def _error(method: str, path: str, response: httpx.Response) -> WireError:
        status = response.status_code
        code, detail, field = f"http_{status}", f"Host answered {status} to {method} {path}", None
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and isinstance(body.get("code"), str):
            code = body["code"]
            detail = str(body.get("detail") or detail)
            field = body.get("field") if isinstance(body.get("field"), str) else None
        # 5xx and throttling are Host's trouble and pass; 4xx are answers about us and do not.
        retryable = status >= 500 or status == 429
        return WireError(code, detail, status=status, field=field, retryable=retryable,
                         retry_after_s=retry_after_seconds(response.headers.get("Retry-After")))
