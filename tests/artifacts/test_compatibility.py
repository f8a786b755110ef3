"""The artifact-platform check under ``host.deploy.forest_compatibility``, flag on and off: a build_image
node's pushed image (read back from a real registry: manifest → config → platform) against the node's
target, and runtime compilation (the native generation writer) against the placed Grove."""
from __future__ import annotations

import uuid

import pytest

from apps.artifacts.models import Artifact, ArtifactPlatformCheck
from apps.core.errors import ForestError
from apps.dispatch.models import GroveJob
from apps.pipelines import services as pipeline_services
from apps.workloads.models import WorkloadGeneration
from tests.artifacts.conftest import apply_workload, signed_bundle

pytestmark = pytest.mark.django_db


@pytest.fixture
def builder(fresh_grove, wire):
    return wire(fresh_grove(name="kube-build", substrate="kubernetes", roles=("build",),
                            platforms=("linux/amd64", "linux/arm64")))


def _build(builder, image_output: str | None, *, target=("linux/arm64",)):
    """Run one build_image node to success over the wire with ``outputs.image``; returns the node."""
    graph = {"nodes": [{"id": "img", "kind": "build_image", "image": "builder:latest", "command": ["build"],
                        "platform": list(target)}]}
    run = pipeline_services.pipeline_run_create(graph=graph, kind="build")
    node = run.nodes.get()
    pipeline_services.pipeline_node_execute(node_id=node.pk)
    job = GroveJob.objects.get(node_id=node.pk)
    builder.run_job(job.id, outputs={"image": image_output} if image_output else {})
    assert pipeline_services.pipeline_node_resume(node_id=node.pk)
    node.refresh_from_db()
    return node


def test_a_build_records_its_image_with_the_config_platform(registry, builder):
    repo = f"forest/built-{uuid.uuid4().hex[:8]}"
    pushed = registry.push_image(repo, arch="arm64", variant="v8")
    node = _build(builder, registry.ref(repo, pushed["digest"]))
    assert node.status == "succeeded"
    artifact = Artifact.objects.get(digest=pushed["digest"])
    assert (artifact.storage_kind, artifact.platform, artifact.platform_source) == ("oci_registry", "linux/arm64",
                                                                                    "config")
    assert (artifact.producing_run_id, artifact.producing_node) == (str(node.run_id), "img")
    assert artifact.platform_checks.get().verdict == "ok"


def test_a_wrong_platform_build_fails_only_with_the_flag_on(registry, builder, flag_on):
    repo = f"forest/wrong-{uuid.uuid4().hex[:8]}"
    pushed = registry.push_image(repo, arch="amd64")
    off = _build(builder, registry.ref(repo, pushed["digest"]))
    assert off.status == "succeeded"
    check = ArtifactPlatformCheck.objects.get(subject_id=f"{off.run_id}:img")
    assert (check.verdict, check.enforced, check.code) == ("would_refuse", False, "artifact_platform_mismatch")
    assert "linux/amd64" in check.detail and "linux/arm64" in check.detail

    flag_on("host.deploy.forest_compatibility")
    on = _build(builder, registry.ref(repo, pushed["digest"]))
    assert (on.status, on.reason) == ("failed", "artifact_platform_mismatch")
    assert on.run.status == "failed"
    assert ArtifactPlatformCheck.objects.get(subject_id=f"{on.run_id}:img").verdict == "refused"


def test_a_multi_platform_push_is_resolved_for_the_target(registry, builder, flag_on):
    flag_on("host.deploy.forest_compatibility")
    repo = f"forest/multi-{uuid.uuid4().hex[:8]}"
    children = [registry.push_image(repo, arch=a) for a in ("amd64", "arm64")]
    index = registry.push_index(repo, "all", [{k: c[k] for k in ("mediaType", "digest", "size", "platform")}
                                              for c in children])
    node = _build(builder, registry.ref(repo, index["digest"]))
    assert node.status == "succeeded"
    assert Artifact.objects.get(producing_run_id=str(node.run_id)).digest == children[1]["digest"]
    only_amd = registry.push_index(repo, "amd", [{k: children[0][k] for k in ("mediaType", "digest", "size",
                                                                              "platform")}])
    refused = _build(builder, registry.ref(repo, only_amd["digest"]))
    assert (refused.status, refused.reason) == ("failed", "artifact_platform_mismatch")


def test_an_unreadable_platform_is_recorded_unknown_and_never_refused(registry, builder, flag_on, settings):
    flag_on("host.deploy.forest_compatibility")
    repo = f"forest/odd-{uuid.uuid4().hex[:8]}"
    pushed = registry.push_image(repo, config=b"\x00 not json")
    node = _build(builder, registry.ref(repo, pushed["digest"]))
    assert node.status == "succeeded"
    artifact = Artifact.objects.get(digest=pushed["digest"])
    assert (artifact.platform, artifact.platform_status) == ("", "unknown")
    assert artifact.platform_checks.get().verdict == "platform_unknown"
    # an unreachable registry: recorded as unknown with the reason, nothing claimed as read
    settings.FOREST_OCI_INSECURE_REGISTRIES = ["127.0.0.1:9"]
    gone = _build(builder, f"127.0.0.1:9/forest/app@{pushed['digest']}")
    assert gone.status == "succeeded"
    lost = Artifact.objects.get(producing_run_id=str(gone.run_id))
    assert (lost.platform_status, lost.platform_source) == ("unknown", "unreadable:registry_unreachable")


def test_a_build_without_a_pinned_image_records_nothing(builder):
    assert _build(builder, None).status == "succeeded"
    assert _build(builder, "registry.example/app:latest").status == "succeeded"
    assert not Artifact.objects.exists()


def test_runtime_compilation_refuses_a_bundle_the_grove_cannot_run(native_runtime, flag_on):
    """The workload's stored placement outlives its bundle: v2 is built for another platform."""
    grove, _ = native_runtime(platforms=("darwin/arm64",))
    apply_workload("web", signed_bundle(b"v1", platform="darwin/arm64"), grove)
    intel = signed_bundle(b"v2 for intel", platform="darwin/amd64")
    _, generation = apply_workload("web", intel, grove)  # flag off: recorded, written
    assert generation.number == 2
    check = ArtifactPlatformCheck.objects.get(artifact=intel)
    assert (check.verdict, check.grove, check.subject_type) == ("would_refuse", grove, "workload_generation")

    flag_on("host.deploy.forest_compatibility")
    other = signed_bundle(b"v3 for intel", platform="darwin/amd64")
    with pytest.raises(ForestError) as exc:
        apply_workload("web", other, grove)
    assert exc.value.code == "artifact_platform_mismatch" and exc.value.status == 409
    assert exc.value.extra["required"] == ["darwin/arm64"]
    assert WorkloadGeneration.objects.count() == 2
    _, fine = apply_workload("web", signed_bundle(b"v4", platform="darwin/arm64"), grove)
    assert fine.number == 3
