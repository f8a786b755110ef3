"""A fake Kubernetes API server over real HTTP, for forest-controller's tests.

No Kubernetes API server can run on these machines, so this one stands in. The controller talks to it
with the **official `kubernetes` client** over a real socket (real serialisation, real watch
streaming), configured from a real kubeconfig file. What is real and what is faked, exactly:

* Real: HTTP/1.1, JSON bodies, chunked watch streams of `{"type", "object"}` lines, `labelSelector`
  (equality, `!=`, existence), `resourceVersion` / `timeoutSeconds` on watches, 404/409/410 Status
  bodies, `uid`, `resourceVersion`, `creationTimestamp`, `generation` stamping.
* Server-side apply (`application/apply-patch+yaml`) creates the object when missing and otherwise
  deep-merges the applied configuration (maps merged, lists replaced). **Faked: no managedFields, no
  field ownership or conflicts**; the `fieldManager` and `force` parameters are recorded for
  assertions. JSON merge patch (RFC 7386) is implemented.
* **No garbage collector.** Deleting a Job removes its Pods in the same call when
  `propagationPolicy` is `Background` or `Foreground` (what the collector would do later), and leaves
  them for `Orphan`; the policy is recorded.
* A minimal **Job controller** (one Pod per unsuspended Job, `backoffLimit: 0`; Pod Succeeded ->
  `Complete`, Pod Failed -> `Failed`/`BackoffLimitExceeded`) and **Deployment controller** (one Pod per
  generation; Running -> Available) run inside the fake.
* No scheduler, no kubelet: `Kubelet` (below) moves Pods through Pending -> Running ->
  Succeeded/Failed with an exit code, as a real kubelet would report it, or marks them
  unschedulable / ImagePullBackOff / OOMKilled. Its automatic mode **runs the container's command as
  a local subprocess** (the image is not pulled; nothing is isolated) so the log and exit code are real:
  the init containers first, one after another (the first failure ends the Pod), then the container;
  each volume is one directory shared by the Pod's containers, its `mountPath` rewritten to that
  directory in the command, the environment and the working directory (no mount namespace); an env
  `secretKeyRef` is read from the fake's Secret (`stringData` or base64 `data`). The "image" is this
  machine: this interpreter, its environment and the checkout (`IMAGE_PATHS`) are the image's own files,
  which no volume hides, so a checkout under `/tmp` is not mistaken for the Pod's `/tmp` volume.
* Create (POST, 409 `AlreadyExists`) and replace (PUT) with **optimistic concurrency**: a replace whose
  `metadata.resourceVersion` is not the stored one gets 409 `Conflict`, as leader election relies on.
* No admission (Pod Security, RuntimeClass existence, resource quotas) and no authentication.
"""

from __future__ import annotations

import base64
import bisect
import copy
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

Obj = dict[str, Any]

# (group path prefix, plural) -> kind
RESOURCES = {
    ("/api/v1", "pods"): "Pod",
    ("/api/v1", "nodes"): "Node",
    ("/api/v1", "namespaces"): "Namespace",
    ("/api/v1", "services"): "Service",
    ("/api/v1", "secrets"): "Secret",
    ("/apis/batch/v1", "jobs"): "Job",
    ("/apis/apps/v1", "deployments"): "Deployment",
    ("/apis/networking.k8s.io/v1", "networkpolicies"): "NetworkPolicy",
    ("/apis/coordination.k8s.io/v1", "leases"): "Lease",
}
API_VERSIONS = {
    "Pod": "v1",
    "Node": "v1",
    "Namespace": "v1",
    "Service": "v1",
    "Secret": "v1",
    "Job": "batch/v1",
    "Deployment": "apps/v1",
    "NetworkPolicy": "networking.k8s.io/v1",
    "Lease": "coordination.k8s.io/v1",
}
CLUSTER_SCOPED = {"Node", "Namespace"}


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def deep_merge(base: Any, patch: Any) -> Any:
    """RFC 7386: maps merge, null deletes, anything else replaces."""
    if not isinstance(patch, dict) or not isinstance(base, dict):
        return copy.deepcopy(patch)
    out = dict(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = deep_merge(base.get(key), value)
    return out


def selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    if not selector:
        return True
    for term in (t.strip() for t in selector.split(",")):
        if not term:
            continue
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "==" in term or "=" in term:
            key, value = re.split("==?", term, maxsplit=1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


@dataclass
class Event:
    rv: int
    type: str
    kind: str
    obj: Obj


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any = None
    auth: str = ""  # the Authorization header: tells apart clients that use different kubeconfigs


@dataclass
class FakeKube:
    objects: dict[tuple[str, str, str], Obj] = field(default_factory=dict)  # (kind, ns, name)
    events: list[Event] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)
    compacted_below: int = 0
    fail_next: dict[str, int] = field(default_factory=dict)  # "METHOD kind" -> HTTP status, once

    def __post_init__(self) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self._rv = itertools.count(1)
        self.rv = 0
        self.event_rvs: list[int] = []
        self.by_kind: dict[str, dict[tuple[str, str, str], Obj]] = {}  # the same objects, by kind
        self.by_label: dict[tuple[str, str, str], set[tuple[str, str, str]]] = {}  # (kind, key, value)
        self.pods_by_owner: dict[str, set[tuple[str, str, str]]] = {}  # owner uid -> its objects
        self._server: ThreadingHTTPServer | None = None

    # -- the store ------------------------------------------------------------------------------
    def _stamp(self, kind: str, obj: Obj, old: Obj | None) -> Obj:
        meta = obj.setdefault("metadata", {})
        obj["apiVersion"], obj["kind"] = API_VERSIONS[kind], kind
        if old is None:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_iso()
            meta["generation"] = 1
        else:
            meta["uid"] = old["metadata"]["uid"]
            meta["creationTimestamp"] = old["metadata"]["creationTimestamp"]
            changed = old.get("spec") != obj.get("spec")
            meta["generation"] = old["metadata"].get("generation", 1) + (1 if changed else 0)
        self.rv = next(self._rv)
        meta["resourceVersion"] = str(self.rv)
        return obj

    def _event(self, event: Event) -> None:
        self.events.append(event)
        self.event_rvs.append(event.rv)

    def events_after(self, cursor: int, kind: str) -> list[Event]:
        start = bisect.bisect_right(self.event_rvs, cursor)
        return [e for e in self.events[start:] if e.kind == kind]

    def put(self, kind: str, obj: Obj) -> Obj:
        """Create or replace (the controllers and the kubelet write through here)."""
        with self.lock:
            meta = obj["metadata"]
            key = (kind, "" if kind in CLUSTER_SCOPED else meta.get("namespace", "default"), meta["name"])
            old = self.objects.get(key)
            obj = self._stamp(kind, copy.deepcopy(obj), old)
            if old is not None:
                self._unindex(kind, key, old)
            self.objects[key] = obj
            self.by_kind.setdefault(kind, {})[key] = obj
            for label in (obj["metadata"].get("labels") or {}).items():
                self.by_label.setdefault((kind, *label), set()).add(key)
            for owner in obj["metadata"].get("ownerReferences") or []:
                self.pods_by_owner.setdefault(owner.get("uid"), set()).add(key)
            self._event(Event(self.rv, "ADDED" if old is None else "MODIFIED", kind, copy.deepcopy(obj)))
            self._control(kind, obj)
            self.changed.notify_all()
            return copy.deepcopy(obj)

    def remove(self, kind: str, namespace: str, name: str) -> Obj | None:
        with self.lock:
            obj = self.objects.pop((kind, namespace, name), None)
            self.by_kind.get(kind, {}).pop((kind, namespace, name), None)
            if obj is not None:
                self._unindex(kind, (kind, namespace, name), obj)
            if obj is not None:
                self.rv = next(self._rv)
                obj["metadata"]["resourceVersion"] = str(self.rv)
                self._event(Event(self.rv, "DELETED", kind, copy.deepcopy(obj)))
                self.changed.notify_all()
            return obj

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        with self.lock:
            obj = self.objects.get((kind, "" if kind in CLUSTER_SCOPED else namespace, name))
            return copy.deepcopy(obj) if obj else None

    def _unindex(self, kind: str, key: tuple[str, str, str], obj: Obj) -> None:
        for label in (obj["metadata"].get("labels") or {}).items():
            self.by_label.get((kind, *label), set()).discard(key)
        for owner in obj["metadata"].get("ownerReferences") or []:
            self.pods_by_owner.get(owner.get("uid"), set()).discard(key)

    def list(self, kind: str, selector: str | None = None) -> list[Obj]:
        with self.lock:
            candidates = self.by_kind.get(kind, {})
            first = (selector or "").split(",")[0]
            if "=" in first and "!=" not in first:
                # Narrow by the first equality term through the label index, then check them all.
                label_key, _, value = first.replace("==", "=").partition("=")
                keys = self.by_label.get((kind, label_key.strip(), value.strip()), set())
                candidates = {k: candidates[k] for k in keys if k in candidates}
            return [
                copy.deepcopy(o)
                for _, o in sorted(candidates.items())
                if selector_matches(selector, o["metadata"].get("labels") or {})
            ]

    def update(self, kind: str, namespace: str, name: str, mutate: Callable[[Obj], None]) -> Obj | None:
        with self.lock:
            obj = self.get(kind, namespace, name)
            if obj is None:
                return None
            mutate(obj)
            return self.put(kind, obj)

    def add_node(
        self,
        name: str,
        *,
        cpu: str = "4",
        memory: str = "16Gi",
        gpus: int = 0,
        labels: dict[str, str] | None = None,
        ready: bool = True,
        arch: str = "amd64",
    ) -> Obj:
        allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
        if gpus:
            allocatable["nvidia.com/gpu"] = str(gpus)
        return self.put(
            "Node",
            {
                "metadata": {
                    "name": name,
                    "labels": {
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": arch,
                        "kubernetes.io/hostname": name,
                        **(labels or {}),
                    },
                },
                "spec": {},
                "status": {
                    "allocatable": allocatable,
                    "capacity": dict(allocatable),
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                },
            },
        )

    # -- the fake control plane -----------------------------------------------------------------
    def _control(self, kind: str, obj: Obj) -> None:
        if kind == "Job":
            self._job_controller(obj)
        elif kind == "Pod":
            self._pod_changed(obj)
        elif kind == "Deployment":
            self._deployment_controller(obj)

    def _pods_of(self, owner_uid: str) -> list[Obj]:
        pods = self.by_kind.get("Pod", {})
        return [pods[key] for key in self.pods_by_owner.get(owner_uid, set()) if key in pods]

    def _new_pod(self, owner: Obj, extra_labels: dict[str, str]) -> None:
        meta = owner["metadata"]
        template = owner["spec"]["template"]
        pod = {
            "metadata": {
                "name": f"{meta['name']}-{uuid.uuid4().hex[:5]}",
                "namespace": meta["namespace"],
                "labels": {**(template.get("metadata", {}).get("labels") or {}), **extra_labels},
                "annotations": dict(template.get("metadata", {}).get("annotations") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": owner["apiVersion"],
                        "kind": owner["kind"],
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": copy.deepcopy(template["spec"]),
            "status": {"phase": "Pending", "conditions": []},
        }
        self.put("Pod", pod)

    def _job_controller(self, job: Obj) -> None:
        status = job.get("status") or {}
        if job["spec"].get("suspend") or status.get("conditions") or self._pods_of(job["metadata"]["uid"]):
            return
        meta = job["metadata"]
        self._new_pod(
            job,
            {
                "batch.kubernetes.io/job-name": meta["name"],
                "job-name": meta["name"],
                "batch.kubernetes.io/controller-uid": meta["uid"],
            },
        )

    def _deployment_controller(self, deployment: Obj) -> None:
        meta = deployment["metadata"]
        pods = self._pods_of(meta["uid"])
        generation = str(meta["generation"])
        if not any(p["metadata"]["labels"].get("fake/generation") == generation for p in pods):
            for pod in pods:
                self.remove("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"])
            self._new_pod(deployment, {"fake/generation": generation})

    def _pod_changed(self, pod: Obj) -> None:
        owner = next(iter(pod["metadata"].get("ownerReferences") or []), None)
        if owner is None:
            return
        namespace, phase = pod["metadata"]["namespace"], pod["status"].get("phase")
        if owner["kind"] == "Job":
            job = self.objects.get(("Job", namespace, owner["name"]))
            if job is None or (job.get("status") or {}).get("conditions"):
                return
            stamp = now_iso()
            if phase == "Succeeded":
                conditions = [
                    {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": stamp},
                    {"type": "Complete", "status": "True", "lastTransitionTime": stamp},
                ]
                self.update(
                    "Job",
                    namespace,
                    owner["name"],
                    lambda j: j.__setitem__(
                        "status", {"succeeded": 1, "conditions": conditions, "completionTime": stamp}
                    ),
                )
            elif phase == "Failed":
                reason = (
                    pod["status"].get("reason") == "DeadlineExceeded" and "DeadlineExceeded"
                ) or "BackoffLimitExceeded"
                conditions = [
                    {"type": "FailureTarget", "status": "True", "reason": reason},
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": reason,
                        "message": "Job has reached the specified backoff limit"
                        if reason == "BackoffLimitExceeded"
                        else "Job was active longer than specified deadline",
                        "lastTransitionTime": stamp,
                    },
                ]
                self.update(
                    "Job",
                    namespace,
                    owner["name"],
                    lambda j: j.__setitem__("status", {"failed": 1, "conditions": conditions}),
                )
            elif phase == "Running":
                self.update("Job", namespace, owner["name"], lambda j: j.__setitem__("status", {"active": 1}))
        elif owner["kind"] == "Deployment" and phase == "Running":

            def available(d: Obj) -> None:
                d["status"] = {
                    "observedGeneration": d["metadata"]["generation"],
                    "replicas": 1,
                    "updatedReplicas": 1,
                    "readyReplicas": 1,
                    "availableReplicas": 1,
                    "conditions": [
                        {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                        {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
                    ],
                }

            self.update("Deployment", namespace, owner["name"], available)

    def compact(self) -> None:
        """Forget event history (a real server's compaction): older watches get 410 Gone."""
        with self.lock:
            self.compacted_below = self.rv
            self.events.clear()
            self.event_rvs.clear()

    # -- HTTP -------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeKube:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def kubeconfig(self, directory: Path, token: str = "fake-token") -> Path:
        path = directory / "kubeconfig"
        directory.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "fake",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "fake", "user": {"token": token}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                }
            )
        )
        return path

    def requests_of(self, method: str, kind: str | None = None) -> list[Request]:
        plural = {v: k[1] for k, v in RESOURCES.items()}.get(kind or "", "")
        return [r for r in list(self.requests) if r.method == method and (not kind or f"/{plural}" in r.path)]


def _status(code: int, reason: str, message: str) -> Obj:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


def _route(path: str) -> tuple[str, str, str | None, str | None] | None:
    """(kind, namespace or '', name or None, subresource or None)."""
    for (prefix, plural), kind in RESOURCES.items():
        if not path.startswith(prefix + "/"):
            continue
        rest = path[len(prefix) + 1 :].split("/")
        if rest == [plural]:
            return kind, "", None, None
        if kind == "Namespace" and len(rest) == 2 and rest[0] == "namespaces":
            return kind, "", rest[1], None
        if kind in CLUSTER_SCOPED and len(rest) == 2 and rest[0] == plural:
            return kind, "", rest[1], None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] == plural:
            name = rest[3] if len(rest) > 3 else None
            sub = rest[4] if len(rest) > 4 else None
            return kind, rest[1], name, sub
    return None


def _handler(fake: FakeKube) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            return

        def _json(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            return json.loads(raw) if raw else None

        def _begin(self, method: str) -> tuple[Any, dict[str, str], Any] | None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            body = self._body() if method in ("PATCH", "POST", "PUT", "DELETE") else None
            fake.requests.append(
                Request(method, parts.path, query, self.headers.get("Content-Type", ""), body,
                        self.headers.get("Authorization", ""))
            )
            route = _route(parts.path)
            if route is None:
                self._json(404, _status(404, "NotFound", f"the server could not find {parts.path}"))
                return None
            status = fake.fail_next.pop(f"{method} {route[0]}", None)
            if status:
                self._json(status, _status(status, "InternalError", "injected failure"))
                return None
            return route, query, body

        def do_GET(self) -> None:
            begun = self._begin("GET")
            if begun is None:
                return
            (kind, namespace, name, sub), query, _ = begun
            if sub == "log":
                text = fake.logs.get((namespace, name or ""), "")
                lines = text.splitlines()[-int(query.get("tailLines", "1000000")) :]
                data = ("\n".join(lines) + ("\n" if lines else "")).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            if name is not None:
                obj = fake.get(kind, namespace, name)
                if obj is None:
                    self._json(404, _status(404, "NotFound", f'{kind.lower()}s "{name}" not found'))
                else:
                    self._json(200, obj)
                return
            selector = query.get("labelSelector")
            if query.get("watch") in ("true", "1"):
                self._watch(kind, namespace, selector, query)
                return
            with fake.lock:
                items = [
                    o
                    for o in fake.list(kind, selector)
                    if not namespace or o["metadata"].get("namespace") == namespace
                ]
                rv = str(fake.rv)
            self._json(
                200,
                {
                    "kind": f"{kind}List",
                    "apiVersion": API_VERSIONS[kind],
                    "metadata": {"resourceVersion": rv},
                    "items": items,
                },
            )

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _watch(self, kind: str, namespace: str, selector: str | None, query: dict[str, str]) -> None:
            since = int(query.get("resourceVersion") or 0)
            timeout = float(query.get("timeoutSeconds") or 1800)
            deadline = time.monotonic() + timeout
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                if since and since < fake.compacted_below:
                    line = {
                        "type": "ERROR",
                        "object": _status(410, "Expired", f"too old resource version: {since}"),
                    }
                    self._chunk(json.dumps(line).encode() + b"\n")
                    self._chunk(b"")
                    return
                cursor = since
                while True:
                    with fake.changed:
                        pending = fake.events_after(cursor, kind)
                        if not pending:
                            remaining = deadline - time.monotonic()
                            if remaining <= 0:
                                break
                            fake.changed.wait(min(remaining, 0.5))
                            continue
                    for event in pending:
                        cursor = max(cursor, event.rv)
                        meta = event.obj["metadata"]
                        if namespace and meta.get("namespace") != namespace:
                            continue
                        if not selector_matches(selector, meta.get("labels") or {}):
                            continue
                        self._chunk(json.dumps({"type": event.type, "object": event.obj}).encode() + b"\n")
                self._chunk(b"")
            except (BrokenPipeError, ConnectionResetError):
                return

        def do_PATCH(self) -> None:
            begun = self._begin("PATCH")
            if begun is None:
                return
            (kind, namespace, name, _), query, body = begun
            content_type = self.headers.get("Content-Type", "")
            existing = fake.get(kind, namespace, name or "")
            if content_type.startswith("application/apply-patch"):
                if not query.get("fieldManager"):
                    self._json(400, _status(400, "BadRequest", "fieldManager is required for apply patch"))
                    return
                if body.get("kind") != kind or body.get("metadata", {}).get("name") != name:
                    self._json(400, _status(400, "BadRequest", "the applied object does not match the URL"))
                    return
                merged = deep_merge(existing, body) if existing else body
                if kind not in CLUSTER_SCOPED:
                    merged["metadata"]["namespace"] = namespace
                self._json(201 if existing is None else 200, fake.put(kind, merged))
                return
            if existing is None:
                self._json(404, _status(404, "NotFound", f'{kind.lower()}s "{name}" not found'))
                return
            if content_type != "application/merge-patch+json":
                self._json(415, _status(415, "UnsupportedMediaType", f"the fake serves no {content_type}"))
                return
            self._json(200, fake.put(kind, deep_merge(existing, body)))

        def do_POST(self) -> None:
            begun = self._begin("POST")
            if begun is None:
                return
            (kind, namespace, name, _), _query, body = begun
            name = (body or {}).get("metadata", {}).get("name")
            if name is None or not isinstance(body, dict):
                self._json(422, _status(422, "Invalid", "metadata.name is required"))
                return
            with fake.lock:
                if fake.get(kind, namespace, name) is not None:
                    self._json(409, _status(409, "AlreadyExists", f'{kind.lower()}s "{name}" already exists'))
                    return
                if kind not in CLUSTER_SCOPED:
                    body["metadata"]["namespace"] = namespace
                body["metadata"].pop("resourceVersion", None)
                self._json(201, fake.put(kind, body))

        def do_PUT(self) -> None:
            begun = self._begin("PUT")
            if begun is None:
                return
            (kind, namespace, name, _), _query, body = begun
            if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
                self._json(422, _status(422, "Invalid", "a replace needs the whole object"))
                return
            with fake.lock:
                existing = fake.get(kind, namespace, name or "")
                if existing is None:
                    self._json(404, _status(404, "NotFound", f'{kind.lower()}s "{name}" not found'))
                    return
                sent = str((body or {}).get("metadata", {}).get("resourceVersion") or "")
                if sent and sent != existing["metadata"]["resourceVersion"]:
                    message = f"{kind.lower()}s \"{name}\": the object has been modified"
                    self._json(409, _status(409, "Conflict", message))
                    return
                if kind not in CLUSTER_SCOPED:
                    body["metadata"]["namespace"] = namespace
                self._json(200, fake.put(kind, body))

        def do_DELETE(self) -> None:
            begun = self._begin("DELETE")
            if begun is None:
                return
            (kind, namespace, name, _), query, body = begun
            policy = query.get("propagationPolicy") or (body or {}).get("propagationPolicy") or "Background"
            with fake.lock:
                obj = fake.remove(kind, namespace, name or "")
                if obj is None:
                    self._json(404, _status(404, "NotFound", f'{kind.lower()}s "{name}" not found'))
                    return
                if policy in ("Background", "Foreground"):
                    for pod in fake._pods_of(obj["metadata"]["uid"]):
                        fake.remove("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"])
            self._json(
                200,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Success",
                    "details": {"name": name, "kind": kind.lower() + "s", "uid": obj["metadata"]["uid"]},
                },
            )

    return Handler


# -- the test kubelet ---------------------------------------------------------------------------------
def _terminated_status(container: Obj, code: int, message: str) -> Obj:
    terminated: Obj = {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
    if message:
        terminated["message"] = message
    return {
        "name": container["name"],
        "ready": False,
        "restartCount": 0,
        "image": container.get("image", ""),
        "imageID": "",
        "state": {"terminated": terminated},
    }


# The image's own files: what a Pod's command may name by its host path (the interpreter, its packages, the
# checkout the agent is imported from). The longest prefix wins, as with real mounts: a volume mounted at
# `/tmp` hides the image's `/tmp`, not a checkout at `/tmp/forest` the image "contains".
IMAGE_PATHS: tuple[str, ...] = tuple(
    dict.fromkeys(
        path
        for root in (sys.prefix, sys.exec_prefix, sys.base_prefix, str(Path(__file__).resolve().parents[2]))
        for path in (root, os.path.realpath(root))
    )
)


def local_path(value: str, mounts: dict[str, Path], image_paths: tuple[str, ...] = IMAGE_PATHS) -> str:
    """`value` as this machine sees it: under the deepest mount or image path that contains it."""

    def under(prefix: str) -> bool:
        return value == prefix or value.startswith(prefix.rstrip("/") + "/")

    mount = max((m for m in mounts if under(m)), key=len, default=None)
    image = max((p for p in image_paths if under(p)), key=len, default="")
    if mount is None or len(image) > len(mount):
        return value
    return str(mounts[mount]) + value[len(mount) :]


class Kubelet:
    """Moves Pods through their phases the way a kubelet reports them. Manual steps for scenario tests;
    `auto()` starts a thread that schedules every new Pod on a node and runs its command locally."""

    def __init__(self, fake: FakeKube, node: str = "node-1") -> None:
        self.fake = fake
        self.node = node
        self._stop = threading.Event()
        self._started: set[str] = set()
        self.ran: list[dict[str, Any]] = []  # what auto mode ran: pod, argv, env, exit code
        # Extra environment for a pod run in auto mode (e.g. a recorded `nvidia-smi` first on PATH).
        self.extra_env: Callable[[Obj], dict[str, str]] = lambda pod: {}
        self.image_paths = IMAGE_PATHS

    def pods(self, selector: str | None = None) -> list[Obj]:
        return self.fake.list("Pod", selector)

    def wait_pod(self, selector: str, timeout: float = 15.0, what: str = "a pod") -> Obj:
        deadline = time.monotonic() + timeout
        with self.fake.changed:
            while time.monotonic() < deadline:
                pods = self.fake.list("Pod", selector)
                if pods:
                    return pods[0]
                self.fake.changed.wait(0.2)
        raise AssertionError(f"timed out waiting for {what} ({selector})")

    def _set(self, pod: Obj, status: Obj, *, node: str | None = None) -> Obj | None:
        meta = pod["metadata"]

        def mutate(p: Obj) -> None:
            if node:
                p["spec"]["nodeName"] = node
            p["status"] = status

        return self.fake.update("Pod", meta["namespace"], meta["name"], mutate)

    def running(self, pod: Obj) -> Obj | None:
        started = now_iso()
        return self._set(
            pod,
            {
                "phase": "Running",
                "startTime": started,
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True"},
                ],
                "containerStatuses": [
                    {
                        "name": c["name"],
                        "ready": True,
                        "restartCount": 0,
                        "image": c.get("image", ""),
                        "imageID": "",
                        "state": {"running": {"startedAt": started}},
                    }
                    for c in pod["spec"]["containers"]
                ],
            },
            node=self.node,
        )

    def exit(
        self,
        pod: Obj,
        code: int,
        *,
        reason: str | None = None,
        log: str = "",
        message: str = "",
        init_statuses: list[Obj] | None = None,
    ) -> Obj | None:
        meta = pod["metadata"]
        if log:
            self.fake.logs[(meta["namespace"], meta["name"])] = log
        terminated = {
            "exitCode": code,
            "reason": reason or ("Completed" if code == 0 else "Error"),
            "startedAt": now_iso(),
            "finishedAt": now_iso(),
        }
        if message:
            terminated["message"] = message
        return self._set(
            pod,
            {
                "phase": "Succeeded" if code == 0 else "Failed",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "False"},
                ],
                "containerStatuses": [
                    {
                        "name": c["name"],
                        "ready": False,
                        "restartCount": 0,
                        "image": c.get("image", ""),
                        "imageID": "",
                        "state": {"terminated": terminated},
                    }
                    for c in pod["spec"]["containers"]
                ],
                **({"initContainerStatuses": init_statuses} if init_statuses else {}),
            },
            node=self.node,
        )

    def unschedulable(self, pod: Obj, message: str) -> Obj | None:
        return self._set(
            pod,
            {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
                ],
            },
        )

    def image_pull_backoff(self, pod: Obj) -> Obj | None:
        return self._set(
            pod,
            {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [
                    {
                        "name": c["name"],
                        "ready": False,
                        "restartCount": 0,
                        "image": c.get("image", ""),
                        "imageID": "",
                        "state": {
                            "waiting": {
                                "reason": "ImagePullBackOff",
                                "message": f'Back-off pulling image "{c.get("image")}"',
                            }
                        },
                    }
                    for c in pod["spec"]["containers"]
                ],
            },
            node=self.node,
        )

    # -- automatic mode: run what the pod asks, locally -------------------------------------------
    def auto(self, *, run_commands: bool = True) -> Kubelet:
        """Schedule and run every new Pod; without `run_commands` each exits 0 at once (benchmarks)."""
        self.run_commands = run_commands
        threading.Thread(target=self._loop, name="fake-kubelet", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        cursor: int | None = None  # the first pass looks at every Pod, later ones only at new ones
        while not self._stop.is_set():
            with self.fake.changed:
                if cursor is None:
                    candidates = self.fake.list("Pod")
                else:
                    added = [
                        e.obj["metadata"] for e in self.fake.events_after(cursor, "Pod") if e.type == "ADDED"
                    ]
                    candidates = [p for m in added if (p := self.fake.get("Pod", m["namespace"], m["name"]))]
                cursor = self.fake.rv
                fresh = [
                    p
                    for p in candidates
                    if p["metadata"]["uid"] not in self._started and p["status"].get("phase") == "Pending"
                ]
                if not fresh:
                    self.fake.changed.wait(0.2)
                    continue
            for pod in fresh:
                self._started.add(pod["metadata"]["uid"])
                if not getattr(self, "run_commands", True):
                    running = self.running(pod)
                    if running is not None:
                        self.exit(running, 0)
                    continue
                threading.Thread(target=self._run_pod, args=(pod,), daemon=True).start()

    def _run_pod(self, pod: Obj) -> None:
        container = pod["spec"]["containers"][0]
        argv = container.get("command") or ["true"]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            **{e["name"]: e.get("value", "") for e in container.get("env") or []},
        }
        if self.running(pod) is None:
            return
        owner = next(iter(pod["metadata"].get("ownerReferences") or []), {})
        if owner.get("kind") == "Deployment":
            self.ran.append(
                {
                    "pod": pod["metadata"]["name"],
                    "argv": argv,
                    "env": env,
                    "exit_code": None,
                    "spec": pod["spec"],
                }
            )
            return  # a server keeps running; its Deployment is Available once the Pod is Running
        with tempfile.TemporaryDirectory() as scratch:
            volumes = {}
            for volume in pod["spec"].get("volumes") or []:
                volumes[volume["name"]] = Path(scratch) / "volumes" / volume["name"]
                volumes[volume["name"]].mkdir(parents=True)
            init_statuses: list[Obj] = []
            for init in pod["spec"].get("initContainers") or []:
                code, output, message, env = self._run_container(pod, init, volumes, scratch)
                init_statuses.append(_terminated_status(init, code, message))
                if code != 0:
                    break
            else:
                code, output, message, env = self._run_container(pod, container, volumes, scratch)
        self.ran.append(
            {"pod": pod["metadata"]["name"], "argv": argv, "env": env, "exit_code": code, "spec": pod["spec"]}
        )
        if init_statuses and init_statuses[-1]["state"]["terminated"]["exitCode"] != 0:
            # A failed init container: the app container never started (Kubernetes reports it waiting).
            self.exit(pod, code, log=output, init_statuses=init_statuses)
            return
        self.exit(pod, code, log=output, message=message, init_statuses=init_statuses)

    def _run_container(
        self, pod: Obj, container: Obj, volumes: dict[str, Path], scratch: str
    ) -> tuple[int, str, str, dict[str, str]]:
        """Run one container's command locally; (exit code, output, termination message, environment)."""
        mounts = {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts") or []}

        def local(value: str) -> str:
            return local_path(value, mounts, self.image_paths)

        # The container's termination message file, as the kubelet would mount it.
        termination_log = Path(tempfile.mkdtemp(dir=scratch)) / "termination-log"
        termination_log.touch()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        for item in container.get("env") or []:
            if "valueFrom" in item:
                env[item["name"]] = self._secret_value(pod, item["valueFrom"]["secretKeyRef"])
            else:
                env[item["name"]] = item.get("value", "")
        env = {
            k: str(termination_log) if v == container.get("terminationMessagePath") else local(v)
            for k, v in env.items()
        }
        env.update(self.extra_env(pod))
        argv = [local(arg) for arg in container.get("command") or ["true"]]
        cwd = local(container.get("workingDir") or "") or scratch
        try:
            done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
            code, output = done.returncode, done.stdout + done.stderr
        except (OSError, subprocess.TimeoutExpired) as exc:
            code, output = 127, str(exc)
        message = termination_log.read_text()[:4096]
        if not message.strip() and code != 0:  # FallbackToLogsOnError
            message = "\n".join(output.splitlines()[-80:])
        return code, output, message, env

    def _secret_value(self, pod: Obj, ref: Obj) -> str:
        secret = self.fake.get("Secret", pod["metadata"]["namespace"], ref["name"]) or {}
        if ref["key"] in (secret.get("stringData") or {}):
            return secret["stringData"][ref["key"]]
        return base64.b64decode((secret.get("data") or {}).get(ref["key"], "")).decode()
