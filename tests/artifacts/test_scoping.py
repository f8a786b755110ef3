"""Blob scoping, tested from outside through the HTTP API: a second Grove's credential, a non-staff token
(and a staff one without the permission) and an anonymous client are refused with a code for upload,
download and GC, and no bytes move; a Grove reads only what its assigned work references and writes only
under its own run's prefix."""
from __future__ import annotations

import pytest

from apps.artifacts.models import Artifact
from apps.dispatch.models import GroveJob
from apps.pipelines import services as pipeline_services
from apps.workloads.choices import GenerationState
from tests.artifacts.conftest import V1, apply_workload, sha, signed_bundle

pytestmark = pytest.mark.django_db


def _files(settings) -> set:
    root = settings.FOREST_CAS_ROOT
    return {p for p in root.rglob("*") if p.is_file()} if root.exists() else set()


@pytest.fixture
def outsiders(anon_client, grove_client, fresh_grove, user_client):
    _, other_credential = fresh_grove(name="other", platforms=("linux/amd64",))
    return {"anonymous": (anon_client, 401, "not_authenticated"),
            "second grove": (grove_client(other_credential), 403, "grove_not_allowed"),
            "non-staff token": (user_client(staff=False), 403, "permission_required"),
            "staff without permission": (user_client(staff=True), 403, "permission_required")}


def test_outsiders_cannot_upload_and_nothing_is_stored(outsiders, settings):
    before = _files(settings)
    for who, (client, status, code) in outsiders.items():
        response = client.post(f"{V1}/artifacts/blobs", data=b"x" * 1000, content_type="application/octet-stream")
        assert (response.status_code, response.json()["code"]) == (status, code), who
    assert not Artifact.objects.exists() and _files(settings) == before


def test_outsiders_cannot_download_and_get_no_bytes(outsiders, native_runtime, grove_client):
    bundle = signed_bundle(b"secret bundle bytes")
    grove, credential = native_runtime()
    apply_workload("web", bundle, grove)
    own = grove_client(credential).get(f"{V1}/artifacts/{bundle.digest}/blob")
    assert own.status_code == 200 and b"".join(own.streaming_content) == b"secret bundle bytes"
    for who, (client, status, code) in outsiders.items():
        if who == "second grove":
            code = "blob_out_of_scope"
        response = client.get(f"{V1}/artifacts/{bundle.digest}/blob")
        assert (response.status_code, response.json()["code"]) == (status, code), who
        assert b"secret bundle bytes" not in response.content


def test_outsiders_cannot_run_gc(outsiders, settings):
    settings.FOREST_CAS_GC_GRACE_S = 0
    blob = signed_bundle(b"garbage nobody references")
    for who, (client, status, code) in outsiders.items():
        response = client.post(f"{V1}/artifacts/gc", {}, format="json")
        assert (response.status_code, response.json()["code"]) == (status, code), who
    assert Artifact.objects.filter(pk=blob.pk).exists()


def test_a_grove_reads_a_bundle_only_while_a_current_generation_references_it(native_runtime, grove_client):
    old, new = signed_bundle(b"v1 bundle"), signed_bundle(b"v2 bundle")
    grove, credential = native_runtime()
    client = grove_client(credential)
    _, first = apply_workload("web", old, grove)
    assert client.get(f"{V1}/artifacts/{new.digest}/blob").json()["code"] == "blob_out_of_scope"
    apply_workload("web", new, grove)
    assert client.get(f"{V1}/artifacts/{new.digest}/blob").status_code == 200
    assert client.get(f"{V1}/artifacts/{old.digest}/blob").status_code == 200  # still live until superseded
    first.state = GenerationState.SUPERSEDED
    first.save(update_fields=["state"])
    assert client.get(f"{V1}/artifacts/{old.digest}/blob").json()["code"] == "blob_out_of_scope"


@pytest.fixture
def claimed_job(fresh_grove, wire):
    """A native compute job with a CAS input, claimed by its Grove over the wire."""
    grove_pair = fresh_grove(name="worker", platforms=("linux/amd64",))
    data = signed_bundle(b"input data")
    graph = {"nodes": [{"id": "step", "kind": "exec", "runtime": "native", "command": ["true"],
                        "inputs": [{"digest": data.digest, "storage_kind": "cas"}], "grove": grove_pair[0].slug}]}
    run = pipeline_services.pipeline_run_create(graph=graph, kind="compute")
    node = run.nodes.get()
    pipeline_services.pipeline_node_execute(node_id=node.pk)
    job = GroveJob.objects.get(node_id=node.pk)
    grove = wire(grove_pair)
    return {"grove": grove, "job": job, "run": run, "input": data, "pair": grove_pair}


def test_a_grove_reads_its_live_jobs_inputs_only(claimed_job, grove_client, fresh_grove):
    grove, job, data = claimed_job["grove"], claimed_job["job"], claimed_job["input"]
    url = f"{V1}/artifacts/{data.digest}/blob"
    assert grove.client.get(url).status_code == 200
    _, other = fresh_grove(name="stranger")
    assert grove_client(other).get(url).json()["code"] == "blob_out_of_scope"
    grove.run_job(job.id)
    assert grove.client.get(url).json()["code"] == "blob_out_of_scope"  # the job is over


def test_a_grove_writes_only_under_its_own_runs_prefix(claimed_job, grove_client, fresh_grove, settings):
    grove, job, run = claimed_job["grove"], claimed_job["job"], claimed_job["run"]
    base = f"{V1}/artifacts/runs/{run.id}/nodes/step/blobs"
    data = b"test report"

    def put(client, key, body=data, **params):
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return client.put(f"{base}/{key}{'?' + query if query else ''}", data=body,
                          content_type="application/octet-stream")

    assert put(grove.client, "report.xml").json()["code"] == "blob_write_out_of_scope"  # not claimed yet
    assert grove.claim(job.id).status_code == 200
    written = put(grove.client, "reports/junit.xml", digest=sha(data))
    assert written.status_code == 201, written.json()
    body = written.json()
    assert body["reference"] == f"runs/{run.id}/step/reports/junit.xml"
    assert (body["producing_run_id"], body["producing_node"], body["storage_kind"]) == (str(run.id), "step", "cas")
    assert put(grove.client, "reports/junit.xml").status_code == 201  # the same bytes again: idempotent
    clash = put(grove.client, "reports/junit.xml", body=b"different")
    assert clash.status_code == 409 and clash.json()["code"] == "blob_key_exists"
    before = _files(settings)
    for key in ("..%2F..%2Fother%2Fx", "a/../../b", "%2Fetc%2Fpasswd"):
        response = put(grove.client, key)
        assert response.status_code == 400 and response.json()["code"] == "blob_key_out_of_scope", key
    _, other = fresh_grove(name="intruder")
    assert put(grove_client(other), "x.txt").json()["code"] == "blob_write_out_of_scope"
    assert put(grove.client, "x.txt", digest=sha(b"nope")).json()["code"] == "digest_mismatch"
    other_run = f"{V1}/artifacts/runs/{'0' * 32}/nodes/step/blobs/x.txt"
    assert grove.client.put(other_run, data=data, content_type="application/octet-stream").json()["code"] == \
        "blob_write_out_of_scope"
    assert _files(settings) == before
    assert Artifact.objects.filter(producing_run_id=str(run.id)).count() == 1
