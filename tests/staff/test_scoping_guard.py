"""Nothing under apps/staff reads a team-owned model without the acting user: the views and the staff API
name no team-owned model at all (they call ``apps.staff.selectors``), and every selector function that
names one takes ``user`` first — except the few helpers listed here, each of which only reads rows for
ids it is handed by a scoped caller, or counts without names. A new page (or a new selector) that reads
team-owned work some other way fails this test.

Taking the user is not filtering by it: every selector that takes the user is also called, as one team's
viewer, over two teams' work (the same work for each), and must show that team's rows and none of the
other's (``SCOPED``; a selector that takes the user and has no such check fails too)."""
from __future__ import annotations

import ast
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from apps.accounts.roles import VIEWER
from apps.accounts.selectors import OTHER_TEAMS
from apps.compute.selectors import FLAG as COMPUTE
from apps.compute.services import compute_job_submit
from apps.core.errors import ForestError
from apps.flags.services import flag_override_set
from apps.placement.models import ExecutionPlacement
from apps.staff import selectors
from tests.factories import UserFactory, entitlement, grant
from tests.pipelines.graphs import IMAGE

STAFF = Path(__file__).resolve().parents[2] / "apps" / "staff"
TEAM_OWNED = {"PipelineRun", "PipelineNode", "ExecutionPlacement", "ComputeJob", "NativeWorkload",
              "WorkloadGeneration", "GroveJob", "AcceleratorEntitlement", "AcceleratorClaim", "AcceleratorUsage",
              "PipelineNodeEvent", "ArtifactPlatformCheck"}
# function → why it may read without a user
HELPERS = {
    "subjects_describe": "describes the placements it is handed (already scoped by the caller)",
    "placement_node": "the node of a placement the caller already authorised",
    "run_node_counts": "counts the nodes of the runs it is handed (one page of a scoped list)",
    "output_tail": "the output of the nodes it is handed (of a run or job the caller already authorised)",
    "compute_jobs_by_run": "names the compute jobs of the runs it is handed (a run the caller already authorised)",
    "_counts": "fleet-wide counts without names; team names pass through team_label in refusal_report",
    "refused_sql": "reads nothing: SQL fragments naming the placement table's columns (from its _meta)",
}
PAGES = [STAFF / "views.py", STAFF / "api" / "views.py", STAFF / "api" / "plan.py", STAFF / "tables.py"]


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def test_pages_and_the_staff_api_name_no_team_owned_model_in_code():
    for path in PAGES:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                used = _names(node) & TEAM_OWNED
                assert not used, f"{path.name}:{node.name} reads {used} itself; call an apps.staff.selectors " \
                                 "function that takes the user"


def test_every_selector_reading_team_owned_work_takes_the_user_first():
    tree = ast.parse((STAFF / "selectors.py").read_text())
    excused = set()
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or not (_names(node) & TEAM_OWNED):
            continue
        params = [a.arg for a in node.args.posonlyargs + node.args.args]
        if params[:1] == ["user"]:
            continue
        assert node.name in HELPERS, f"selectors.{node.name} reads team-owned work without taking the user first"
        excused.add(node.name)
    assert excused == set(HELPERS), f"stale exceptions: {set(HELPERS) - excused}"


# --- and that they filter by it: two teams' rows, read as one team's viewer ------------------------------

def _teams(rows) -> set[str]:
    return {row.team for row in rows}


def _refused(call) -> str:
    with pytest.raises(ForestError) as refused:
        call()
    return refused.value.code


# selector → a check of it as red's viewer, in a world where red and blue each have the same work; each returns
# True when red sees red's work and nothing of blue's (an assertion inside says which part failed).
def _grove_detail(user, world):
    detail = selectors.grove_detail(user, slug=world["grove"].slug)
    assert {node.run.team for node in detail.running_jobs} == {"red"}
    assert detail.running_elsewhere == 1  # blue's job: counted, not listed
    return True


def _recent(user, world):
    assert _teams(selectors.grove_recent_placements(user, grove=world["grove"])) == {"red"}
    return True


def _team_usage(user, world):
    assert {row.entitlement.team for row in selectors.team_usage(user)} == {"red"}
    return True


def _placement_get(user, world):
    assert selectors.placement_get(user, pk=world["red"]["placement"].pk).team == "red"
    assert _refused(lambda: selectors.placement_get(user, pk=world["blue"]["placement"].pk)) == "team_forbidden"
    return True


def _run_detail(user, world):
    assert selectors.run_detail(user, run_id=world["red"]["run"].id)[0].team == "red"
    assert _refused(lambda: selectors.run_detail(user, run_id=world["blue"]["run"].id)) == "team_forbidden"
    return True


def _compute_job(select):
    def check(user, world):
        assert select(user, job_id=world["red"]["job"].id) is not None
        assert _refused(lambda: select(user, job_id=world["blue"]["job"].id)) == "team_forbidden"
        return True
    return check


def _refusal_report(user, world):
    now = timezone.now()
    report = selectors.refusal_report(user, since=now - timedelta(days=1), until=now + timedelta(minutes=1))
    labels = {label for label, _n in report.by_team}
    assert "red" in labels and "blue" not in labels and OTHER_TEAMS in labels
    return True


SCOPED = {
    "grove_detail": _grove_detail,
    "grove_recent_placements": _recent,
    "team_usage": _team_usage,
    "placement_rows": lambda user, world: _teams(selectors.placement_rows(user)) == {"red"},
    "placement_get": _placement_get,
    "refused_placements": lambda user, world: _teams(selectors.refused_placements(user)) == {"red"},
    "run_rows": lambda user, world: _teams(selectors.run_rows(user)) == {"red"},
    "run_detail": _run_detail,
    "compute_job_rows": lambda user, world: {job.team for job in selectors.compute_job_rows(user)} == {"red"},
    "compute_job_detail": _compute_job(selectors.compute_job_detail),
    "compute_job_page": _compute_job(lambda user, job_id: selectors.compute_job_page(user, job_id=job_id).job),
    "refusal_report": _refusal_report,
    "_running_here": lambda user, world: {n.run.team for n in selectors._running_here(user, world["grove"])[0]}
    == {"red"},
    "_sees": lambda user, world: selectors._sees(user, "red") and not selectors._sees(user, "blue"),
    "_by_label": lambda user, world: dict(selectors._by_label(user, [("red", 1), ("blue", 2)])) ==
    {"red": 1, OTHER_TEAMS: 2},
}


def test_every_selector_taking_the_user_has_a_two_team_check():
    tree = ast.parse((STAFF / "selectors.py").read_text())
    takes_user = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)
                  and [a.arg for a in node.args.posonlyargs + node.args.args][:1] == ["user"]}
    assert takes_user == set(SCOPED), ("each selector that takes the user needs a check here that it shows one "
                                       f"team's rows and not another's: {takes_user ^ set(SCOPED)}")


@pytest.fixture
def world(dispatched_run, estate):
    """Red and blue each: a compute run with a dispatched step and a would-refuse one (its placement), a
    compute job, and an accelerator entitlement; the run's dispatched step is live on the same Grove."""
    flag_override_set(name=COMPUTE, enabled=True, reason="test")
    made = {}
    for team in ("red", "blue"):
        run = dispatched_run(team)
        placement = ExecutionPlacement.objects.filter(team=team).order_by("id").first()
        job = compute_job_submit(body={"name": f"{team}-job", "team": team,
                                       "steps": [{"name": "s", "kind": "container", "image": IMAGE,
                                                  "command": ["true"]}]})
        entitlement(team=team, max_concurrent=1)
        made[team] = {"run": run, "placement": placement, "job": job}
    made["grove"] = estate[0]
    return made


@pytest.mark.django_db
def test_each_selector_shows_one_teams_rows_and_not_anothers(world):
    """One world, every check (each names itself when it fails)."""
    red_viewer = grant(UserFactory(), VIEWER, teams=("red",))
    failed = {}
    for name, check in SCOPED.items():
        try:
            if check(red_viewer, world) is not True:
                failed[name] = "shows another team's rows, or not its own"
        except AssertionError as exc:
            failed[name] = str(exc)
    assert not failed, failed
