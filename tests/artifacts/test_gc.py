"""Garbage collection of the CAS, on both backends: only unreferenced blobs older than the grace period
go, with their rows; referenced ones (a workload's bundle, an unfinished node's input, a run's output)
stay; staged leftovers of crashed uploads are swept; and a blob referenced *while* GC runs survives it
(a real race on PostgreSQL row locks, two threads with their own connections)."""
from __future__ import annotations

import os
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from apps.artifacts import services
from apps.artifacts.models import Artifact
from apps.pipelines import services as pipeline_services
from apps.pipelines.models import PipelineRun
from apps.workloads.models import NativeWorkload
from tests.artifacts.conftest import apply_workload, signed_bundle

LATER = timedelta(hours=2)


@pytest.fixture(params=["filesystem", "s3"])
def backend(request, settings):
    settings.FOREST_CAS_GC_GRACE_S = 3600
    if request.param == "s3":
        request.getfixturevalue("s3_bucket")
    return request.param


def _present(artifact) -> bool:
    return services.blob_store().exists(artifact.digest)


@pytest.mark.django_db
def test_only_old_unreferenced_blobs_go(backend, native_runtime, fresh_grove):
    garbage = services.artifact_blob_create(chunks=[b"nobody needs me"])
    bundle = signed_bundle(b"a workload's bundle")
    grove, _ = native_runtime()
    apply_workload("web", bundle, grove)
    job_input = services.artifact_blob_create(chunks=[b"an unfinished node's input"])
    fresh_grove(name="worker")
    pipeline_services.pipeline_run_create(graph={"nodes": [{
        "id": "step", "kind": "exec", "runtime": "native", "command": ["true"], "grove": "worker",
        "inputs": [{"digest": job_input.digest, "storage_kind": "cas"}]}]}, kind="compute")
    output = services.artifact_blob_create(chunks=[b"a run's output"], reference="runs/r/step/out",
                                           producing_run_id="r", producing_node="step")

    young = services.artifact_gc()
    assert (young["examined"], young["removed"]) == (0, 0)  # all inside the grace period
    assert _present(garbage)

    dry = services.artifact_gc(now=timezone.now() + LATER, dry_run=True)
    assert (dry["examined"], dry["removed"], dry["kept"]) == (4, 1, 3)
    assert _present(garbage)

    report = services.artifact_gc(now=timezone.now() + LATER)
    assert (report["backend"], report["removed"], report["kept"]) == (backend, 1, 3)
    assert not _present(garbage) and not Artifact.objects.filter(pk=garbage.pk).exists()
    for kept in (bundle, job_input, output):
        assert _present(kept) and Artifact.objects.filter(pk=kept.pk).exists()


@pytest.mark.django_db
def test_orphan_bytes_and_crashed_uploads_are_swept(backend, s3_server, settings):
    orphan = services.artifact_blob_create(chunks=[b"row lost, bytes left"])
    Artifact.objects.filter(pk=orphan.pk).delete()
    store = services.blob_store()
    if backend == "filesystem":
        store.staging.mkdir(parents=True, exist_ok=True)
        leftover = store.staging / "upload-crashed"
        leftover.write_bytes(b"half an upload")
        old = time.time() - 3 * 3600
        os.utime(leftover, (old, old))
    else:
        s3_server.client.put_object(Bucket=settings.FOREST_CAS_S3_BUCKET, Key="uploads/crashed", Body=b"half")
    report = services.artifact_gc(now=timezone.now() + LATER)
    assert (report["removed"], report["staging_removed"]) == (1, 1)
    assert not store.exists(orphan.digest)


def _reference_by_workload(artifact) -> None:
    NativeWorkload.objects.create(slug="late", bundle=artifact, command=["./run"])  # a protected foreign key


def _reference_by_node_input(artifact) -> None:
    # A JSON reference (no foreign key): only GC's re-check under the row lock can see it.
    pipeline_services.pipeline_run_create(graph={"nodes": [{
        "id": "late", "kind": "exec", "runtime": "native", "command": ["true"],
        "inputs": [{"digest": artifact.digest, "storage_kind": "cas"}]}]}, kind="compute")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("reference", [_reference_by_workload, _reference_by_node_input], ids=["fk", "json"])
def test_a_blob_referenced_during_gc_survives(settings, reference, fresh_grove):
    """Thread A share-locks the bundle (``artifact_cas_for_reference``, as a referencing writer does) and
    holds its transaction open; GC in thread B has already chosen the blob as garbage and blocks on the row
    lock; A then commits its reference; B re-checks under the lock and keeps the blob."""
    settings.FOREST_CAS_GC_GRACE_S = 0
    fresh_grove(name="worker")
    bundle = signed_bundle(b"referenced mid-GC")
    locked, release, done = threading.Event(), threading.Event(), threading.Event()
    result: dict = {}

    def referencer():
        try:
            with transaction.atomic():
                artifact = services.artifact_cas_for_reference(digest=bundle.digest)
                locked.set()
                release.wait(30)
                reference(artifact)
        finally:
            connections.close_all()

    def collector():
        try:
            result["report"] = services.artifact_gc()
        finally:
            done.set()
            connections.close_all()

    a = threading.Thread(target=referencer)
    a.start()
    assert locked.wait(30)
    b = threading.Thread(target=collector)
    b.start()
    _wait_for_lock_waiter()
    assert not done.is_set()  # GC is blocked on the bundle's row lock, not finished
    release.set()
    a.join(30)
    b.join(30)
    assert result["report"]["removed"] == 0 and result["report"]["kept"] == 1
    assert services.blob_store().exists(bundle.digest)
    assert Artifact.objects.filter(pk=bundle.pk).exists()

    NativeWorkload.objects.all().delete()
    PipelineRun.objects.all().delete()
    settings.FOREST_LINEAGE_RETENTION_S = 0  # the run's lineage row no longer protects it
    assert services.artifact_gc()["removed"] == 1  # the control: unreferenced, it goes
    assert not services.blob_store().exists(bundle.digest)


def _wait_for_lock_waiter(timeout: float = 30.0) -> None:
    """Until PostgreSQL shows a backend waiting on a row lock in artifacts (the GC thread)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                           "AND query ILIKE %s AND datname = current_database()", ["%artifacts_artifact%"])
            if cursor.fetchone()[0]:
                return
        time.sleep(0.02)
    pytest.fail("GC never blocked on the artifact row lock")
