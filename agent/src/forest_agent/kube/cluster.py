"""The controller's only door to Kubernetes: the official `kubernetes` client, used for
server-side apply (with a field manager, `force` so this controller owns what it renders), list,
watch, delete with propagation, and pod logs.

Responses are read as raw JSON (`_preload_content=False`): the controller works on the same
camelCase dicts the renderer produces and the status translation reads, and skips building client
model objects it would only turn back into dicts. Every watch carries a **server** timeout
(`timeout_seconds`) and a **client** read timeout (`_request_timeout`) a little longer, so a silent
connection can never hang a watch thread.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from forest_agent.errors import AgentError
from forest_agent.kube import names

log = logging.getLogger(__name__)

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
CONNECT_TIMEOUT_S = 5.0

Obj = dict[str, Any]


class ClusterError(AgentError):
    """The API server refused or could not be reached; `status` is the HTTP status when there was one."""

    code = "kubernetes_api_error"

    def __init__(self, message: str, *, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason

    @property
    def retryable(self) -> bool:
        return self.status is None or self.status >= 500 or self.status == 429

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def gone(self) -> bool:
        return self.status == 410


def api_client_from(
    *, kubeconfig: str | None = None, context: str | None = None, in_cluster: bool | None = None
) -> client.ApiClient:
    """In-cluster config when asked (or when no kubeconfig is given and we run in a Pod), else the
    kubeconfig file (`--kubeconfig`, $KUBECONFIG, ~/.kube/config)."""
    try:
        if in_cluster or (in_cluster is None and kubeconfig is None and _in_cluster()):
            config.load_incluster_config()
            return client.ApiClient()
        configuration = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
        return client.ApiClient(configuration)
    except (config.ConfigException, OSError) as exc:
        raise ClusterError(f"cannot load Kubernetes configuration: {exc}") from None


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def _raw(response: Any) -> Obj:
    try:
        obj: Obj = json.loads(response.data or b"{}")
        return obj
    finally:
        response.release_conn()


def _call(what: str, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
    try:
        return _raw(func(*args, _preload_content=False, **kwargs))
    except ApiException as exc:
        detail = exc.reason or ""
        try:
            body = json.loads(exc.body or "{}")
            detail = body.get("message") or detail
            reason = body.get("reason") or ""
        except (ValueError, TypeError, AttributeError):
            reason = ""
        raise ClusterError(f"{what}: {exc.status} {detail}", status=exc.status, reason=reason) from None
    except Exception as exc:  # urllib3 connection errors, timeouts
        raise ClusterError(f"{what}: {type(exc).__name__}: {exc}") from None


# The same door for callers outside this module (leader election, the identity Secret).
api_call = _call


@dataclass(frozen=True)
class Kind:
    """How to reach one resource kind through the typed client."""

    api: str
    plural: str
    namespaced: bool = True


KINDS: dict[str, Kind] = {
    "Job": Kind("BatchV1Api", "job"),
    "Deployment": Kind("AppsV1Api", "deployment"),
    "Service": Kind("CoreV1Api", "service"),
    "Secret": Kind("CoreV1Api", "secret"),  # a job's data token, owned by its Job
    "NetworkPolicy": Kind("NetworkingV1Api", "network_policy"),
    "Namespace": Kind("CoreV1Api", "namespace", namespaced=False),
    "Pod": Kind("CoreV1Api", "pod"),
    "Node": Kind("CoreV1Api", "node", namespaced=False),
}


class Cluster:
    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        field_manager: str = names.FIELD_MANAGER,
        request_timeout_s: float = 30.0,
    ) -> None:
        self.api_client = api_client
        self.field_manager = field_manager
        self.request_timeout = (CONNECT_TIMEOUT_S, request_timeout_s)
        self._apis: dict[str, Any] = {}

    def _api(self, kind: str) -> tuple[Any, Kind]:
        spec = KINDS[kind]
        if spec.api not in self._apis:
            self._apis[spec.api] = getattr(client, spec.api)(self.api_client)
        return self._apis[spec.api], spec

    def _method(
        self, verb: str, kind: str, *, all_namespaces: bool = False
    ) -> tuple[Callable[..., Any], Kind]:
        api, spec = self._api(kind)
        if all_namespaces:
            return getattr(api, f"{verb}_{spec.plural}_for_all_namespaces"), spec
        scope = "namespaced_" if spec.namespaced else ""
        return getattr(api, f"{verb}_{scope}{spec.plural}"), spec

    # -- writes -------------------------------------------------------------------------------
    def apply(self, obj: Obj) -> Obj:
        """Server-side apply: create or update, owned by our field manager; conflicts are forced
        because this controller is the only author of what it renders."""
        kind, meta = obj["kind"], obj["metadata"]
        method, spec = self._method("patch", kind)
        args = (meta["name"], meta["namespace"]) if spec.namespaced else (meta["name"],)
        return _call(
            f"apply {kind} {meta['name']}",
            method,
            *args,
            body=obj,
            field_manager=self.field_manager,
            force=True,
            _content_type=APPLY,
            _request_timeout=self.request_timeout,
        )

    def merge_patch(self, kind: str, name: str, namespace: str, body: Obj) -> Obj:
        """A JSON merge patch of fields the controller flips after applying (suspend, the reported
        mark); applying them would make them part of the rendered intent."""
        method, _ = self._method("patch", kind)
        return _call(
            f"patch {kind} {name}",
            method,
            name,
            namespace,
            body=body,
            _content_type=MERGE,
            _request_timeout=self.request_timeout,
        )

    def delete(self, kind: str, name: str, namespace: str, *, propagation: str = "Background") -> bool:
        """Delete with propagation (the Job's Pods go with it). False when it was already gone."""
        method, _ = self._method("delete", kind)
        try:
            _call(
                f"delete {kind} {name}",
                method,
                name,
                namespace,
                propagation_policy=propagation,
                _request_timeout=self.request_timeout,
            )
        except ClusterError as exc:
            if exc.not_found:
                return False
            raise
        return True

    # -- reads --------------------------------------------------------------------------------
    def get(self, kind: str, name: str, namespace: str) -> Obj | None:
        method, _ = self._method("read", kind)
        try:
            return _call(
                f"read {kind} {name}", method, name, namespace, _request_timeout=self.request_timeout
            )
        except ClusterError as exc:
            if exc.not_found:
                return None
            raise

    def list(
        self, kind: str, *, label_selector: str | None = None, namespace: str | None = None
    ) -> tuple[list[Obj], str]:
        """All objects of a kind (every namespace, or only `namespace`: what a namespaced Role may list)
        and the list's resourceVersion to watch from."""
        spec = KINDS[kind]
        method, _ = self._method("list", kind, all_namespaces=spec.namespaced and namespace is None)
        kwargs: dict[str, Any] = {"_request_timeout": self.request_timeout}
        if label_selector:
            kwargs["label_selector"] = label_selector
        args = (namespace,) if namespace is not None and spec.namespaced else ()
        data = _call(f"list {kind}", method, *args, **kwargs)
        return list(data.get("items") or []), str((data.get("metadata") or {}).get("resourceVersion") or "")

    def watch(
        self,
        kind: str,
        *,
        label_selector: str | None,
        resource_version: str,
        timeout_s: int,
        stopper: Callable[[], bool],
        namespace: str | None = None,
    ) -> Iterator[tuple[str, Obj]]:
        """Events after `resource_version` until the server ends the watch (`timeout_s`) or `stopper()`.
        A 410 Gone (history compacted) raises ClusterError with `gone` so the caller re-lists."""
        spec = KINDS[kind]
        method, _ = self._method("list", kind, all_namespaces=spec.namespaced and namespace is None)
        args = (namespace,) if namespace is not None and spec.namespaced else ()
        kwargs: dict[str, Any] = {
            "timeout_seconds": timeout_s,
            "_request_timeout": (CONNECT_TIMEOUT_S, timeout_s + 10),
            "resource_version": resource_version,
            "allow_watch_bookmarks": True,
            "deserialize": False,
        }
        if label_selector:
            kwargs["label_selector"] = label_selector
        w = watch.Watch()
        try:
            for event in w.stream(method, *args, **kwargs):
                if stopper():
                    w.stop()
                    return
                kind_of_event = event.get("type")
                obj = event.get("object") or event.get("raw_object") or {}
                if kind_of_event == "ERROR":
                    code = obj.get("code")
                    raise ClusterError(
                        f"watch {kind}: {obj.get('message', '')}", status=code, reason=obj.get("reason", "")
                    )
                yield kind_of_event, obj
        except ApiException as exc:
            raise ClusterError(f"watch {kind}: {exc.status} {exc.reason}", status=exc.status) from None
        except ClusterError:
            raise
        except KeyError as exc:
            if exc.args != ("raw_object",):
                raise
            # kubernetes 37's Watch reads `raw_object` of an ERROR event, which only exists when it
            # deserializes; with `deserialize=False` an ERROR event (410 Gone after compaction, or any
            # other) surfaces as this KeyError. Either way the answer is the same: list again.
            raise ClusterError(
                f"watch {kind}: the server ended the watch with an error event", status=410, reason="Expired"
            ) from None
        except Exception as exc:  # read timeout, connection reset: the caller re-lists
            raise ClusterError(f"watch {kind}: {type(exc).__name__}: {exc}") from None
        finally:
            w.stop()

    # builtins: in this class `list` names the method above
    def pod_log_tail(self, name: str, namespace: str, *, lines: int) -> builtins.list[str]:
        api, _ = self._api("Pod")
        try:
            response = api.read_namespaced_pod_log(
                name,
                namespace,
                tail_lines=lines,
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )
            try:
                text = (response.data or b"").decode("utf-8", "replace")
            finally:
                response.release_conn()
        except Exception as exc:  # logs are best effort: a report never waits on them
            log.info("no log for pod %s/%s: %s", namespace, name, exc)
            return []
        return text.splitlines()[-lines:]
