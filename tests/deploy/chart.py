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


def render_text(values: dict[str, Any], chart: Path = CONTROLLER_CHART) -> dict[str, str]:
    """Template path -> rendered text, as `helm template` would write them (schema-checked first)."""
    with helm.Chart.load(chart) as loaded:
        loaded.validate_schema(values)
        rendered = loaded.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return {path: text for path, text in sorted(rendered.items()) if text.strip() and path.endswith(".yaml")}


def render_objects(values: dict[str, Any], chart: Path = CONTROLLER_CHART) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for text in render_text(values, chart).values():
        objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


def golden_text(values: dict[str, Any], chart: Path = CONTROLLER_CHART) -> str:
    return "".join(f"# Source: {path}\n{text.strip()}\n---\n" for path, text in render_text(values, chart).items())
