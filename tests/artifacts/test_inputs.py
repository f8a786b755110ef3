"""Step inputs resolved at submit (by storage kind, team, and the chosen Grove's platforms, an OCI index
against a real registry), the digests on the node and in its GRAPH_DEDUP key, lineage reads over the API
with team scoping, and GC's lineage retention."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.artifacts import services
from apps.artifacts.models import Artifact, ArtifactUse
from apps.core.errors import ForestError
from apps.pipelines.models import PipelineNode, PipelineRun
from apps.pipelines.services import pipeline_run_create
from tests.artifacts.conftest import V1
from tests.artifacts.test_oci_registry import multi  # noqa: F401  (the index fixture)
from tests.factories import UserFactory, api_token_for, grant

pytestmark = pytest.mark.django_db


def _run(inputs: list, *, grove: str | None = None, user=None, team: str = "", node: str = "s", **extra):
    spec = {"id": node, "kind": "exec", "runtime": "native", "command": ["true"], "inputs": inputs, **extra}
    if grove:
        spec["grove"] = grove
    return pipeline_run_create(graph={"nodes": [spec]}, kind="compute", created_by=user, team=team)


def _refusal(inputs: list, **kwargs) -> ForestError:
    runs = PipelineRun.objects.count()
    with pytest.raises(ForestError) as refused:
        _run(inputs, **kwargs)
    assert PipelineRun.objects.count() == runs  # nothing was created
    return refused.value


def test_each_unresolvable_input_is_a_coded_refusal_naming_it(fresh_grove):
    fresh_grove(name="worker", platforms=("linux/amd64",))
    blob = services.artifact_blob_create(chunks=[b"a dataset"])
    image = Artifact.objects.create(digest="sha256:" + "ab" * 32, storage_kind="oci_registry",
                                    reference="registry.example/app@sha256:" + "ab" * 32, platform="linux/s390x")
    cases = [
        ([{"artifact": 999999, "path": "x"}], "input_not_found"),
        ([{"digest": "sha256:" + "0" * 64, "path": "x"}], "input_not_found"),
        ([{"digest": blob.digest, "kind": "oci_registry"}], "input_kind_mismatch"),
        ([{"artifact": image.pk, "path": "image.tar"}], "input_kind_mismatch"),  # an image is no file
    ]
    for inputs, code in cases:
        refused = _refusal([{"digest": blob.digest, "path": "ok"}, *inputs], grove="worker")
        assert refused.code == code and refused.status == 400
        assert refused.field == "graph.nodes[s].inputs[1]"
    services.blob_store().delete(blob.digest)
    assert _refusal([{"digest": blob.digest, "path": "x"}]).code == "input_not_found"  # its bytes are gone

    refused = _refusal([{"artifact": image.pk}], grove="worker")
    assert refused.code == "input_platform_unsupported"
    assert (refused.extra["offered"], refused.extra["grove_platforms"]) == (["linux/s390x"], ["linux/amd64"])


def test_an_index_input_resolves_for_the_pinned_groves_platforms_in_order(multi, fresh_grove):  # noqa: F811
    fresh_grove(name="arm-first", platforms=("linux/arm64", "linux/amd64"))
    fresh_grove(name="amd-first", platforms=("linux/amd64", "linux/arm64"))
    fresh_grove(name="mainframe", platforms=("linux/s390x",))
    arm = _run([{"image": multi["ref"], "name": "base"}], grove="arm-first").nodes.get()
    amd = _run([{"image": multi["ref"], "name": "base"}], grove="amd-first").nodes.get()
    assert arm.spec["inputs"][0]["digest"] == multi["arm64"]["digest"]
    assert amd.spec["inputs"][0]["digest"] == multi["amd64"]["digest"]
    assert arm.spec["inputs"][0]["storage_kind"] == "oci_registry"
    assert arm.spec["inputs"][0]["reference"].endswith("@" + multi["arm64"]["digest"])
    assert arm.node_digest != amd.node_digest  # the dedup key holds the resolved digest
    refused = _refusal([{"image": multi["ref"]}], grove="mainframe")
    assert refused.code == "input_platform_unsupported"
    assert refused.extra["offered"] == ["linux/amd64", "linux/arm64/v8", "linux/arm/v7", "unknown/unknown"]
    assert refused.extra["grove_platforms"] == ["linux/s390x"]
    assert _refusal([{"image": multi["ref"].replace(":1.0", ":missing")}]).code == "input_not_found"


def test_the_dedup_key_and_the_payload_carry_the_input_digests(fresh_grove):
    fresh_grove(name="worker")
    one = services.artifact_blob_create(chunks=[b"v1"])
    two = services.artifact_blob_create(chunks=[b"v2"])
    first = _run([{"digest": one.digest, "path": "data/in.bin"}], grove="worker").nodes.get()
    again = _run([{"artifact": one.pk, "path": "data/in.bin", "name": "in.bin"}], grove="worker").nodes.get()
    other = _run([{"digest": two.digest, "path": "data/in.bin"}], grove="worker").nodes.get()
    assert first.node_digest == again.node_digest != other.node_digest
    assert first.spec["inputs"] == [{"name": "in.bin", "artifact_id": one.pk, "digest": one.digest,
                                     "storage_kind": "cas", "reference": one.reference, "size": 2,
                                     "path": "data/in.bin"}]
    uses = ArtifactUse.objects.filter(run_id=first.run_id)
    assert [(u.node, u.role, u.name, u.artifact_id) for u in uses] == [("s", "input", "in.bin", one.pk)]


def _client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_for(user)}")
    return client


def test_a_team_reads_and_uses_only_its_own_artifacts(fresh_grove):
    fresh_grove(name="worker")
    alice = grant(UserFactory(username=f"alice-{uuid.uuid4().hex[:6]}"), "submitter", teams=("red",))
    bob = grant(UserFactory(username=f"bob-{uuid.uuid4().hex[:6]}"), "submitter", teams=("blue",))
    mine = services.artifact_blob_create(chunks=[b"red data"], team="red")
    theirs = services.artifact_blob_create(chunks=[b"blue data"], team="blue")
    shared = services.artifact_blob_create(chunks=[b"a shared base"])
    _run([{"artifact": mine.pk, "path": "a"}, {"artifact": shared.pk, "path": "b"}], user=alice, team="red",
         grove="worker")
    refused = _refusal([{"artifact": theirs.pk, "path": "a"}], user=alice, team="red")
    assert refused.code == "input_not_found"
    _run([{"artifact": theirs.pk, "path": "a"}], user=bob, team="blue", grove="worker")

    client = _client(alice)
    listed = {row["id"] for row in client.get(f"{V1}/artifacts").json()["results"]}
    assert listed == {mine.pk, shared.pk}
    assert client.get(f"{V1}/artifacts/{theirs.pk}/lineage").json()["code"] == "artifact_not_found"
    assert client.get(f"{V1}/artifacts/{theirs.digest}/blob").status_code == 404
    assert client.get(f"{V1}/artifacts/{mine.digest}/blob").status_code == 200


def _produce(run_id: str, node: str, data: bytes, *, inputs: list[Artifact] = ()) -> Artifact:
    """A node's output as the Grove write records it (its lineage row), its inputs as submit records them."""
    artifact = services.artifact_blob_create(chunks=[data], reference=f"runs/{run_id}/{node}/attempt-1/out",
                                             producing_run_id=run_id, producing_node=node,
                                             producing_name="attempt-1/out")
    ArtifactUse.objects.create(artifact=artifact, run_id=run_id, node=node, role="output", name="attempt-1/out")
    for index, item in enumerate(inputs):
        ArtifactUse.objects.create(artifact=item, run_id=run_id, node=node, role="input", name=f"in{index}")
    return artifact


def test_lineage_follows_producers_and_consumers_both_ways_within_the_bound(staff_client):
    runs = [str(uuid.uuid4()) for _ in range(4)]
    raw = _produce(runs[0], "fetch", b"raw")
    clean = _produce(runs[1], "clean", b"clean", inputs=[raw])
    model = _produce(runs[2], "train", b"model", inputs=[clean])
    _produce(runs[3], "evaluate", b"score", inputs=[model])

    body = staff_client.get(f"{V1}/artifacts/{clean.pk}/lineage").json()
    assert [(p["run_id"], p["node"]) for p in body["producers"]] == [(runs[1], "clean")]
    assert [(c["run_id"], c["node"]) for c in body["consumers"]] == [(runs[2], "train")]
    steps = {edge["step"] for edge in body["edges"]}
    assert steps == {f"{runs[0]}:fetch", f"{runs[1]}:clean", f"{runs[2]}:train", f"{runs[3]}:evaluate"}
    assert body["truncated"] is False

    near = staff_client.get(f"{V1}/artifacts/{clean.pk}/lineage?depth=1").json()
    assert {edge["step"] for edge in near["edges"]} == {f"{runs[1]}:clean", f"{runs[2]}:train"}
    assert near["truncated"] is True

    run = staff_client.get(f"{V1}/artifacts/runs/{runs[2]}/lineage").json()
    assert [(i["name"], i["artifact"]["id"]) for i in run["inputs"]] == [("in0", clean.pk)]
    assert [(o["name"], o["artifact"]["id"]) for o in run["outputs"]] == [("attempt-1/out", model.pk)]


def test_gc_keeps_what_runs_used_within_the_retention_and_inputs_of_live_steps(settings, fresh_grove):
    fresh_grove(name="worker")
    settings.FOREST_CAS_GC_GRACE_S = 0
    used = services.artifact_blob_create(chunks=[b"used by an old run"])
    ArtifactUse.objects.create(artifact=used, run_id=uuid.uuid4(), node="old", role="input", name="x")
    live = services.artifact_blob_create(chunks=[b"input of a step that has not run"])
    _run([{"artifact": live.pk, "path": "x"}], grove="worker")
    later = timezone.now() + timedelta(hours=1)
    assert services.artifact_gc(now=later)["removed"] == 0
    settings.FOREST_LINEAGE_RETENTION_S = 0
    ArtifactUse.objects.update(created_at=timezone.now() - timedelta(seconds=1))
    report = services.artifact_gc(now=later)
    assert report["removed"] == 1  # the old run's input goes; the live step's stays
    assert not Artifact.objects.filter(pk=used.pk).exists() and services.blob_store().exists(live.digest)
    assert PipelineNode.objects.get().status == "queued"


def test_a_container_steps_image_given_as_an_artifact_is_pinned_or_refused(fresh_grove):
    fresh_grove(name="k8s", substrate="kubernetes", roles=("compute",), platforms=("linux/amd64",))
    image = Artifact.objects.create(digest="sha256:" + "cd" * 32, storage_kind="oci_registry",
                                    reference="registry.example/app@sha256:" + "cd" * 32, platform="linux/amd64")
    blob = services.artifact_blob_create(chunks=[b"not an image"])
    spec = {"id": "c", "kind": "exec", "runtime": "container", "command": ["run"], "grove": "k8s"}
    run = pipeline_run_create(graph={"nodes": [{**spec, "image": {"artifact": image.pk}}]}, kind="compute")
    node = run.nodes.get()
    assert node.spec["image"] == image.reference and node.dedup_decision != "excluded:image_not_pinned"
    assert [(u.name, u.artifact_id) for u in ArtifactUse.objects.filter(run_id=run.id)] == [("image", image.pk)]
    with pytest.raises(ForestError) as refused:
        pipeline_run_create(graph={"nodes": [{**spec, "image": {"artifact": blob.pk}}]}, kind="compute")
    assert (refused.value.code, refused.value.field) == ("input_kind_mismatch", "graph.nodes[c].image")
