"""Grove jobs -> Kubernetes objects, as plain JSON-ready dicts. Pure: no client, no I/O.

* `k8s.job` / `k8s.build_job` -> one `batch/v1` Job (one Pod, `backoffLimit: 0`: Host owns retries,
  each attempt is a new Job named from job id + attempt).
* `k8s.deployment` -> `apps/v1` Deployment (+ a Service when the payload names ports; ConfigMap and
  Secret *references* through `envFrom`; their contents are not Forest's to write).
* untrusted work -> also its own Namespace labelled for the **restricted** Pod Security profile and a
  deny-all NetworkPolicy selecting the network-isolation label; no service-account token.
* step data -> an init container `fetch-inputs` (`python -m forest_agent.data fetch`) that streams each
  blob input into the `/workspace` emptyDir, digest-verified, read-only; with outputs, the step itself
  becomes the next init container and the pod's one container is `upload-outputs` (`... upload`), so it
  runs only after the step succeeded (init containers run in order; a failed step stops the pod: a
  failed or timed-out step uploads nothing). Both authenticate with the job's short-lived data token from
  the Secret `<job>-data` (`render_data_secret`), never the Grove's credential.
* NVIDIA work -> `nvidia.com/gpu` limits, `runtimeClassName`, node affinity on GPU Feature Discovery
  labels (`nvidia.com/gpu.present`, `gpu.product`, `gpu.memory` > minimum-1 MiB as `Gt`), GPU taint
  tolerations. Nothing of this on a job without accelerators.

Every pod runs non-root, without privilege escalation, all capabilities dropped, RuntimeDefault
seccomp and a read-only root file system with writable `emptyDir`s at /tmp and /workspace.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forest_agent import data
from forest_agent.kube import names
from forest_agent.kube.spec import DEPLOYMENT_KIND, JobSpec
from forest_agent.outputs import NEEDS_OUTPUTS_ENV, OUTPUTS_FILE_ENV

GPU_RESOURCE = "nvidia.com/gpu"
GFD_PRESENT = "nvidia.com/gpu.present"
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_MEMORY = "nvidia.com/gpu.memory"  # MiB
NONROOT_UID = 65532  # the conventional "nonroot" user of distroless images
WORKSPACE = "/workspace"
CONTAINER_NAME = "step"
FETCH_CONTAINER = "fetch-inputs"
UPLOAD_CONTAINER = "upload-outputs"
DATA_TOKEN_KEY = "token"
DATA_RESOURCES = {"cpu": "250m", "memory": "256Mi"}
# Outputs travel as the container's termination message: Kubernetes returns it in the Pod status.
TERMINATION_LOG = "/dev/termination-log"

Obj = dict[str, Any]


@dataclass(frozen=True)
class RenderConfig:
    grove_id: str
    namespace: str = "forest"
    untrusted_namespace: str = "forest-untrusted"
    runtime_class: str = "nvidia"
    gpu_taint_keys: tuple[str, ...] = (GPU_RESOURCE,)
    finished_ttl_s: int = 86400
    # Step data: the image with `forest_agent` (the controller's own), how to run it, and Host's API URL.
    data_image: str = "ghcr.io/forest/forest-controller:latest"
    data_command: tuple[str, ...] = ("python", "-m", "forest_agent.data")
    data_url: str = ""


def _labels(spec: JobSpec, config: RenderConfig) -> dict[str, str]:
    labels = {
        names.MANAGED_BY: names.CONTROLLER,
        names.LABEL_GROVE: config.grove_id,
        names.LABEL_JOB_ID: spec.job_id,
        names.LABEL_RUN_ID: spec.run_id,
        names.LABEL_ATTEMPT: str(spec.attempt),
        names.LABEL_CHANGE_KIND: spec.change_kind,
        names.LABEL_TRUST: spec.trust,
    }
    if spec.untrusted:
        labels[names.LABEL_ISOLATION] = "deny-all"
    return labels


def _annotations(spec: JobSpec) -> dict[str, str]:
    return {
        names.ANNOTATION_NODE: spec.node,
        names.ANNOTATION_IDEMPOTENCY_KEY: spec.idempotency_key,
        names.ANNOTATION_GENERATION: str(spec.attempt),
    }


def namespace_for(spec: JobSpec, config: RenderConfig) -> str:
    return config.untrusted_namespace if spec.untrusted else config.namespace


def _resources(spec: JobSpec) -> Obj:
    amounts = {"cpu": f"{spec.cpu_milli}m", "memory": str(spec.memory_bytes)}
    limits = dict(amounts)
    if spec.gpu is not None:
        # Extended resources are limits-only (the request defaults to the limit).
        limits[GPU_RESOURCE] = str(spec.gpu.count)
    return {"requests": amounts, "limits": limits}


def _gpu_affinity(spec: JobSpec) -> Obj:
    assert spec.gpu is not None
    expressions: list[Obj] = [{"key": GFD_PRESENT, "operator": "In", "values": ["true"]}]
    if spec.gpu.product:
        expressions.append({"key": GFD_PRODUCT, "operator": "In", "values": [spec.gpu.product]})
    if spec.gpu.min_memory_mib is not None:
        # `Gt` is strict; "at least N MiB" is "greater than N-1".
        expressions.append(
            {"key": GFD_MEMORY, "operator": "Gt", "values": [str(spec.gpu.min_memory_mib - 1)]}
        )
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    }


def _env(spec: JobSpec) -> list[Obj]:
    """The payload's env, then Forest's own (set last: a payload cannot redirect them)."""
    env = {k: v for k, v in spec.env if k not in (OUTPUTS_FILE_ENV, NEEDS_OUTPUTS_ENV)}
    if spec.change_kind != DEPLOYMENT_KIND:
        env[OUTPUTS_FILE_ENV] = TERMINATION_LOG
    if spec.needs_outputs:
        env[NEEDS_OUTPUTS_ENV] = spec.needs_outputs
    env.update(data.data_env(spec.inputs, spec.outputs, Path(WORKSPACE)))
    return [{"name": k, "value": v} for k, v in env.items()]


def data_secret_name(spec: JobSpec) -> str:
    return f"{spec.object_name}-data"


def _restricted() -> Obj:
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }


def _data_container(spec: JobSpec, config: RenderConfig, *, name: str, action: str) -> Obj:
    """A data container: the same restricted pod, the workspace, the job's token from its Secret."""
    return {
        "name": name,
        "image": config.data_image,
        "command": [*config.data_command, action, "--root", WORKSPACE],
        "env": [
            {"name": "FOREST_DATA_URL", "value": config.data_url},
            {"name": "FOREST_DATA_MANIFEST", "value": spec.data_manifest},
            {"name": "FOREST_DATA_MESSAGE_FILE", "value": TERMINATION_LOG},
            {
                "name": "FOREST_DATA_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": data_secret_name(spec), "key": DATA_TOKEN_KEY}},
            },
        ],
        "resources": {"requests": dict(DATA_RESOURCES), "limits": dict(DATA_RESOURCES)},
        "securityContext": _restricted(),
        "volumeMounts": [
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "workspace", "mountPath": WORKSPACE},
        ],
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def render_data_secret(spec: JobSpec, config: RenderConfig, *, token: str, owner: Obj | None = None) -> Obj:
    """The job's data token for its data containers; owned by the Job, so it goes when the Job does."""
    meta: Obj = {
        "name": data_secret_name(spec),
        "namespace": namespace_for(spec, config),
        "labels": _labels(spec, config),
    }
    if owner is not None and (owner.get("metadata") or {}).get("uid"):
        meta["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "stringData": {DATA_TOKEN_KEY: token},
    }


def _container(spec: JobSpec) -> Obj:
    container: Obj = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        "env": _env(spec),
        "resources": _resources(spec),
        "securityContext": _restricted(),
        "volumeMounts": [
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "workspace", "mountPath": WORKSPACE},
        ],
        "workingDir": WORKSPACE,
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if spec.command:
        container["command"] = list(spec.command)
    if spec.ports:
        container["ports"] = [
            {"name": p.name, "containerPort": p.port, "protocol": "TCP"} for p in spec.ports
        ]
    if spec.env_from:
        container["envFrom"] = [
            {"configMapRef": {"name": ref}} if kind == "config_map" else {"secretRef": {"name": ref}}
            for kind, ref in spec.env_from
        ]
    return container


def pod_spec(spec: JobSpec, config: RenderConfig, *, restart_policy: str) -> Obj:
    pod: Obj = {
        "restartPolicy": restart_policy,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NONROOT_UID,
            "runAsGroup": NONROOT_UID,
            "fsGroup": NONROOT_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_container(spec)],
        "volumes": [{"name": "tmp", "emptyDir": {}}, {"name": "workspace", "emptyDir": {}}],
    }
    if spec.has_data and spec.change_kind != DEPLOYMENT_KIND:
        init = [_data_container(spec, config, name=FETCH_CONTAINER, action="fetch")] if spec.fetches else []
        if spec.outputs:
            # Init containers run one after another and each must succeed: the upload runs only after
            # the step succeeded, and a failed or timed-out step uploads nothing.
            init.append(pod["containers"][0])
            pod["containers"] = [_data_container(spec, config, name=UPLOAD_CONTAINER, action="upload")]
        pod["initContainers"] = init
    if spec.untrusted:
        pod["automountServiceAccountToken"] = False
    if spec.gpu is not None:
        pod["runtimeClassName"] = config.runtime_class
        pod["affinity"] = _gpu_affinity(spec)
        pod["tolerations"] = [
            {"key": key, "operator": "Exists", "effect": "NoSchedule"} for key in config.gpu_taint_keys
        ]
    return pod


def render_job(spec: JobSpec, config: RenderConfig, *, suspend: bool = False) -> Obj:
    labels = _labels(spec, config)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": spec.object_name,
            "namespace": namespace_for(spec, config),
            "labels": labels,
            "annotations": _annotations(spec),
        },
        "spec": {
            "suspend": suspend,
            "backoffLimit": 0,
            "activeDeadlineSeconds": spec.timeout_s,
            "ttlSecondsAfterFinished": config.finished_ttl_s,
            "template": {
                "metadata": {"labels": labels, "annotations": _annotations(spec)},
                "spec": pod_spec(spec, config, restart_policy="Never"),
            },
        },
    }


def _workload_selector(spec: JobSpec) -> dict[str, str]:
    return {f"{names.DOMAIN}/workload": spec.object_name}


def render_deployment(spec: JobSpec, config: RenderConfig) -> Obj:
    labels = {**_labels(spec, config), **_workload_selector(spec)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": spec.object_name,
            "namespace": namespace_for(spec, config),
            "labels": labels,
            "annotations": _annotations(spec),
        },
        "spec": {
            "replicas": 1,
            "progressDeadlineSeconds": spec.timeout_s,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": _workload_selector(spec)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {"labels": labels, "annotations": _annotations(spec)},
                "spec": pod_spec(spec, config, restart_policy="Always"),
            },
        },
    }


def render_service(spec: JobSpec, config: RenderConfig) -> Obj | None:
    if not spec.ports:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": spec.object_name,
            "namespace": namespace_for(spec, config),
            "labels": {**_labels(spec, config), **_workload_selector(spec)},
            "annotations": _annotations(spec),
        },
        "spec": {
            "type": "ClusterIP",
            "selector": _workload_selector(spec),
            "ports": [
                {"name": p.name, "port": p.port, "targetPort": p.name, "protocol": "TCP"} for p in spec.ports
            ],
        },
    }


def render_untrusted_namespace(config: RenderConfig) -> Obj:
    """The namespace untrusted pods run in: Pod Security Admission enforces `restricted` there."""
    labels = {names.MANAGED_BY: names.CONTROLLER, "pod-security.kubernetes.io/enforce-version": "latest"}
    labels.update(
        {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "audit", "warn")}
    )
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": config.untrusted_namespace,
            "labels": labels,
        },
    }


def render_isolation_policy(config: RenderConfig) -> Obj:
    """Deny all ingress and egress for pods carrying the network-isolation label (DNS included:
    untrusted work gets no network at all)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": "forest-untrusted-deny-all",
            "namespace": config.untrusted_namespace,
            "labels": {names.MANAGED_BY: names.CONTROLLER},
        },
        "spec": {
            "podSelector": {"matchLabels": {names.LABEL_ISOLATION: "deny-all"}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [],
        },
    }


def render(spec: JobSpec, config: RenderConfig, *, suspend: bool = False) -> list[Obj]:
    """Every object one Grove job needs, in apply order (namespace and policy before the pod owner)."""
    objects: list[Obj] = []
    if spec.untrusted:
        objects += [render_untrusted_namespace(config), render_isolation_policy(config)]
    if spec.change_kind == DEPLOYMENT_KIND:
        objects.append(render_deployment(spec, config))
        service = render_service(spec, config)
        if service is not None:
            objects.append(service)
    else:
        objects.append(render_job(spec, config, suspend=suspend))
    return objects
