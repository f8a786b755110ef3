"""Deriving requirements from pipeline nodes and workloads."""
from __future__ import annotations

import pytest

from apps.core.errors import ValidationFailed
from apps.pipelines.rules import node_requirement
from apps.placement import derivation

IMAGE = "registry.example/app@sha256:" + "a" * 64


@pytest.mark.parametrize(("node", "run_kind", "expected"), [
    ({"id": "train", "kind": "exec", "image": IMAGE, "command": ["python", "t.py"]}, "build",
     ("build", "oci_image", "k8s.job", "container")),
    ({"id": "t", "kind": "exec", "runtime": "native", "command": ["make"]}, "build",
     ("build", "host_command", "native.job", "host_process")),
    ({"id": "img", "kind": "build_image"}, "deploy", ("build", "oci_image", "k8s.build_job", "container")),
    ({"id": "web", "kind": "deploy", "image": IMAGE}, "deploy", ("runtime", "oci_image", "k8s.deployment",
                                                                  "container")),
    ({"id": "mac", "kind": "deploy", "runtime": "native"}, "deploy",
     ("runtime", "native_bundle", "native.workload", "host_process")),
    ({"id": "c", "kind": "exec", "image": IMAGE}, "compute", ("compute", "oci_image", "k8s.job", "container")),
    ({"id": "c", "kind": "exec", "image": IMAGE}, "deploy", ("runtime", "oci_image", "k8s.job", "container")),
    ({"id": "c", "kind": "exec", "image": IMAGE, "family": "compute"}, "build",
     ("compute", "oci_image", "k8s.job", "container")),
])
def test_node_kinds_map_to_artifact_change_kind_and_isolation(node, run_kind, expected):
    requirement = node_requirement(node, run_kind=run_kind)
    compat = requirement.compatibility
    assert (requirement.family, compat.artifact_kind, compat.change_kind, compat.isolation) == expected


def test_node_fields_carry_over_with_sources():
    node = {"id": "train", "kind": "exec", "image": IMAGE, "platform": ["linux/arm64", "linux/amd64"],
            "resources": {"cpu_milli": 4000, "memory_bytes": 8 << 30},
            "accelerators": {"count": 2, "vendor": "nvidia", "min_memory_bytes": 40 << 30},
            "trust": "untrusted", "grove": "gpu-1"}
    requirement = node_requirement(node, run_kind="compute")
    assert requirement.to_json() == {
        "family": "compute", "resources": {"cpu_milli": 4000, "memory_bytes": 8 << 30},
        "accelerators": {"count": 2, "vendor": "nvidia", "api": "cuda", "min_memory_bytes": 40 << 30},
        "compatibility": {"platform": {"allowed": ["linux/arm64", "linux/amd64"], "sources": ["node:train"]},
                          "artifact_kind": "oci_image", "change_kind": "k8s.job", "isolation": "container"},
        "trust": "untrusted", "target": {"grove_id": "gpu-1"}}


def test_no_platform_means_any_with_a_default_source():
    requirement = node_requirement({"id": "x", "kind": "exec", "image": IMAGE}, run_kind="build")
    assert requirement.compatibility.platform.allowed == ()
    assert requirement.compatibility.platform.sources == ("default",)


def test_artifact_and_grove_platforms_intersect_and_are_recorded():
    requirement = derivation.requirement_for_native_workload(
        {"name": "web", "platform": ["linux/amd64", "linux/arm64"]},
        artifact={"digest": "sha256:abc", "platform": "linux/arm64"},
        grove={"slug": "pi", "platforms": ["linux/arm64"]})
    platform = requirement.compatibility.platform
    assert platform.allowed == ("linux/arm64",)
    assert platform.sources == ("workload:web", "artifact:sha256:abc", "grove:pi")


def test_sources_that_share_no_platform_are_an_error_at_derivation():
    with pytest.raises(ValidationFailed) as exc:
        node_requirement({"id": "x", "kind": "build_image", "platform": ["linux/amd64"]},
                         run_kind="build", artifact={"digest": "sha256:1", "platform": "linux/arm64"})
    assert exc.value.code == "platform_conflict"


@pytest.mark.parametrize(("function", "spec", "expected"), [
    (derivation.requirement_for_native_workload, {"name": "mlx", "platform": ["darwin/arm64"]},
     ("runtime", "native_bundle", "native.workload", "host_process", ("darwin/arm64",), ("workload:mlx",))),
])
def test_other_derivations(function, spec, expected):
    requirement = function(spec)
    compat = requirement.compatibility
    assert (requirement.family, compat.artifact_kind, compat.change_kind, compat.isolation,
            compat.platform.allowed, compat.platform.sources) == expected


@pytest.mark.parametrize(("node", "code"), [
    ({"id": "x", "kind": "cron"}, "invalid_choice"),
    ({"id": "x", "kind": "exec", "runtime": "wasm"}, "invalid_choice"),
    ({"id": "x", "kind": "exec", "platform": ["linux/potato"]}, "invalid_platform"),
    ({"id": "x", "kind": "exec", "resources": {"cpu_milli": -1}}, "out_of_range"),
    ({"id": "x", "kind": "exec", "accelerators": {"count": 2, "vendor": "apple"}}, "apple_accelerator_count"),
    ({"id": "x", "kind": "exec", "trust": "sort-of"}, "invalid_choice"),
])
def test_bad_nodes_fail_with_codes(node, code):
    with pytest.raises(ValidationFailed) as exc:
        node_requirement(node, run_kind="build")
    assert exc.value.code == code
