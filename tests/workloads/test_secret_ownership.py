"""Issue 33 (follow-up): workload secrets belong to a team. Over real HTTP against a live Host on
PostgreSQL, two teams (``red``, ``blue``), each with a viewer and a workload operator, and two native Groves:
another team writing the same (environment, name) makes its own secret and never touches the first; a
workload resolves only its own team's secrets (a team-less workload only team-less ones); a Grove's
``changes`` carries only the secrets of the generations it runs; no answer differs by whether another team
holds the name; racing writers of one secret all get a clean 201; the admin lists a team's secrets only.
Every refused call is checked to have changed nothing in the whole database (``tests.fingerprint``)."""
from __future__ import annotations

import threading

import httpx
import pytest
from django.test import Client

from apps.accounts import roles
from apps.workloads import secrets
from apps.workloads.models import WorkloadSecret
from tests.artifacts.conftest import signed_bundle
from tests.factories import UserFactory, api_token_for, grant
from tests.fingerprint import changed_tables, table_fingerprint

pytestmark = pytest.mark.django_db(transaction=True)
V1 = "/api/forest/v1"
ROLES = {"viewer": roles.VIEWER, "operator": roles.WORKLOAD_OPERATOR}


@pytest.fixture
def users(db):
    made = {(team, name): grant(UserFactory(username=f"{team}-{name}"), role, teams=(team,))
            for team in ("red", "blue") for name, role in ROLES.items()}
    made[("staff", "admin")] = grant(UserFactory(username="staff-admin"), roles.STAFF_ADMIN)
    return made


@pytest.fixture
def http(live_server, users):
    """``http[team][role]``: an httpx client against the live Host with that user's API token
    (``http["staff"]["admin"]``: a staff admin, who may write team-less secrets)."""
    clients: dict[str, dict[str, httpx.Client]] = {}
    for (team, name), user in users.items():
        clients.setdefault(team, {})[name] = httpx.Client(
            base_url=f"{live_server.url}{V1}", timeout=30, headers={"Authorization": f"Token {api_token_for(user)}"})
    yield clients
    for by_role in clients.values():
        for client in by_role.values():
            client.close()


@pytest.fixture
def groves(settings, fresh_grove):
    """One native runtime Grove per team (workloads are pinned to them), with their credentials."""
    settings.FOREST_NATIVE_WORKLOAD_DISPATCH = True
    return {team: fresh_grove(name=f"mac-{team}", roles=("runtime",), platforms=("darwin/arm64",),
                              change_kinds=["native.job", "native.workload"])
            for team in ("red", "blue", "shared")}


def _set(client: httpx.Client, name: str, value: str, **extra) -> httpx.Response:
    return client.post("/workloads/secrets", json={"environment": "prod", "name": name, "value": value, **extra})


def _row(team: str, name: str = "API_TOKEN", environment: str = "prod") -> dict | None:
    row = WorkloadSecret.objects.filter(team=team, environment=environment, name=name).values(
        "pk", "ciphertext", "updated_at").first()
    if row is not None:
        row["ciphertext"] = bytes(row["ciphertext"])
    return row


def _value(team: str, name: str = "API_TOKEN", environment: str = "prod") -> str:
    return secrets.decrypt(WorkloadSecret.objects.get(team=team, environment=environment, name=name).ciphertext)


def _workload(slug: str, bundle, grove, **extra) -> dict:
    return {"slug": slug, "environment": "prod", "bundle_digest": bundle.digest, "command": ["./server"],
            "secret_refs": ["API_TOKEN"], "grove": grove[0].slug, **extra}


def _changes(live_server, grove) -> dict:
    """The Grove's ``changes`` answer, read with its own credential over HTTP."""
    grove_row, credential = grove
    response = httpx.get(f"{live_server.url}{V1}/groves/{grove_row.id}/changes", params={"wait": 0}, timeout=30,
                         headers={"Authorization": f"Bearer {credential}"})
    assert response.status_code == 200, response.text
    return response.json()


# --- writes: a team's own row, never another team's ---------------------------------------------------------

def test_another_team_writing_the_same_name_makes_its_own_secret_and_never_touches_the_first(http):
    made = _set(http["red"]["operator"], "API_TOKEN", "red-value")
    assert made.status_code == 201, made.text
    assert made.json() == {"team": "red", "environment": "prod", "name": "API_TOKEN"}
    red_before = _row("red")

    again = _set(http["blue"]["operator"], "API_TOKEN", "blue-value")
    assert again.status_code == 201, again.text
    # The answer is the one a name nobody holds gets: nothing in it says red has this name.
    fresh = _set(http["blue"]["operator"], "NOBODY_HAS_THIS", "v")
    assert again.json() == {"team": "blue", "environment": "prod", "name": "API_TOKEN"}
    assert (again.status_code, set(again.json())) == (fresh.status_code, set(fresh.json()))
    assert "red" not in again.text
    assert _row("red") == red_before and _value("red") == "red-value"
    assert _value("blue") == "blue-value" and _row("blue")["pk"] != red_before["pk"]

    # A second write by blue replaces blue's value, still not red's.
    assert _set(http["blue"]["operator"], "API_TOKEN", "blue-rotated").status_code == 201
    assert _value("blue") == "blue-rotated" and _row("red") == red_before
    assert WorkloadSecret.objects.filter(environment="prod", name="API_TOKEN").count() == 2


@pytest.mark.parametrize(("role", "extra", "code"), [
    ("operator", {"team": "red"}, "team_forbidden"),  # blue's operator naming red, which holds the name
    ("operator", {"team": "green"}, "team_forbidden"),  # ... or a team nobody is in: the same answer
    ("viewer", {}, "permission_required"),  # blue's viewer may not set secrets at all
])
def test_a_refused_write_changes_nothing(http, role, extra, code):
    _set(http["red"]["operator"], "API_TOKEN", "red-value")
    before = table_fingerprint()
    refused = _set(http["blue"][role], "API_TOKEN", "hijack", **extra)
    assert (refused.status_code, refused.json()["code"]) == (403, code), refused.text
    assert changed_tables(before, table_fingerprint()) == []
    assert _value("red") == "red-value"


def test_a_member_without_a_team_choice_writes_for_its_only_team_and_staff_may_write_team_less(http):
    assert _set(http["blue"]["operator"], "API_TOKEN", "b", team="").json()["team"] == "blue"
    staff = _set(http["staff"]["admin"], "API_TOKEN", "legacy")
    assert staff.status_code == 201 and staff.json()["team"] == ""
    assert _set(http["staff"]["admin"], "API_TOKEN", "for-red", team="red").json()["team"] == "red"
    assert (_value(""), _value("blue"), _value("red")) == ("legacy", "b", "for-red")


# --- reads: a workload resolves its own team's secrets; a Grove gets only its generations' --------------------

def test_a_workload_resolves_only_its_own_teams_secret(http, live_server, groves):
    bundle = signed_bundle(b"a shared bundle")  # team-less: every team may run it
    _set(http["red"]["operator"], "API_TOKEN", "red-value")

    # Red holds API_TOKEN in prod; blue does not: blue's apply is refused exactly as for a name nobody holds.
    before = table_fingerprint()
    refused = http["blue"]["operator"].post("/workloads", json=_workload("blue-web", bundle, groves["blue"]))
    nobody = http["blue"]["operator"].post("/workloads", json=_workload(
        "blue-web", bundle, groves["blue"], secret_refs=["NOBODY_HAS_THIS"]))
    assert (refused.status_code, refused.json()["code"], refused.json()["field"]) == (
        400, "secret_missing", "secret_refs"), refused.text
    assert refused.json()["detail"] == nobody.json()["detail"].replace("NOBODY_HAS_THIS", "API_TOKEN")
    assert "red" not in refused.text
    assert changed_tables(before, table_fingerprint()) == []

    _set(http["blue"]["operator"], "API_TOKEN", "blue-value")
    assert http["blue"]["operator"].post("/workloads", json=_workload(
        "blue-web", bundle, groves["blue"])).status_code == 200
    assert http["red"]["operator"].post("/workloads", json=_workload(
        "red-web", bundle, groves["red"])).status_code == 200
    # A team-less row (staff, or written before secrets had a team) is read by team-less workloads only.
    _set(http["staff"]["admin"], "API_TOKEN", "legacy-value")
    assert http["staff"]["admin"].post("/workloads", json=_workload(
        "shared-web", bundle, groves["shared"])).status_code == 200

    seen = {}
    for team in ("red", "blue", "shared"):
        answer = _changes(live_server, groves[team])
        seen[team] = {item["workload"]: item["secrets"] for item in answer["workloads"]}
    assert seen == {"red": {"red-web": {"API_TOKEN": "red-value"}},
                    "blue": {"blue-web": {"API_TOKEN": "blue-value"}},
                    "shared": {"shared-web": {"API_TOKEN": "legacy-value"}}}


def test_a_teams_workload_never_falls_back_to_a_team_less_secret(http, groves):
    bundle = signed_bundle(b"a shared bundle")
    _set(http["staff"]["admin"], "API_TOKEN", "legacy-value")
    before = table_fingerprint()
    refused = http["red"]["operator"].post("/workloads", json=_workload("red-web", bundle, groves["red"]))
    assert (refused.status_code, refused.json()["code"]) == (400, "secret_missing"), refused.text
    assert "legacy-value" not in refused.text
    assert changed_tables(before, table_fingerprint()) == []


# --- racing writers of one secret -----------------------------------------------------------------------------

ROUNDS, WRITERS = 3, 4


def _race(url: str, name: str, writers: list[tuple[str, str]], tokens: dict[str, str]) -> dict[str, httpx.Response]:
    """Each (team, value) writer posts ``name`` at the same moment (a barrier releases them together)."""
    barrier = threading.Barrier(len(writers))
    answers: dict[str, httpx.Response] = {}

    def write(team: str, value: str) -> None:
        barrier.wait(timeout=30)
        answers[value] = httpx.post(url, timeout=60, json={"environment": "prod", "name": name, "value": value},
                                    headers={"Authorization": f"Token {tokens[team]}"})

    threads = [threading.Thread(target=write, args=writer) for writer in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    return answers


def test_racing_writers_of_one_secret_all_get_a_clean_answer(live_server, users):
    tokens = {team: api_token_for(users[(team, "operator")]) for team in ("red", "blue")}
    writers = [(team, f"{team}-{i}") for team in ("red", "blue") for i in range(WRITERS)]
    for round_ in range(ROUNDS):
        name = f"RACE_{round_}"
        answers = _race(f"{live_server.url}{V1}/workloads/secrets", name, writers, tokens)
        assert sorted(a.status_code for a in answers.values()) == [201] * len(writers), {
            v: a.text for v, a in answers.items()}
        # One row per team, each holding one of that team's own values.
        assert _value("red", name).startswith("red-") and _value("blue", name).startswith("blue-")
        assert WorkloadSecret.objects.filter(name=name).count() == 2


# --- admin: a team's secrets only ---------------------------------------------------------------------------

def test_the_admin_lists_and_opens_only_the_teams_own_secrets(http, live_server, users):
    _set(http["red"]["operator"], "RED_ONLY", "r")
    _set(http["blue"]["operator"], "BLUE_ONLY", "b")
    blue_pk = WorkloadSecret.objects.get(name="BLUE_ONLY").pk
    session = Client()
    session.force_login(users[("red", "operator")])
    with httpx.Client(base_url=live_server.url, timeout=30, follow_redirects=False,
                      cookies={"sessionid": session.cookies["sessionid"].value}) as admin:
        listing = admin.get("/admin/workloads/workloadsecret/")
        assert listing.status_code == 200 and "RED_ONLY" in listing.text and "BLUE_ONLY" not in listing.text
        assert admin.get("/admin/workloads/workloadsecret/", params={"q": "BLUE"}).text.count("BLUE_ONLY") == 0
        assert admin.get(f"/admin/workloads/workloadsecret/{blue_pk}/change/").status_code == 403
        assert admin.get(f"/admin/workloads/workloadsecret/{blue_pk}/delete/").status_code == 403
    assert WorkloadSecret.objects.filter(pk=blue_pk).exists()
