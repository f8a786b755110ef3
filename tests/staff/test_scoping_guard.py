"""Nothing under apps/staff reads a team-owned model without the acting user: the views and the staff API
name no team-owned model at all (they call ``apps.staff.selectors``), and every selector function that
names one takes ``user`` first — except the few helpers listed here, each of which only reads rows for
ids it is handed by a scoped caller, or counts without names. A new page (or a new selector) that reads
team-owned work some other way fails this test."""
from __future__ import annotations

import ast
from pathlib import Path

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
