"""The controller's Grove identity kept in a Secret, for `forest-controller run --identity-secret NAME`.

In a cluster the controller has no disk that outlives its Pod and may run as several replicas, so the
identity Host issues at enrollment (Grove id, credential) lives in a Secret the Helm chart creates
**empty**; the controller may only `get` and `patch` that one name (RBAC `resourceNames`). The leader
enrolls once, with the one-time token the chart mounts from the enrollment Secret, and writes the
identity; every later leader reads it. The token itself is never written anywhere else.
"""

from __future__ import annotations

import base64
from typing import Any

from kubernetes import client

from forest_agent.kube.cluster import ClusterError, api_call
from forest_agent.state import Identity

FIELDS = ("grove_id", "credential", "host_url", "name")


def _decode(data: dict[str, Any], key: str) -> str:
    raw = data.get(key)
    return base64.b64decode(raw).decode() if raw else ""


class SecretIdentity:
    def __init__(self, *, api_client: client.ApiClient, name: str, namespace: str) -> None:
        self.name, self.namespace = name, namespace
        self._api = client.CoreV1Api(api_client)

    def load(self) -> Identity | None:
        """The stored identity, or None while the Secret is still empty (not enrolled yet)."""
        secret = api_call(
            f"read Secret {self.name}", self._api.read_namespaced_secret, self.name, self.namespace
        )
        data = secret.get("data") or {}
        values = {key: _decode(data, key) for key in FIELDS}
        if not values["grove_id"] or not values["credential"]:
            return None
        return Identity(**values)

    def save(self, identity: Identity) -> None:
        """Merge-patch the identity into the Secret (data only: the chart owns its labels)."""
        data = {key: base64.b64encode(getattr(identity, key).encode()).decode() for key in FIELDS}
        try:
            api_call(f"patch Secret {self.name}", self._api.patch_namespaced_secret, self.name,
                     self.namespace, {"data": data}, _content_type="application/merge-patch+json")
        except ClusterError as exc:
            raise ClusterError(f"{exc.message} (the identity could not be stored: enroll again with a new "
                               "token once this is fixed)", status=exc.status, reason=exc.reason) from None
