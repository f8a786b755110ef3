"""The compute services called directly, as a door added later would call them: the cancel service's own
check is the change permission and the job's team (every door checks first, so only a direct call shows it)."""
from __future__ import annotations

import pytest

from apps.accounts.roles import SUBMITTER, VIEWER
from apps.compute import services
from apps.compute.selectors import FLAG
from apps.core.errors import ForestError
from tests.factories import UserFactory, grant
from tests.pipelines.graphs import IMAGE

pytestmark = pytest.mark.django_db


def test_the_cancel_service_itself_demands_the_change_permission(k8s_grove, flag_on):
    flag_on(FLAG)
    job = services.compute_job_submit(body={"name": "train", "team": "red", "steps": [
        {"name": "s", "kind": "container", "image": IMAGE, "command": ["true"]}]})
    viewer = grant(UserFactory(), VIEWER, teams=("red",))
    with pytest.raises(ForestError) as refused:
        services.compute_job_cancel_as(actor=viewer, job_id=job.id)
    assert (refused.value.code, refused.value.status) == ("permission_required", 403)
    job.run.refresh_from_db()
    assert job.run.status == "running"
    outsider = grant(UserFactory(), SUBMITTER, teams=("blue",))
    with pytest.raises(ForestError) as refused:
        services.compute_job_cancel_as(actor=outsider, job_id=job.id)
    assert refused.value.code == "team_forbidden"
    submitter = grant(UserFactory(), SUBMITTER, teams=("red",))
    assert services.compute_job_cancel_as(actor=submitter, job_id=job.id).run.status == "cancelled"
