"""The Grove job services of apps/dispatch/services.py and selectors.py — claim, report, data token and the
``changes`` read — each one's success and each of its coded refusals, called directly (the wire views and
the lean routes are thin over them: tests/dispatch/test_lean.py, test_changes.py). Jobs come from
``grove_job_create``, the call every owner (pipelines, workloads) makes. Real PostgreSQL."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.core.errors import ForestError
from apps.dispatch import selectors, services
from apps.dispatch.models import GroveJob
from apps.dispatch.vocabulary import JobStatus
from apps.groves.models import Grove

pytestmark = pytest.mark.django_db


def _job(grove, *, node: str = "a") -> GroveJob:
    run_id = uuid.uuid4()
    return services.grove_job_create(grove=grove, run_id=run_id, node_id=1, change_kind="k8s.job",
                                     payload={"node": node, "timeout_s": 60}, idempotency_key=f"{run_id}:{node}:1",
                                     attempt=1)


def _refused(call, **kwargs) -> tuple[str, str | None]:
    with pytest.raises(ForestError) as refused:
        call(**kwargs)
    return refused.value.code, refused.value.field


def _claimed(grove) -> GroveJob:
    job = _job(grove)
    services.grove_job_claim(grove=grove, job_id=job.pk)
    return job


# --- claim -------------------------------------------------------------------------------------------

def test_a_claim_wins_an_assigned_job_and_keeps_the_grove_ready(k8s_grove):
    grove, _ = k8s_grove
    Grove.objects.filter(pk=grove.pk).update(last_polled_at=None)
    grove.last_polled_at = None
    job = _job(grove)
    claimed = services.grove_job_claim(grove=grove, job_id=str(job.pk))
    assert claimed.pk == job.pk and claimed.status == JobStatus.CLAIMED and claimed.claimed_at is not None
    assert GroveJob.objects.get(pk=job.pk).status == JobStatus.CLAIMED
    assert Grove.objects.get(pk=grove.pk).last_polled_at is not None  # a claim is the executor at work


def test_a_second_claim_is_refused_already_claimed(k8s_grove):
    grove, _ = k8s_grove
    job = _claimed(grove)
    assert _refused(services.grove_job_claim, grove=grove, job_id=job.pk) == ("already_claimed", None)
    services.grove_job_report(grove=grove, job_id=job.pk, body={"state": "running"})
    assert _refused(services.grove_job_claim, grove=grove, job_id=job.pk) == ("already_claimed", None)


@pytest.mark.parametrize("ended_by", ["cancel", "timeout"])
def test_a_job_host_ended_is_refused_job_cancelled(k8s_grove, ended_by):
    grove, _ = k8s_grove
    job = _job(grove)
    if ended_by == "cancel":
        assert services.grove_job_cancel(job_id=job.pk)
    else:
        assert services.grove_job_time_out(job_id=job.pk, now=job.deadline_at + timedelta(seconds=1))
    assert _refused(services.grove_job_claim, grove=grove, job_id=job.pk) == ("job_cancelled", None)


def test_a_job_that_is_not_this_groves_or_no_job_is_refused_job_not_found(k8s_grove, fresh_grove):
    grove, _ = k8s_grove
    other, _ = fresh_grove(name="other", substrate="kubernetes")
    job = _job(grove)
    for job_id in (job.pk, "not-a-uuid", uuid.uuid4()):
        assert _refused(services.grove_job_claim, grove=other if job_id == job.pk else grove,
                        job_id=job_id) == ("job_not_found", None)
    assert GroveJob.objects.get(pk=job.pk).status == JobStatus.ASSIGNED


# --- report ------------------------------------------------------------------------------------------

def test_reports_move_a_claimed_job_to_running_then_to_its_end_once(k8s_grove):
    grove, _ = k8s_grove
    job = _claimed(grove)
    running = services.grove_job_report(grove=grove, job_id=job.pk, body={"state": "running", "log_tail": ["x"]})
    assert running == {"job_id": str(job.pk), "status": "running", "accepted": True}
    assert GroveJob.objects.get(pk=job.pk).log_tail == ["x"]
    done = services.grove_job_report(grove=grove, job_id=job.pk,
                                     body={"state": "succeeded", "exit_code": 0, "outputs": {"k": 1}})
    assert done == {"job_id": str(job.pk), "status": "succeeded", "accepted": True}
    stored = GroveJob.objects.get(pk=job.pk)
    assert stored.exit_code == 0 and stored.outputs == {"k": 1} and stored.finished_at is not None
    again = services.grove_job_report(grove=grove, job_id=job.pk, body={"state": "failed", "exit_code": 1})
    assert again == {"job_id": str(job.pk), "status": "succeeded", "accepted": False}  # a no-op
    assert GroveJob.objects.get(pk=job.pk).exit_code == 0


def test_a_report_before_the_claim_is_refused_job_not_claimed(k8s_grove):
    grove, _ = k8s_grove
    job = _job(grove)
    assert _refused(services.grove_job_report, grove=grove, job_id=job.pk,
                    body={"state": "succeeded"}) == ("job_not_claimed", None)


def test_a_report_on_another_groves_job_is_refused_job_not_found(k8s_grove, fresh_grove):
    grove, _ = k8s_grove
    other, _ = fresh_grove(name="other", substrate="kubernetes")
    job = _claimed(grove)
    assert _refused(services.grove_job_report, grove=other, job_id=job.pk,
                    body={"state": "succeeded"}) == ("job_not_found", None)


@pytest.mark.parametrize(("body", "code", "field"), [
    ({"state": "exploded"}, "invalid_choice", "state"),
    ({}, "field_required", "state"),
    ({"state": "succeeded", "exit_code": 999}, "out_of_range", "exit_code"),
    ({"state": "succeeded", "outputs": [1]}, "invalid_type", "outputs"),
    ({"state": "failed", "reason": "Not A Code"}, "invalid_reason", "reason"),
])
def test_a_bad_report_body_is_refused_with_its_field(k8s_grove, body, code, field):
    grove, _ = k8s_grove
    job = _claimed(grove)
    assert _refused(services.grove_job_report, grove=grove, job_id=job.pk, body=body) == (code, field)
    assert GroveJob.objects.get(pk=job.pk).status == JobStatus.CLAIMED


def test_a_report_after_host_ended_the_job_is_stored_acknowledged_and_changes_nothing(k8s_grove):
    grove, _ = k8s_grove
    job = _claimed(grove)
    assert services.grove_job_cancel(job_id=job.pk)
    assert selectors.grove_changes(grove=grove)[0]["cancel"] == [str(job.pk)]
    late = services.grove_job_report(grove=grove, job_id=job.pk, body={"state": "succeeded", "exit_code": 0})
    assert late == {"job_id": str(job.pk), "status": "cancelled", "accepted": False}
    stored = GroveJob.objects.get(pk=job.pk)
    assert stored.late_report["state"] == "succeeded" and stored.cancel_acked_at is not None
    assert selectors.grove_changes(grove=grove)[0]["cancel"] == []  # acknowledged: no longer sent


def test_the_wire_answers_the_refusals_with_their_status_and_field(k8s_grove, fresh_grove, wire):
    grove = wire(k8s_grove)
    job = _job(k8s_grove[0])
    early = grove.report(job.pk, state="succeeded")
    assert early.status_code == 409 and early.json()["code"] == "job_not_claimed"
    other = wire(fresh_grove(name="other", substrate="kubernetes"))
    unknown = other.claim(job.pk)
    assert unknown.status_code == 404 and unknown.json()["code"] == "job_not_found"
    mismatch = other.client.post(grove.url(f"jobs/{job.pk}/claim"), {}, format="json")
    assert mismatch.status_code == 403 and mismatch.json()["code"] == "grove_mismatch"
    assert grove.claim(job.pk).status_code == 200
    again = grove.claim(job.pk)
    assert again.status_code == 409 and again.json()["code"] == "already_claimed"
    bad = grove.report(job.pk, state="exploded")
    assert bad.status_code == 400 and bad.json()["field"] == "state"


# --- data token --------------------------------------------------------------------------------------

def test_a_claimed_job_gets_a_data_token_and_an_unclaimed_or_ended_one_is_refused_job_not_live(k8s_grove):
    grove, _ = k8s_grove
    job = _job(grove)
    assert _refused(services.grove_job_data_token, grove=grove, job_id=job.pk) == ("job_not_live", None)
    services.grove_job_claim(grove=grove, job_id=job.pk)
    token = services.grove_job_data_token(grove=grove, job_id=job.pk)
    assert token["token"] and token["expires_at"] > timezone.now().isoformat()
    services.grove_job_report(grove=grove, job_id=job.pk, body={"state": "failed", "exit_code": 2})
    assert _refused(services.grove_job_data_token, grove=grove, job_id=job.pk) == ("job_not_live", None)


# --- changes -----------------------------------------------------------------------------------------

def test_changes_lists_this_groves_assigned_jobs_oldest_first_and_its_unacknowledged_cancels(k8s_grove,
                                                                                          fresh_grove):
    grove, _ = k8s_grove
    other, _ = fresh_grove(name="other", substrate="kubernetes")
    assert selectors.grove_changes(grove=grove) == ({"jobs": [], "workloads": [], "cancel": []}, False)
    first, second, elsewhere = _job(grove, node="a"), _job(grove, node="b"), _job(other)
    body, news = selectors.grove_changes(grove=grove)
    assert news and [job["job_id"] for job in body["jobs"]] == [str(first.pk), str(second.pk)]
    assert body["jobs"][0] == selectors.job_wire(first) and str(elsewhere.pk) not in str(body)
    services.grove_job_claim(grove=grove, job_id=first.pk)
    services.grove_job_cancel(job_id=first.pk)  # claimed, then cancelled: the Grove must be told
    services.grove_job_cancel(job_id=second.pk)  # never claimed: nothing to tell
    body, news = selectors.grove_changes(grove=grove)
    assert news and body["jobs"] == [] and body["cancel"] == [str(first.pk)]
