"""Every role x operation x own/other team over the real API: allowed, or 403 with a code naming what is
missing — and after every refusal, not one row of any table changed (tests.fingerprint)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from apps.accounts import roles
from apps.compute.models import ComputeJob
from apps.pipelines.models import PipelineRun
from tests.estate import PREVIEW, ROLE_USERS, TEAMS, client_for, compute_body, run_body, workload_body
from tests.factories import UserFactory, grant
from tests.fingerprint import changed_tables, table_fingerprint

pytestmark = pytest.mark.django_db
V1 = "/api/forest/v1"


@dataclass(frozen=True)
class Op:
    name: str
    method: str
    path: Callable  # (estate, team) -> path
    permission: str
    scope: str  # "none": no team; "list": filtered; "object": the target's team; "new": the body's team
    body: Callable | None = None  # (estate, team, bundle) -> body


OPS = [
    Op("grove list", "get", lambda e, t: "/groves", "groves.view_grove", "none"),
    Op("compute list", "get", lambda e, t: "/compute/jobs", "compute.view_computejob", "list"),
    Op("compute detail", "get", lambda e, t: f"/compute/jobs/{e[t]['job'].id}", "compute.view_computejob", "object"),
    Op("compute submit", "post", lambda e, t: "/compute/jobs", "compute.add_computejob", "new",
       lambda e, t, b: compute_body(t, "new")),
    Op("compute cancel", "post", lambda e, t: f"/compute/jobs/{e[t]['job_to_cancel'].id}/cancel",
       "compute.change_computejob", "object"),
    Op("run list", "get", lambda e, t: "/pipelines/runs", "pipelines.view_pipelinerun", "list"),
    Op("run detail", "get", lambda e, t: f"/pipelines/runs/{e[t]['run'].id}", "pipelines.view_pipelinerun",
       "object"),
    Op("run create", "post", lambda e, t: "/pipelines/runs", "pipelines.add_pipelinerun", "new",
       lambda e, t, b: run_body(t)),
    Op("run cancel", "post", lambda e, t: f"/pipelines/runs/{e[t]['run'].id}/cancel", "pipelines.change_pipelinerun",
       "object"),
    Op("workload list", "get", lambda e, t: "/workloads", "workloads.view_nativeworkload", "list"),
    Op("workload detail", "get", lambda e, t: f"/workloads/web-{t}", "workloads.view_nativeworkload", "object"),
    Op("workload create", "post", lambda e, t: "/workloads", "workloads.add_nativeworkload", "new",
       lambda e, t, b: workload_body(b, t, f"new-{t}")),
    Op("workload update", "post", lambda e, t: "/workloads", "workloads.add_nativeworkload", "object",
       lambda e, t, b: {**workload_body(b, t, f"web-{t}"), "command": ["./server", "--v2"]}),
    Op("secret set", "post", lambda e, t: "/workloads/secrets", "workloads.add_workloadsecret", "new",
       lambda e, t, b: {"name": "API_TOKEN", "value": "s3cret", "team": t}),
    Op("placement list", "get", lambda e, t: "/placements", "placement.view_executionplacement", "list"),
    Op("placement detail", "get", lambda e, t: f"/placements/{e[t]['placement'].pk}",
       "placement.view_executionplacement", "object"),
    Op("placement preview", "post", lambda e, t: "/placements/preview", "placement.view_executionplacement", "none",
       lambda e, t, b: PREVIEW),
    Op("placement replace", "post", lambda e, t: f"/placements/{e[t]['placement'].pk}/replace",
       "placement.change_executionplacement", "object", lambda e, t, b: {"reason": "moving"}),
]


def _expected(role: str, op: Op, team: str) -> str:
    """'allowed', 'permission_required' or 'team_forbidden' (the users are members of team red)."""
    granted = set().union(*(roles.ROLES[r] for r in ROLE_USERS[role])) if ROLE_USERS[role] else set()
    if op.permission not in granted:
        return "permission_required"
    if op.scope in ("object", "new") and team != "red" and roles.ANY_TEAM not in granted:
        return "team_forbidden"
    return "allowed"


def _listed_teams(op: Op, body) -> set[str]:
    if op.name == "compute list":
        return set(ComputeJob.objects.filter(pk__in=[j["id"] for j in body]).values_list("team", flat=True))
    if op.name == "run list":
        return set(PipelineRun.objects.filter(pk__in=[r["id"] for r in body["results"]])
                   .values_list("team", flat=True))
    return {item["team"] for item in body["results"]}


@pytest.mark.parametrize("team", TEAMS)
@pytest.mark.parametrize("role", list(ROLE_USERS))
def test_role_by_operation_by_team(role, team, users, estate, bundle):
    client = client_for(users[role])
    for op in OPS:
        expected = _expected(role, op, team)
        body = op.body(estate, team, bundle) if op.body else None
        before = table_fingerprint() if expected != "allowed" else None
        response = getattr(client, op.method)(f"{V1}{op.path(estate, team)}", body, format="json")
        where = f"{role} / {op.name} / team {team}: {response.status_code} {response.content[:300]!r}"
        if expected == "allowed":
            assert response.status_code < 400, where
            if op.scope == "list":
                # Staff admins see every team's work; everyone else exactly their own team's.
                expected_teams = {"red", "blue"} if role == "admin" else {"red"}
                assert _listed_teams(op, response.json()) == expected_teams, where
            continue
        assert response.status_code == 403, where
        payload = response.json()
        assert payload["code"] == expected, where
        if expected == "permission_required":
            assert payload["permission"] == op.permission and op.permission in payload["detail"], where
        assert changed_tables(before, table_fingerprint()) == [], where


def test_a_user_of_several_teams_must_name_one(users, estate):
    user = grant(users["submitter"], teams=("blue",))
    client = client_for(user)
    body = compute_body("", "which")
    del body["team"]
    before = table_fingerprint()
    response = client.post(f"{V1}/compute/jobs", body, format="json")
    assert response.status_code == 400 and response.json()["code"] == "team_required"
    assert response.json()["field"] == "team" and "blue, red" in response.json()["detail"]
    assert changed_tables(before, table_fingerprint()) == []
    assert client.post(f"{V1}/compute/jobs", {**body, "team": "blue"}, format="json").status_code == 201


def test_a_user_of_one_team_submits_for_it_by_default(users, estate):
    body = compute_body("", "implicit")
    del body["team"]
    response = client_for(users["submitter"]).post(f"{V1}/compute/jobs", body, format="json")
    assert response.status_code == 201
    assert ComputeJob.objects.get(pk=response.json()["id"]).team == "red"


def test_a_user_of_no_team_cannot_submit(db, estate):
    loner = client_for(grant(UserFactory(username="loner", is_staff=False), roles.SUBMITTER))
    before = table_fingerprint()
    response = loner.post(f"{V1}/compute/jobs", compute_body("", "x") | {"team": ""}, format="json")
    assert response.status_code == 403 and response.json()["code"] == "no_team"
    assert changed_tables(before, table_fingerprint()) == []
    assert loner.get(f"{V1}/compute/jobs").json() == []  # and sees no team's work
