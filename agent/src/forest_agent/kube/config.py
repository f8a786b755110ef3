"""What `forest-controller run` is told (flags -> `ControllerConfig`), shared by the controller's parts."""

from __future__ import annotations

from dataclasses import dataclass

from forest_agent.kube import names, observe


@dataclass(frozen=True)
class ControllerConfig:
    namespace: str = "forest"
    untrusted_namespace: str = "forest-untrusted"
    runtime_class: str = "nvidia"
    gpu_taint_keys: tuple[str, ...] = ("nvidia.com/gpu",)
    heartbeat_interval_s: float = 15.0
    poll_wait_s: int = 20
    watch_timeout_s: int = 60
    resync_s: float = 30.0
    pending_grace_s: float = 120.0
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0
    log_tail_lines: int = observe.MAX_LOG_LINES
    workers: int = 4
    # False when the Helm chart installs the untrusted Namespace and its deny-all NetworkPolicy: then the
    # controller needs no cluster-scoped write permission (charts/forest-controller, docs/deploy.md).
    apply_namespaces: bool = True

    # Step data (docs/decisions.md "Step data on Kubernetes"): the image and command of the data containers.
    data_image: str = "ghcr.io/forest/forest-controller:latest"
    data_command: tuple[str, ...] = ("python", "-m", "forest_agent.data")

    @property
    def work_namespaces(self) -> tuple[str, ...]:
        """Where this controller's Jobs and Deployments live: it lists and watches only these, so a
        namespaced Role is enough."""
        return tuple(dict.fromkeys((self.namespace, self.untrusted_namespace)))

    @property
    def owned_scopes(self) -> list[tuple[str, str]]:
        """(kind, namespace) of every object a job owns: what the re-list and the watches cover."""
        return [(kind, ns) for kind in ("Job", "Deployment") for ns in self.work_namespaces]


def owner_selector(grove_id: str) -> str:
    return f"{names.MANAGED_BY}={names.CONTROLLER},{names.LABEL_GROVE}={grove_id}"
