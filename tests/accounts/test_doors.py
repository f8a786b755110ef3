"""The permission table of docs/permissions.md, enforced: this test reads the table from the document and,
for every row (action x door) and every role, acts as a member of team ``red`` on team ``red``'s and team
``blue``'s work through that door — the API, the staff pages, their CSV export, the staff API, the admin
site — and checks the answer: ``own`` (red allowed or listed, blue refused with 403 ``team_forbidden`` or
absent), ``all`` (both), ``no`` (refused, nothing changed). A row without a probe here, or a probe without
a row there, fails too: the table and the code cannot drift apart."""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from apps.accelerators.models import AcceleratorEntitlement
from apps.accounts.models import ApiToken
from apps.compute.models import ComputeJob
from apps.flags.models import FlagOverride
from apps.flags.services import flag_override_set
from apps.groves.models import Grove, GroveCredential
from apps.pipelines.models import PipelineNode, PipelineRun
from apps.pipelines.services import pipeline_node_execute
from apps.placement.models import ExecutionPlacement
from tests.estate import PREVIEW, TEAMS, client_for, run_body
from tests.factories import UserFactory, api_token_for
from tests.fingerprint import changed_tables, table_fingerprint

pytestmark = pytest.mark.django_db
DOC = Path(__file__).resolve().parents[2] / "docs" / "permissions.md"
V1 = "/api/forest/v1"
ROLE_COLUMNS = {"viewer": "viewer", "submitter": "submitter", "workload operator": "operator",
                "staff admin": "admin"}
CELLS = {"own", "all", "no"}


def permission_table() -> dict[tuple[str, str], dict[str, str]]:
    """(action, door) → {role user: cell}, parsed from the table between the markers in docs/permissions.md."""
    text = DOC.read_text()
    body = text.split("<!-- permission-table:start -->")[1].split("<!-- permission-table:end -->")[0]
    lines = [line.strip() for line in body.strip().splitlines()]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header[:2] == ["action", "door"] and set(header[2:]) == set(ROLE_COLUMNS), header
    table = {}
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert set(cells[2:]) <= CELLS, line
        assert (cells[0], cells[1]) not in table, f"row twice: {line}"
        table[(cells[0], cells[1])] = {ROLE_COLUMNS[name]: cell for name, cell in zip(header[2:], cells[2:],
                                                                                       strict=True)}
    return table


TABLE = permission_table()


# --- the estate: each team's run dispatched to a Grove, its placement a would-refuse ------------------------

@pytest.fixture
def doors(estate, settings):
    flag_override_set(name="host.staff.execution_observability", enabled=True, reason="test")
    for team in TEAMS:
        for node in PipelineNode.objects.filter(run=estate[team]["run"], status="queued"):
            pipeline_node_execute(node_id=node.pk)
        ExecutionPlacement.objects.filter(pk=estate[team]["placement"].pk).update(would_refuse=True)
    # Admin-only objects each probe acts on (a token and a Grove credential per team's column).
    for team, grove in zip(TEAMS, ("kube", "mac"), strict=True):
        estate[team]["token"] = api_token_for(UserFactory(username=f"holder-{team}"), name=f"door-{team}")
        estate[team]["credential"] = GroveCredential.objects.get(grove=Grove.objects.get(slug=grove))
    return estate


def session_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- probes -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Probe:
    """``kind`` "list": ``call(client, estate)`` → (status, text), and ``marker(estate, team)`` is a string in
    the text exactly when that team's work is listed. "one": ``call(client, estate, team)`` → response for
    that team's object; for an action, ``done(estate, team)`` says whether it took effect."""
    kind: str
    session: bool  # a signed-in browser (pages, CSV, admin) or an API token
    call: Callable
    marker: Callable | None = None
    done: Callable | None = None


def _text(response) -> tuple[int, str]:
    content = b"".join(response.streaming_content) if response.streaming else response.content
    return response.status_code, content.decode()


def _by_team_names(text: str) -> str:
    """The names in the refusal report's per-team table (page) or ``by_team`` (staff API)."""
    if text.lstrip().startswith("{"):
        import json

        return " ".join(f"<{row['team']}>" for row in json.loads(text)["by_team"])
    found = re.search(r'id="by-team">(.*?)</table>', text, re.S)
    return " ".join(f"<{name}>" for name in re.findall(r"<tr><td>(.*?)</td>", found.group(1))) if found else ""


def _run_marker(e, t):
    return str(e[t]["run"].id)


def _subject(e, t):
    return e[t]["placement"].subject_id


def _grove_of_run(e, t):
    node = PipelineNode.objects.filter(run=e[t]["run"]).exclude(grove=None).select_related("grove").first()
    return node.grove.slug


def _grove_pages(client, e):
    slugs = sorted({_grove_of_run(e, t) for t in TEAMS})
    pages = [_text(client.get(reverse("staff:grove-detail", args=[slug]))) for slug in slugs]
    return max(status for status, _ in pages), "".join(text for _, text in pages)


def _run_status(e, t):
    return PipelineRun.objects.get(pk=e[t]["run"].pk).status == "cancelled"


def _job_cancelled(e, t):
    return PipelineRun.objects.get(pk=ComputeJob.objects.get(pk=e[t]["job_to_cancel"].pk).run_id).status == "cancelled"


def _replaced(e, t):
    return bool(ExecutionPlacement.objects.get(pk=e[t]["placement"].pk).history)


def _admin(name: str, *args) -> str:
    return reverse(f"admin:{name}", args=args)


FLAG_TOGGLED = {"red": "host.deploy.forest_compatibility", "blue": "host.deploy.forest_compute_jobs"}


def _action(changelist: str, action: str, pk, **extra):
    return lambda c, e, t: c.post(_admin(changelist), {"action": action, "_selected_action": [pk(e, t)],
                                                       "index": 0, **extra})


def _flag_on(e, t):
    return FlagOverride.objects.filter(flag_id=FLAG_TOGGLED[t], scope="global", enabled=False).exists()


def _entitled(e, t):
    return AcceleratorEntitlement.objects.filter(team=t, note="door test").exists()


def _token_revoked(e, t):
    return ApiToken.objects.get(key_id=e[t]["token"].partition("_")[2].partition(".")[0]).revoked_at is not None


def _credential_revoked(e, t):
    return GroveCredential.objects.get(pk=e[t]["credential"].pk).revoked_at is not None


PROBES: dict[tuple[str, str], Probe] = {
    ("list runs", "api"): Probe("list", False, lambda c, e: _text(c.get(f"{V1}/pipelines/runs")), _run_marker),
    ("list runs", "staff page"): Probe("list", True, lambda c, e: _text(c.get(reverse("staff:run-list"))),
                                       _run_marker),
    ("list runs", "staff csv"): Probe("list", True, lambda c, e: _text(
        c.get(reverse("staff:run-list") + "?_export=csv")), _run_marker),
    ("list runs", "admin"): Probe("list", True, lambda c, e: _text(c.get(_admin("pipelines_pipelinerun_changelist"))),
                                  _run_marker),
    ("read run", "api"): Probe("one", False, lambda c, e, t: c.get(f"{V1}/pipelines/runs/{e[t]['run'].id}")),
    ("read run", "staff page"): Probe("one", True, lambda c, e, t: c.get(reverse("staff:run-detail",
                                                                                 args=[e[t]["run"].id]))),
    ("read run", "admin"): Probe("one", True, lambda c, e, t: c.get(_admin("pipelines_pipelinerun_change",
                                                                           e[t]["run"].id))),
    ("cancel run", "api"): Probe("one", False, lambda c, e, t: c.post(f"{V1}/pipelines/runs/{e[t]['run'].id}/cancel"),
                                 done=_run_status),
    ("cancel run", "staff page"): Probe("one", True, lambda c, e, t: c.post(
        reverse("staff:run-cancel", args=[e[t]["run"].id]), {"reason": "door test"}), done=_run_status),
    ("list placements", "api"): Probe("list", False, lambda c, e: _text(c.get(f"{V1}/placements")), _subject),
    ("list placements", "staff page"): Probe("list", True, lambda c, e: _text(c.get(reverse("staff:placement-list"))),
                                             _subject),
    ("list placements", "staff csv"): Probe("list", True, lambda c, e: _text(
        c.get(reverse("staff:placement-list") + "?_export=csv")), _subject),
    ("list placements", "staff api"): Probe("list", False, lambda c, e: _text(c.get(f"{V1}/staff/placements")),
                                            _subject),
    ("list placements", "admin"): Probe("list", True, lambda c, e: _text(
        c.get(_admin("placement_executionplacement_changelist"))), _subject),
    ("read placement", "api"): Probe("one", False, lambda c, e, t: c.get(f"{V1}/placements/{e[t]['placement'].pk}")),
    ("read placement", "staff page"): Probe("one", True, lambda c, e, t: c.get(
        reverse("staff:placement-detail", args=[e[t]["placement"].pk]))),
    ("read placement", "admin"): Probe("one", True, lambda c, e, t: c.get(
        _admin("placement_executionplacement_change", e[t]["placement"].pk))),
    ("re-place", "api"): Probe("one", False, lambda c, e, t: c.post(
        f"{V1}/placements/{e[t]['placement'].pk}/replace", {"reason": "door test"}, format="json"), done=_replaced),
    ("re-place", "admin"): Probe("one", True, lambda c, e, t: c.post(
        _admin("placement_executionplacement_changelist"),
        {"action": "replace", "_selected_action": [e[t]["placement"].pk], "index": 0}), done=_replaced),
    ("list refusals", "staff page"): Probe("list", True, lambda c, e: _text(c.get(reverse("staff:refusals"))),
                                           _subject),
    ("list refusals", "staff csv"): Probe("list", True, lambda c, e: _text(
        c.get(reverse("staff:refusals") + "?_export=csv")), _subject),
    ("list refusals", "staff api"): Probe("list", False, lambda c, e: _text(
        c.get(f"{V1}/staff/placements?refused=true")), _subject),
    ("name teams in refusal counts", "staff page"): Probe(
        "list", True, lambda c, e: (lambda s, t: (s, _by_team_names(t)))(*_text(c.get(reverse("staff:refusals")))),
        lambda e, t: f"<{t}>"),
    ("name teams in refusal counts", "staff api"): Probe(
        "list", False, lambda c, e: (lambda s, t: (s, _by_team_names(t)))(*_text(c.get(f"{V1}/staff/refusals"))),
        lambda e, t: f"<{t}>"),
    ("list running jobs of a Grove", "staff page"): Probe("list", True, _grove_pages, _run_marker),
    ("list compute jobs", "api"): Probe("list", False, lambda c, e: _text(c.get(f"{V1}/compute/jobs")),
                                        lambda e, t: str(e[t]["job"].id)),
    ("list compute jobs", "admin"): Probe("list", True, lambda c, e: _text(
        c.get(_admin("compute_computejob_changelist"))), lambda e, t: str(e[t]["job"].id)),
    ("read compute job", "api"): Probe("one", False, lambda c, e, t: c.get(f"{V1}/compute/jobs/{e[t]['job'].id}")),
    ("read compute job", "admin"): Probe("one", True, lambda c, e, t: c.get(
        _admin("compute_computejob_change", e[t]["job"].id))),
    ("cancel compute job", "api"): Probe("one", False, lambda c, e, t: c.post(
        f"{V1}/compute/jobs/{e[t]['job_to_cancel'].id}/cancel"), done=_job_cancelled),
    ("list workloads", "api"): Probe("list", False, lambda c, e: _text(c.get(f"{V1}/workloads")),
                                     lambda e, t: f"web-{t}"),
    ("preview a placement for a team", "api"): Probe("one", False, lambda c, e, t: c.post(
        f"{V1}/placements/preview?team={t}", PREVIEW, format="json")),
    ("plan a run for a team", "api"): Probe("one", False, lambda c, e, t: c.post(f"{V1}/plan", run_body(t),
                                                                               format="json")),
    ("toggle a flag", "admin"): Probe("one", True, _action("flags_flag_changelist", "turn_off",
                                                          lambda e, t: FLAG_TOGGLED[t], reason="door test"),
                                      done=_flag_on),
    ("add an accelerator entitlement", "admin"): Probe("one", True, lambda c, e, t: c.post(
        _admin("accelerators_acceleratorentitlement_add"), {"team": t, "api": "cuda", "vendor": "", "period": "month",
                                                            "max_concurrent": "1", "note": "door test"}),
        done=_entitled),
    ("revoke an API token", "admin"): Probe("one", True, _action(
        "accounts_apitoken_changelist", "revoke", lambda e, t: ApiToken.objects.get(
            key_id=e[t]["token"].partition("_")[2].partition(".")[0]).pk), done=_token_revoked),
    ("revoke a Grove credential", "admin"): Probe("one", True, _action(
        "groves_grovecredential_changelist", "revoke", lambda e, t: e[t]["credential"].pk), done=_credential_revoked),
    ("list workloads", "admin"): Probe("list", True, lambda c, e: _text(
        c.get(_admin("workloads_nativeworkload_changelist"))), lambda e, t: f"web-{t}"),
}


def test_every_row_of_the_table_has_a_probe_and_every_probe_a_row():
    assert sorted(TABLE) == sorted(PROBES)


def _code(response) -> str:
    content = response.content.decode(errors="replace")
    if response.get("Content-Type", "").startswith("application/json"):
        return response.json().get("code", "")
    found = re.search(r'data-code="([a-z_]+)"', content)
    return found.group(1) if found else ""


@pytest.mark.parametrize("role", list(ROLE_COLUMNS.values()))
@pytest.mark.parametrize("row", sorted(TABLE), ids=lambda row: f"{row[0]} via {row[1]}")
def test_the_table_holds_at_every_door(row, role, users, doors):
    cell, probe = TABLE[row][role], PROBES[row]
    user = users[role]
    client = session_for(user) if probe.session else client_for(user)
    where = f"{role} / {row[0]} via {row[1]} ({cell})"
    if probe.kind == "list":
        status, text = probe.call(client, doors)
        if cell == "no":
            assert status == 403, where
            return
        assert status == 200, f"{where}: {status} {text[:300]}"
        seen = {team for team in TEAMS if probe.marker(doors, team) in text}
        assert seen == ({"red", "blue"} if cell == "all" else {"red"}), f"{where}: saw {seen}"
        return
    for team in TEAMS:
        allowed = cell == "all" or (cell == "own" and team == "red")
        before = table_fingerprint() if not allowed else None
        response = probe.call(client, doors, team)
        here = f"{where} on team {team}: {response.status_code} {response.content[:300]!r}"
        if allowed:
            assert response.status_code < 400, here
            if probe.done is not None:
                assert probe.done(doors, team), here
            continue
        if probe.done is not None:
            assert not probe.done(doors, team), here
        if row[1] == "admin" and probe.done is not None:
            # Admin does not offer an action the user may not take: posting it is answered "no action".
            assert response.status_code in (200, 302, 403), here
        else:
            assert response.status_code == 403, here
            if row[1] != "admin":
                expected = "permission_required" if cell == "no" else "team_forbidden"
                assert _code(response) == expected, here
        # Audit rows aside (a refusal writes none either), nothing changed.
        assert [t for t in changed_tables(before, table_fingerprint()) if t != "django_session"] == [], here
