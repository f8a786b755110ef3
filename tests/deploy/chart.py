"""Render a chart of charts/ offline with Helm itself (helm-python-sdk embeds Helm's Go SDK; see
docs/decisions.md) and read the result back as Kubernetes objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

REPO = Path(__file__).resolve().parents[2]
CHARTS = REPO / "charts"
CONTROLLER_CHART = CHARTS / "forest-controller"
RELEASE = "forest-controller"
NAMESPACE = "forest-system"

HOST_CHART = CHARTS / "forest-host"
# The release and namespace docs/deploy.md installs each chart as.
RELEASES = {"forest-controller": (RELEASE, NAMESPACE), "forest-host": ("forest-host", "forest")}

# What a standalone install needs (docs/deploy.md), and what infra/modules/grove passes (controller.tf).
STANDALONE = {
    "config": {"groveName": "grove-a", "hostUrl": "https://forest.example.com"},
    "enrollmentToken": "fe_enroll_0123456789abcdef",
}
GROVE_MODULE = {
    "image": "registry.example.com/forest/forest-controller@sha256:" + "ab" * 32,
    "existingConfigMap": "forest-controller",
    "enrollmentSecret": "forest-controller-enrollment",
    "podAnnotations": {"forest.dev/config-sha256": "0" * 64},
}


def _release(chart: Path) -> tuple[str, str]:
    return RELEASES.get(chart.name, (RELEASE, NAMESPACE))


def render_text(values: dict[str, Any], chart: Path = CONTROLLER_CHART, *, release: str | None = None,
                namespace: str | None = None, is_upgrade: bool = False) -> dict[str, str]:
    """Template path -> rendered text, as `helm template` would write them (schema-checked first)."""
    default_release, default_namespace = _release(chart)
    with helm.Chart.load(chart) as loaded:
        loaded.validate_schema(values)
        rendered = loaded.render(values, name=release or default_release, namespace=namespace or default_namespace,
                                 is_install=not is_upgrade, is_upgrade=is_upgrade)
    return {path: text for path, text in sorted(rendered.items()) if text.strip() and path.endswith(".yaml")}


def render_objects(values: dict[str, Any], chart: Path = CONTROLLER_CHART, **release: Any) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for text in render_text(values, chart, **release).values():
        objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


def golden_text(values: dict[str, Any], chart: Path = CONTROLLER_CHART) -> str:
    return "".join(f"# Source: {path}\n{text.strip()}\n---\n" for path, text in render_text(values, chart).items())


def assert_pod_security_restricted(pod: dict[str, Any]) -> None:
    """Pod Security `restricted` for one pod spec, plus what Forest adds: a read-only root filesystem and
    requests and limits on every container."""
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    for volume in pod["volumes"]:
        assert set(volume) - {"name"} <= {"secret", "emptyDir", "configMap", "projected",
                                          "persistentVolumeClaim"}, volume
    for container in pod["containers"] + pod.get("initContainers", []):
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert not context.get("privileged")
        assert container["resources"]["requests"] and container["resources"]["limits"]
        assert set(container["resources"]["limits"]) >= {"cpu", "memory"}
