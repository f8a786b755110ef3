"""Job data tokens: a claimed job's token reads that job's blob inputs and writes under its run's node,
nothing else; a forged or expired token, or one for a job that has ended, gets nothing."""
from __future__ import annotations

import time

import pytest

from apps.core.datatoken import data_token_read, data_token_sign
from apps.core.errors import NotAuthenticated
from tests.artifacts.conftest import V1, sha
from tests.artifacts.test_scoping import claimed_job  # noqa: F401  (the fixture)

pytestmark = pytest.mark.django_db


def _token(grove, job_id) -> dict:
    return grove.client.post(f"{V1}/groves/{grove.grove.pk}/jobs/{job_id}/data-token").json()


def test_a_token_reads_its_jobs_inputs_and_writes_its_nodes_outputs_only(claimed_job, anon_client,  # noqa: F811
                                                                        fresh_grove):
    grove, job, run, data = claimed_job["grove"], claimed_job["job"], claimed_job["run"], claimed_job["input"]
    assert _token(grove, job.id)["code"] == "job_not_live"  # not claimed yet
    grove.claim(job.id)
    token = _token(grove, job.id)["token"]
    pod = anon_client
    pod.credentials(HTTP_AUTHORIZATION=f"Job {token}")
    assert pod.get(f"{V1}/artifacts/{data.digest}/blob").status_code == 200
    other = sha(b"not this job's")
    assert pod.get(f"{V1}/artifacts/{other}/blob").json()["code"] == "blob_out_of_scope"
    base = f"{V1}/artifacts/runs/{run.id}/nodes"
    put = pod.put(f"{base}/step/blobs/attempt-1/out", data=b"result", content_type="application/octet-stream")
    assert put.status_code == 201, put.json()
    assert put.json()["producing_node"] == "step"
    elsewhere = pod.put(f"{base}/other/blobs/x", data=b"result", content_type="application/octet-stream")
    assert elsewhere.json()["code"] == "blob_write_out_of_scope"
    assert pod.get(f"{V1}/artifacts").status_code in (401, 403)  # a data token is no user

    grove.report(job.id, state="succeeded", exit_code=0)  # the job ended: so did its token
    ended = pod.get(f"{V1}/artifacts/{data.digest}/blob")
    assert (ended.status_code, ended.json()["code"]) == (401, "data_token_job_ended")
    late = pod.put(f"{base}/step/blobs/attempt-1/late", data=b"late", content_type="application/octet-stream")
    assert (late.status_code, late.json()["code"]) == (401, "data_token_job_ended")

    pod.credentials(HTTP_AUTHORIZATION=f"Job {token[:-2]}xx")
    assert pod.get(f"{V1}/artifacts/{data.digest}/blob").json()["code"] == "data_token_invalid"


def test_an_expired_token_is_refused():
    token = data_token_sign(grove_id="g", job_id="j", run_id="r", node="n", inputs=[], expires_at=time.time() - 1)
    with pytest.raises(NotAuthenticated) as refused:
        data_token_read(token)
    assert refused.value.code == "data_token_expired"
    assert data_token_read(data_token_sign(grove_id="g", job_id="j", run_id="r", node="n", inputs=["d"],
                                           expires_at=time.time() + 60)).inputs == {"d"}
