"""Scoring policies through the HTTP API (``POST placements/batch``, ``placements/preview``, the Grove admin):
spread across equal Groves, bin-pack filling one first, a staff preference moving work, run spread, "why
here" in every explanation; and a permanent refusal never answered from a stale fleet view."""
from __future__ import annotations

from collections import Counter

import pytest
from rest_framework.test import APIClient

from apps.accounts.models import AuditEvent
from apps.groves.models import Grove
from apps.placement import services, snapshot
from apps.placement.requirements import ExecutionRequirement
from tests.factories import GIB, UserFactory, api_token_for, unit

pytestmark = pytest.mark.django_db
URL = "/api/forest/v1/placements"
BIG = [unit("node", cpu=64000, mem_gib=256)]


@pytest.fixture
def admin_user(db):
    return UserFactory(username="ops", is_staff=True, is_superuser=True)


@pytest.fixture
def ci(admin_user) -> APIClient:
    """A user who may place (``placement.add_executionplacement``), through the API with a token."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_for(admin_user)}")
    return client


def requirement(cpu: int = 1000, memory_gib: int = 1) -> dict:
    return {"family": "build", "resources": {"cpu_milli": cpu, "memory_bytes": memory_gib * GIB},
            "compatibility": {"platform": {"allowed": ["linux/amd64"], "sources": ["ci"]},
                              "artifact_kind": "oci_image", "change_kind": "k8s.job", "isolation": "container"}}


def place(client, count: int, *, prefix: str = "job", group: str | None = None, cpu: int = 1000) -> list[dict]:
    items = [{"subject_type": "compute_step", "subject_id": f"{prefix}-{i}", "requirement": requirement(cpu),
              **({"group": group} if group else {})} for i in range(count)]
    response = client.post(f"{URL}/batch", {"items": items}, format="json")
    assert response.status_code == 200, response.content
    return response.json()["results"]


def test_spread_shares_identical_work_evenly_across_equal_groves(ci, make_grove):
    for i in range(10):
        make_grove(f"eq-{i}", units=BIG)
    results = place(ci, 100)
    shares = Counter(r["grove_slug"] for r in results)
    # The best of a sample of eight per subject (power of choices): within a job of the even share.
    assert len(shares) == 10 and max(shares.values()) <= 1.2 * 10 and min(shares.values()) >= 8, shares
    detail = ci.get(URL, {"subject_id": "job-7"}).json()["results"][0]["decision"]
    scores = detail["scores"]
    assert scores["policy"] == "spread" and scores["weights"]["binpack"] == 0
    assert set(scores["chosen"]) >= {"platform", "spread", "binpack", "run_spread", "preference", "total"}
    assert scores["why"].startswith(f"{scores['chosen']['grove_slug']} chosen over {scores['runner_up']['grove_slug']}")
    assert detail["candidates"][0]["score"]["total"] == scores["chosen"]["total"]


def test_bin_pack_fills_one_grove_before_the_next(ci, make_grove, settings):
    settings.PLACEMENT_POLICY = {**settings.PLACEMENT_POLICY, "build": "binpack"}
    for i in range(3):
        make_grove(f"bp-{i}", units=[unit("node", cpu=4000, mem_gib=16)])
    results = place(ci, 6)
    order = [r["grove_slug"] for r in results]
    assert len(set(order[:4])) == 1 and len(set(order[4:])) == 1 and order[0] != order[4], order
    assert sorted(Counter(order).values()) == [2, 4]


@pytest.mark.parametrize("policy, units, fifth", [("spread", ["u0", "u1", "u0", "u1"], "u0"),
                                                  ("binpack", ["u0"] * 4, "u1")])
def test_the_unit_within_the_grove_follows_the_policy(ci, make_grove, settings, policy, units, fifth):
    """Spread takes the least allocated unit that holds the work (the first on equal shares), as it takes
    the least allocated Grove; bin-pack fills the Grove's first unit first. In one batch, then one subject
    previewed over the API and placed through the single write path (pipeline dispatch's): the same unit."""
    settings.PLACEMENT_POLICY = {**settings.PLACEMENT_POLICY, "build": policy}
    make_grove("two-units", units=[unit("u0", cpu=16000, mem_gib=64), unit("u1", cpu=16000, mem_gib=64)])
    place(ci, 4, cpu=4000)

    def unit_of(subject: str) -> str:  # the chosen Grove's verdict, first of the explained candidates
        return ci.get(URL, {"subject_id": subject}).json()["results"][0]["decision"]["candidates"][0]["fit"]["unit_id"]

    assert [unit_of(f"job-{i}") for i in range(4)] == units
    snapshot.fleet_refresh(full=True)
    preview = ci.post(f"{URL}/preview", requirement(4000), format="json")
    assert preview.status_code == 200, preview.content
    assert preview.json()["candidates"][0]["fit"]["unit_id"] == fifth
    services.place_execution(subject_type="compute_step", subject_id="one",
                             requirement=ExecutionRequirement.from_json(requirement(4000)))
    assert unit_of("one") == fifth


def _admin_post(client, grove: Grove, **changes) -> None:
    """Save the Grove's admin change form as it is shown, with ``changes`` (the inline forms included)."""
    url = f"/admin/groves/grove/{grove.pk}/change/"
    page = client.get(url)
    assert page.status_code == 200
    data = {}
    forms = [page.context["adminform"].form]
    for inline in page.context["inline_admin_formsets"]:
        forms += [inline.formset.management_form, *inline.formset.forms]
    for form in forms:
        for field in form:
            value = field.value()
            if value is None or value is False:
                continue
            data[field.html_name] = "on" if value is True else value
    data.update(changes)
    response = client.post(url, data)
    assert response.status_code == 302, getattr(response, "context", None) and response.context["errors"]


def test_a_staff_preference_set_in_admin_moves_work_and_is_audited(client, ci, admin_user, make_grove):
    plain = make_grove("pref-a", units=BIG)
    preferred = make_grove("pref-b", units=BIG)
    before = Counter(r["grove_slug"] for r in place(ci, 10, prefix="before"))
    assert set(before) == {plain.slug, preferred.slug}  # equal Groves share the work
    client.force_login(admin_user)
    _admin_post(client, preferred, placement_preference="100")
    assert Grove.objects.get(pk=preferred.pk).placement_preference == 100
    event = AuditEvent.objects.get(action="grove.change", target_id=str(preferred.pk))
    assert "placement_preference" in event.detail["changed"] and event.actor == admin_user
    after = place(ci, 10, prefix="after")
    assert {r["grove_slug"] for r in after} == {"pref-b"}
    why = ci.get(URL, {"subject_id": "after-0"}).json()["results"][0]["decision"]["scores"]["why"]
    assert why.startswith("pref-b chosen over pref-a by preference (1.00 vs 0.50")


def test_run_spread_keeps_one_runs_steps_apart(ci, make_grove, settings):
    settings.PLACEMENT_POLICY = {**settings.PLACEMENT_POLICY, "build": "binpack"}  # packing pulls them together
    for i in range(3):
        make_grove(f"rs-{i}", units=BIG)
    packed = place(ci, 3, prefix="loose")
    assert len({r["grove_slug"] for r in packed}) == 1  # no group: bin-pack puts them on one Grove
    spread = place(ci, 3, prefix="step", group="run:r1")
    assert len({r["grove_slug"] for r in spread}) == 3  # one run's steps: one per Grove
    decision = ci.get(URL, {"subject_id": "step-2"}).json()["results"][0]["decision"]
    assert decision["scores"]["chosen"]["run_spread"] == 1.0 and decision["scores"]["runner_up"]["run_spread"] == 0.5
    # A preview for the next step of the same run (its subject and group) sees the run's placements too.
    preview = ci.post(f"{URL}/preview?subject_type=compute_step&subject_id=step-3&group=run:r1",
                                requirement(), format="json").json()
    assert preview["scores"]["chosen"]["run_spread"] == 0.5


@pytest.mark.parametrize("door", ["plan_check", "preview"])
def test_a_permanent_refusal_is_never_issued_from_a_stale_view(ci, make_grove, settings, door):
    """The repro: two Groves enrolled and heartbeated, then at once a 16-CPU job on 8-CPU Groves. A fleet view
    from before they enrolled answered ``no_fresh_grove``; the refusal is now decided on a refreshed view.
    Each door starts from the stale view itself (one door's refresh must not make the other's test pass)."""
    settings.PLACEMENT_FLEET_REFRESH_S = 3600
    snapshot.fleet_refresh(full=True)  # the process's view: no Grove yet
    make_grove("eight-a", units=[unit("node", cpu=8000)])
    make_grove("eight-b", units=[unit("node", cpu=8000)])
    assert snapshot.candidates(ExecutionRequirement.from_json(requirement(cpu=4000)), limit=5).eligible == []
    if door == "plan_check":
        big = ExecutionRequirement.from_json(requirement(cpu=16000))
        check = services.placement_plan_check(requirement=big)
        assert check.never_placeable and {r["code"] for r in check.reasons} == {"resources_never_fit"}, check.reasons
    else:
        preview = ci.post(f"{URL}/preview", requirement(cpu=16000), format="json").json()
        assert preview["outcome"] == "refused" and preview["refusal"]["code"] == "resources_never_fit", preview
        small = ci.post(f"{URL}/preview", requirement(cpu=4000), format="json").json()
        assert small["outcome"] == "placed"


def test_a_permanent_refusal_from_a_fresh_view_names_the_resources(make_grove):
    make_grove("eight", units=[unit("node", cpu=8000)])
    check = services.placement_plan_check(requirement=ExecutionRequirement.from_json(requirement(cpu=16000)))
    assert [r["code"] for r in check.reasons] == ["resources_never_fit"]


def test_the_batch_endpoint_turns_the_collector_off_once_for_parse_and_placement(ci, make_grove, monkeypatch):
    """``POST placements/batch`` parses its body and places inside one pause: the collector goes off once and
    back on once per request. (The parser's own pause ending before the placement's began turned it on over
    the freshly parsed items, and the next allocation paid for a collection of them.)"""
    import gc

    from apps.core import gcpause

    make_grove("a", units=BIG)
    calls: list[str] = []

    class Recorder:
        def isenabled(self) -> bool:
            return gc.isenabled()

        def disable(self) -> None:
            calls.append("off")
            gc.disable()

        def enable(self) -> None:
            calls.append("on")
            gc.enable()

        def freeze(self) -> None:
            gc.freeze()

        def unfreeze(self) -> None:
            gc.unfreeze()

    monkeypatch.setattr(gcpause, "gc", Recorder())
    items = [{"subject_type": "compute_step", "subject_id": f"g-{i}", "requirement": requirement()} for i in range(3)]
    response = ci.post("/api/forest/v1/placements/batch", {"items": items}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["placed"] == 3
    assert calls == ["off", "on"]
