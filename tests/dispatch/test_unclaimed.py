"""The unclaimed signal and policy (docs/decisions.md "Unclaimed jobs"): a job assigned and not claimed within
GROVE_JOB_UNCLAIMED_AFTER_S carries {"code": "unclaimed", ...} with its Grove's last poll age; the sweep ends
it ``timed_out`` with reason ``unclaimed`` only when its Grove is not ready (a Grove that polls keeps it)."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.dispatch import rules, selectors
from apps.dispatch import services as dispatch
from apps.dispatch.models import GroveJob
from apps.groves.models import Grove

pytestmark = pytest.mark.django_db


def _job(grove, n: int = 1) -> GroveJob:
    return dispatch.grove_job_create(grove=grove, run_id=uuid.uuid4(), node_id=n, change_kind="native.job",
                                     payload={"node": f"n{n}", "timeout_s": 60}, idempotency_key=f"u:{n}",
                                     attempt=1)


def test_the_signal_is_pure_and_names_the_poll_age():
    now = timezone.now()
    common = {"status": "assigned", "grove_slug": "box", "now": now, "after_s": 30}
    assert rules.unclaimed_signal(created_at=now - timedelta(seconds=5), grove_last_polled_at=now, **common) is None
    signal = rules.unclaimed_signal(created_at=now - timedelta(seconds=40), grove_last_polled_at=None, **common)
    assert signal["code"] == "unclaimed" and signal["grove_last_poll_age_s"] is None
    assert "never polled" in signal["detail"]
    signal = rules.unclaimed_signal(created_at=now - timedelta(seconds=40),
                                    grove_last_polled_at=now - timedelta(seconds=12), **common)
    assert signal["grove_last_poll_age_s"] == 12 and signal["assigned_for_s"] == 40
    assert rules.unclaimed_signal(**{**common, "status": "claimed"}, created_at=now - timedelta(hours=1),
                                  grove_last_polled_at=None) is None


def test_an_unready_grove_s_unclaimed_job_ends_with_that_code(fresh_grove, settings):
    grove, _ = fresh_grove(polled=False)
    job = _job(grove)
    now = timezone.now()
    assert dispatch.grove_jobs_end_unclaimed(now=now, limit=10) == 0  # not past the threshold yet
    assert selectors.job_signal(GroveJob.objects.select_related("grove").get(pk=job.pk), now=now) is None
    later = now + timedelta(seconds=settings.GROVE_JOB_UNCLAIMED_AFTER_S + 1)
    signal = selectors.job_signal(GroveJob.objects.select_related("grove").get(pk=job.pk), now=later)
    assert signal["code"] == "unclaimed" and signal["grove"] == grove.slug
    assert selectors.unclaimed_count(now=later) == 1
    assert dispatch.grove_jobs_end_unclaimed(now=later, limit=10) == 1
    job.refresh_from_db()
    assert job.status == "timed_out" and job.reason == "unclaimed"


def test_a_ready_grove_keeps_its_unclaimed_job_with_the_signal(fresh_grove, settings):
    grove, _ = fresh_grove()  # it polls: busy, not gone
    job = _job(grove)
    later = timezone.now() + timedelta(seconds=settings.GROVE_JOB_UNCLAIMED_AFTER_S + 1)
    Grove.objects.filter(pk=grove.pk).update(last_polled_at=later)
    assert dispatch.grove_jobs_end_unclaimed(now=later, limit=10) == 0
    job.refresh_from_db()
    assert job.status == "assigned"
    assert selectors.job_signal(GroveJob.objects.select_related("grove").get(pk=job.pk), now=later)["code"] == \
        "unclaimed"


def test_the_locked_re_check_keeps_a_job_whose_grove_polled_after_the_sweep_chose_it(fresh_grove, settings):
    """The sweep picks due jobs by a query, then ends each under its row lock; the Grove may poll in between.
    Ending one job is asked directly here (as the sweep does after its query), for a job past the threshold
    on a Grove that has since polled: the re-check under the lock must see the Grove ready and keep it."""
    grove, _ = fresh_grove(polled=False)
    job = _job(grove)
    later = timezone.now() + timedelta(seconds=settings.GROVE_JOB_UNCLAIMED_AFTER_S + 1)
    Grove.objects.filter(pk=grove.pk).update(last_polled_at=later)  # it polled after the sweep's query
    assert dispatch.grove_job_end_unclaimed(job_id=job.pk, now=later) is False
    job.refresh_from_db()
    assert job.status == "assigned" and job.reason != "unclaimed"
    # The same job on a Grove that stayed quiet is ended by the same call: the check is readiness, not a no-op.
    Grove.objects.filter(pk=grove.pk).update(
        last_polled_at=later - timedelta(seconds=settings.GROVE_READY_WITHIN_S + 1))
    assert dispatch.grove_job_end_unclaimed(job_id=job.pk, now=later) is True
    job.refresh_from_db()
    assert (job.status, job.reason) == ("timed_out", "unclaimed")
