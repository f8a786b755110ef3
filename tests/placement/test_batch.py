"""Batched placement (apps.placement.batch): never overcommits, reuse and uniqueness, compact decisions with
shared verdicts that explain round-trips, the API's per-item errors, the ORM fallback writer."""
from __future__ import annotations

import itertools
from collections import Counter, defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from apps.accounts.roles import VIEWER
from apps.core.errors import ForestError
from apps.groves.models import PlacementUnit
from apps.pipelines.rules import node_requirement
from apps.placement import batch, selectors, services, snapshot, writes
from apps.placement.models import ExecutionPlacement, PlacementVerdicts, UnitLoad
from apps.placement.vocabulary import MAX_BATCH_SIZE
from tests.factories import GIB, UserFactory, api_token_for, grant, nvidia_gpu, unit

pytestmark = pytest.mark.django_db
URL = "/api/forest/v1/placements"
IMAGE = "registry.example/app@sha256:" + "a" * 64


def work(cpu: int = 1000, memory_gib: int = 1, platform=("linux/amd64",), **extra):
    return node_requirement({"id": "n", "kind": "exec", "image": IMAGE, "platform": list(platform),
                             "resources": {"cpu_milli": cpu, "memory_bytes": memory_gib * GIB}, **extra},
                            run_kind="build")


def items(requirements, prefix="s"):
    return [batch.BatchItem(subject_type="pipeline_node", subject_id=f"{prefix}{i}", requirement=r)
            for i, r in enumerate(requirements)]


def used_by_unit() -> dict[tuple[str, str], list[int]]:
    """CPU and memory the stored placements hold per unit, counted from the database."""
    used: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for row in ExecutionPlacement.objects.all():
        unit_id = row.decision.get("unit")
        if unit_id:
            used[(str(row.grove_id), unit_id)][0] += row.requirement["resources"]["cpu_milli"]
            used[(str(row.grove_id), unit_id)][1] += row.requirement["resources"]["memory_bytes"]
    return used


def assert_no_overcommit() -> None:
    free = {(str(u.grove_id), u.unit_id): (u.cpu_milli_free, u.memory_bytes_free) for u in PlacementUnit.objects.all()}
    for key, (cpu, memory) in used_by_unit().items():
        assert cpu <= free[key][0] and memory <= free[key][1], (key, cpu, memory, free[key])


def test_batch_fills_units_and_refuses_the_rest_with_no_capacity(make_grove):
    make_grove("a", units=[unit("a1", cpu=4000, mem_gib=8)])
    make_grove("b", units=[unit("b1", cpu=2000, mem_gib=8), unit("b2", cpu=1000, mem_gib=8)])
    outcomes = batch.place_batch(items([work()] * 9))
    placed = [o for o in outcomes if o.status == "placed"]
    assert len(placed) == 7
    assert Counter(o.grove_slug for o in placed) == {"a": 4, "b": 3}
    assert {o.error.code for o in outcomes if o.error} == {"no_capacity"}
    assert ExecutionPlacement.objects.count() == 7
    assert_no_overcommit()
    loads = {(row.grove.slug, row.unit_id): row.cpu_milli for row in UnitLoad.objects.select_related("grove")}
    assert loads == {("a", "a1"): 4000, ("b", "b1"): 2000, ("b", "b2"): 1000}
    # A second batch sees the ledger (its own process's snapshot and the database agree): nothing fits.
    again = batch.place_batch(items([work()] * 2, prefix="t"))
    assert [o.error.code for o in again] == ["no_capacity", "no_capacity"]


def test_a_new_free_count_report_resets_the_ledger(make_grove):
    grove = make_grove("a", units=[unit("a1", cpu=2000, mem_gib=8)])
    assert [o.status for o in batch.place_batch(items([work()] * 3))] == ["placed", "placed", "error"]
    # The Grove reports again with changed free counts: what Host placed before is in them now.
    from apps.groves import services as grove_services
    body = {"version": "test", "change_kinds": ["k8s.job", "k8s.build_job", "k8s.deployment"],
            "isolation": ["container"], "capacity": {"placement_units": [unit("a1", cpu=2000, mem_gib=8,
                                                                              free_cpu=1000)], "accelerators": []}}
    grove_services.grove_heartbeat_record(grove=grove, body=body)
    assert [o.status for o in batch.place_batch(items([work()] * 2, prefix="t"))] == ["placed", "error"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fleet=st.lists(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=3),
                      min_size=1, max_size=3),
       asks=st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3)), min_size=1, max_size=12))
def test_batch_never_overcommits_any_unit(make_grove, fleet, asks):
    ExecutionPlacement.objects.all().delete()
    UnitLoad.objects.all().delete()
    from apps.groves.models import Grove
    Grove.objects.all().delete()
    snapshot.fleet_refresh(full=True)
    for g, units in enumerate(fleet):
        make_grove(f"g{g}", units=[unit(f"u{u}", cpu=4000, mem_gib=4, free_cpu=cpu * 1000, free_mem_gib=memory)
                                   for u, (cpu, memory) in enumerate(units)])
    outcomes = batch.place_batch(items([work(cpu * 1000, memory) for cpu, memory in asks]))
    assert_no_overcommit()
    # Every refusal is honest: after the batch, no unit has room for the refused work.
    free = {(str(u.grove_id), u.unit_id): [u.cpu_milli_free, u.memory_bytes_free] for u in PlacementUnit.objects.all()}
    for key, (cpu, memory) in used_by_unit().items():
        free[key][0] -= cpu
        free[key][1] -= memory
    for outcome, (cpu, memory) in zip(outcomes, asks, strict=True):
        if outcome.error is not None:
            assert outcome.error.code == "no_capacity"
            assert not any(c >= cpu * 1000 and m >= memory * GIB for c, m in free.values())


def test_gpus_are_assumed_too(make_grove):
    gpus = [nvidia_gpu("GPU-0"), nvidia_gpu("GPU-1")]
    slots = [{"inventory_id": g["id"], "allocatable": 1, "free": 1} for g in gpus]
    make_grove("gpu", roles=("compute",), units=[unit("m", cpu=64000, mem_gib=256, accelerators=slots)],
               accelerators=gpus)
    requirement = node_requirement({"id": "t", "kind": "exec", "image": IMAGE, "platform": ["linux/amd64"],
                                    "accelerators": {"count": 1, "vendor": "nvidia"}}, run_kind="compute")
    outcomes = batch.place_batch(items([requirement] * 3))
    assert [o.status for o in outcomes] == ["placed", "placed", "error"]
    assert outcomes[2].error.code == "no_capacity"


def test_single_subject_batch_chooses_as_place_execution(make_grove):
    make_grove("zeta")
    make_grove("alpha", platforms=("linux/arm64", "linux/amd64"))
    make_grove("beta")
    # The same subject: the same sample and tie-break (alpha lists the work's platform second: it scores less).
    single = services.placement_decide(requirement=work(), subject="pipeline_node:s0")
    outcome = batch.place_batch(items([work()]))[0]
    assert outcome.grove_slug == single.grove.slug and outcome.grove_slug in {"zeta", "beta"}
    stored = ExecutionPlacement.objects.get(pk=outcome.placement_id)
    assert selectors.placement_decision(stored)["scores"] == single.scores  # as explain shows it


def test_reuse_and_uniqueness(make_grove):
    make_grove("a", units=[unit("a1", cpu=8000)])
    first = batch.place_batch(items([work()] * 2))
    assert [o.status for o in first] == ["placed", "placed"]
    again = batch.place_batch(items([work()] * 3))
    assert [o.status for o in again] == ["reused", "reused", "placed"]
    assert [o.placement_id for o in again[:2]] == [o.placement_id for o in first]
    # A single placement of a batch-placed subject is a retry too.
    retry = services.place_execution(subject_type="pipeline_node", subject_id="s0", requirement=work())
    assert retry.reused and retry.placement.pk == first[0].placement_id
    duplicate = batch.place_batch([items([work()])[0]] * 2)
    assert [o.status for o in duplicate] == ["reused", "error"] and duplicate[1].error.code == "duplicate_subject"
    assert ExecutionPlacement.objects.count() == 3
    assert UnitLoad.objects.get().cpu_milli == 3000


def test_a_subject_placed_meanwhile_is_reread_not_doubled(make_grove, monkeypatch):
    make_grove("a", units=[unit("a1", cpu=8000)])
    monkeypatch.setattr(writes, "existing", lambda keys: {})  # the race: read saw nothing
    services.place_execution(subject_type="pipeline_node", subject_id="s1", requirement=work())
    outcomes = batch.place_batch(items([work()] * 3))
    assert [o.status for o in outcomes] == ["placed", "error", "placed"] or outcomes[1].status == "reused"
    assert ExecutionPlacement.objects.filter(subject_id="s1").count() == 1
    assert ExecutionPlacement.objects.count() == 3
    assert UnitLoad.objects.get().cpu_milli == 2000  # the lost subject's work is not in the ledger


def test_compact_decisions_share_verdicts_and_explain_round_trips(make_grove):
    make_grove("a", units=[unit("a1", cpu=2000)])
    make_grove("b", units=[unit("b1", cpu=2000)])
    make_grove("arm", platforms=("linux/arm64",))
    outcomes = batch.place_batch(items([work()] * 4))
    assert Counter(o.grove_slug for o in outcomes) == {"a": 2, "b": 2}  # spread: each takes its share
    rows = list(ExecutionPlacement.objects.order_by("subject_id"))
    assert len({row.verdicts_key for row in rows}) == 1 and PlacementVerdicts.objects.count() == 1
    compact = rows[0].decision
    first, other = compact["grove_slug"], ({"a", "b"} - {compact["grove_slug"]}).pop()
    assert compact["selected_platform"] == "linux/amd64"
    assert compact["counts"] == {"platform_mismatch": 1} and "candidates" not in compact
    assert [t["grove_slug"] for t in compact["top"]] == [first, other]
    # Why here: the winner's and the runner-up's every column (stored once, in ``top``), and the sentence.
    assert "chosen" not in compact["scores"] and f"{first} chosen over {other}" in compact["scores"]["why"]
    scores = selectors.placement_decision(rows[0])["scores"]
    assert scores["chosen"] == {"grove_id": compact["top"][0]["grove_id"], "grove_slug": first,
                                **compact["top"][0]["score"]}
    assert scores["runner_up"]["grove_slug"] == other and scores["runner_up"]["total"] == compact["top"][1]["score"][
        "total"]
    assert set(scores["chosen"]) >= {"platform", "spread", "binpack", "run_spread", "preference", "total"}
    assert scores["policy"] == compact["scores"]["policy"] and scores["why"] == compact["scores"]["why"]
    rows[0].decision = {**compact, "scores": scores}  # a row stored whole (before the compact form) reads as is
    assert selectors.placement_decision(rows[0])["scores"] == scores
    full = selectors.placement_decision(rows[2])
    mine = rows[2].grove_slug
    assert full["candidates"][0]["grove_slug"] == mine  # its own order, then the rest
    assert full["candidates"][-1]["grove_slug"] == "arm"
    assert full["candidates"][0]["rank"] == 1 and full["candidates"][0]["unit"] == f"{mine}1"
    assert full["candidates"][0]["score"]["total"] > 0
    assert full["candidates"][-1]["incompatibilities"][0]["code"] == "platform_mismatch"
    # The API (and so `forest placements explain`) shows the full decision.
    client = api()
    listed = client.get(URL, {"subject_type": "pipeline_node", "subject_id": "s2"}).json()["results"][0]
    assert [c["grove_slug"] for c in listed["decision"]["candidates"]] == [c["grove_slug"] for c in full["candidates"]]
    detail = client.get(f"{URL}/{rows[2].pk}").json()
    assert detail["decision"] == listed["decision"]


def test_staff_detail_page_shows_shared_verdicts(make_grove, client):
    from apps.flags.registry import STAFF_OBSERVABILITY
    from apps.flags.services import flag_override_set
    flag_override_set(name=STAFF_OBSERVABILITY, enabled=True, reason="test")
    make_grove("a")
    make_grove("arm", platforms=("linux/arm64",))
    outcome = batch.place_batch(items([work()]))[0]
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    page = client.get(f"/staff/placements/{outcome.placement_id}/")
    assert page.status_code == 200
    assert b"platform_mismatch" in page.content and b"arm" in page.content
    # Why here: the sentence, the chosen Grove's every plugin column, and each candidate's scores.
    assert b'id="why-here"' in page.content and b"the only Grove with room now" in page.content
    for column in (b"<th scope=\"col\">spread</th>", b"<th scope=\"col\">binpack</th>",
                   b"<th scope=\"col\">preference</th>", b"<th scope=\"col\">total</th>"):
        assert column in page.content


def api(user_roles=(), staff=True) -> APIClient:
    user = UserFactory(is_staff=staff, is_superuser=staff)
    if user_roles:
        grant(user, *user_roles)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_for(user)}")
    return client


def requirement_json(cpu=1000):
    return {"family": "build", "resources": {"cpu_milli": cpu, "memory_bytes": GIB},
            "compatibility": {"platform": {"allowed": ["linux/amd64"], "sources": ["ci"]},
                              "artifact_kind": "oci_image", "change_kind": "k8s.job", "isolation": "container"}}


def test_batch_api_places_and_reports_each_item(make_grove):
    make_grove("a", units=[unit("a1", cpu=2000)])
    client = api()
    body = {"items": [{"subject_type": "pipeline_node", "subject_id": f"ci-{i}", "requirement": requirement_json()}
                      for i in range(3)]
             + [{"subject_type": "pipeline_node", "subject_id": "bad", "requirement": {"family": "nope"}},
                {"subject_type": "nope", "subject_id": "x", "requirement": requirement_json()},
                {"subject_type": "pipeline_node", "subject_id": "ci-0", "requirement": requirement_json()}]}
    response = client.post(f"{URL}/batch", body, format="json")
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert [r["status"] for r in results] == ["placed", "placed", "error", "error", "error", "error"]
    assert [r.get("error", {}).get("code") for r in results[2:]] == [
        "no_capacity", "field_required", "invalid_choice", "duplicate_subject"]
    assert results[0]["grove_slug"] == "a" and results[0]["placement_id"]
    assert response.json()["placed"] == 2 and response.json()["error"] == 4
    again = client.post(f"{URL}/batch", {"items": body["items"][:1]}, format="json").json()
    assert again["results"][0]["status"] == "reused"
    assert again["results"][0]["placement_id"] == results[0]["placement_id"]


@pytest.mark.parametrize(("body", "code"), [
    ({}, "items_required"), ({"items": []}, "items_required"), ({"items": "x"}, "items_required"),
    ({"items": [{"subject_type": "pipeline_node", "subject_id": str(i), "requirement": {}}
                for i in range(MAX_BATCH_SIZE + 1)]}, "batch_too_large"),
])
def test_batch_api_refuses_bad_bodies(body, code):
    response = api().post(f"{URL}/batch", body, format="json")
    assert response.status_code == 400 and response.json()["code"] == code


def test_batch_api_needs_a_user_who_may_add_placements():
    assert APIClient().post(f"{URL}/batch", {"items": []}, format="json").status_code in (401, 403)
    viewer = api(user_roles=(VIEWER,), staff=False)
    assert viewer.post(f"{URL}/batch", {"items": []}, format="json").status_code == 403


def test_orm_fallback_writer_places_and_detects_lost_subjects(make_grove, monkeypatch):
    """The writer ``make run``'s SQLite takes (an ORM bulk insert, rows read back by subject), run here."""
    make_grove("a", units=[unit("a1", cpu=8000)])
    monkeypatch.setattr(writes.connection, "vendor", "sqlite")
    monkeypatch.setattr(writes, "existing", lambda keys: {})
    services.place_execution(subject_type="pipeline_node", subject_id="s1", requirement=work())
    outcomes = batch.place_batch(items([work()] * 3))
    assert outcomes[0].status == "placed" and outcomes[0].placement_id
    assert ExecutionPlacement.objects.filter(subject_id="s1").count() == 1
    assert ExecutionPlacement.objects.count() == 3


def test_exhaustive_small_fleets_never_overcommit(make_grove):
    """Every split of 3 requests over two one-unit Groves of 0..3 CPUs: placed work never exceeds a unit."""
    sizes = range(0, 4)
    for left, right in itertools.product(sizes, sizes):
        ExecutionPlacement.objects.all().delete()
        UnitLoad.objects.all().delete()
        from apps.groves.models import Grove
        Grove.objects.all().delete()
        snapshot.fleet_refresh(full=True)
        make_grove("l", units=[unit("u", cpu=4000, free_cpu=left * 1000)])
        make_grove("r", units=[unit("u", cpu=4000, free_cpu=right * 1000)])
        outcomes = batch.place_batch(items([work(1000), work(2000), work(1000)]))
        assert_no_overcommit()
        placed = sum(1000 * (2 if i == 1 else 1) for i, o in enumerate(outcomes) if o.status == "placed")
        assert placed <= (left + right) * 1000


def test_claims_are_held_in_the_snapshot_and_other_processes_see_them(make_grove):
    """A claim made after the snapshot loaded is seen without SQL per decision; a process whose snapshot
    missed the in-process signal still sees it at its next incremental refresh (the Grove row is stamped)."""
    from apps.accelerators import services as accelerator_services
    gpus = [nvidia_gpu("GPU-0")]
    slot = [{"inventory_id": "GPU-0", "allocatable": 1, "free": 1}]
    first = make_grove("a-gpu", roles=("compute",), units=[unit(accelerators=slot)], accelerators=gpus)
    make_grove("b-gpu", roles=("compute",), units=[unit(accelerators=slot)], accelerators=gpus)
    type(first).objects.filter(pk=first.pk).update(placement_preference=100)  # staff prefer it
    requirement = node_requirement({"id": "t", "kind": "exec", "image": IMAGE, "platform": ["linux/amd64"],
                                    "accelerators": {"count": 1, "vendor": "nvidia"}}, run_kind="compute")
    snapshot.fleet_refresh(full=True)
    assert services.placement_decide(requirement=requirement).grove.slug == "a-gpu"
    before = snapshot._STATE["watermark"]
    accelerator_services.accelerator_claim(grove=first, requirement=requirement, job_ref="job-1", team="ml")
    assert snapshot._FLEET.records["a-gpu"].claimed == ()  # not yet refreshed
    reloaded = snapshot.fleet_refresh()  # incremental: what another process's next refresh would read
    assert reloaded >= 1 and snapshot._STATE["watermark"] > before
    assert snapshot._FLEET.records["a-gpu"].claimed == ((("machine", "GPU-0"), 1),)
    decision = services.placement_decide(requirement=requirement)
    assert decision.grove.slug == "b-gpu"
    assert next(c for c in decision.candidates if c["grove_slug"] == "a-gpu")["fits_accelerators"] is False
    accelerator_services.accelerator_release(job_ref="job-1")
    snapshot.fleet_refresh()
    assert snapshot._FLEET.records["a-gpu"].claimed == ()


def test_staff_bulk_replace_moves_many_and_keeps_history_without_overcommitting(make_grove):
    old = make_grove("a-old", units=[unit("o1", cpu=8000)])
    make_grove("b-new", units=[unit("n1", cpu=3000)])
    make_grove("c-other", units=[unit("x1", cpu=1000)])
    placed = batch.place_batch([batch.BatchItem(subject_type="pipeline_node", subject_id=f"s{i}", requirement=work(),
                                                target="a-old") for i in range(5)])
    assert {o.grove_slug for o in placed} == {"a-old"}
    type(old).objects.filter(pk=old.pk).update(enabled=False)
    snapshot.fleet_refresh(full=True)
    placements = list(ExecutionPlacement.objects.order_by("id"))
    with pytest.raises(ForestError) as refused:
        batch.replace_batch(placements=placements, actor=UserFactory(is_staff=False), reason="gone")
    assert refused.value.code == "staff_only"
    outcomes = batch.replace_batch(placements=placements, actor=UserFactory(is_staff=True), reason="decommissioned")
    assert Counter(o.grove_slug or o.error.code for o in outcomes) == {"b-new": 3, "c-other": 1, "no_capacity": 1}
    assert outcomes[-1].error.code == "no_capacity"
    moved = ExecutionPlacement.objects.get(pk=placements[0].pk)
    assert moved.grove_slug == "b-new" and moved.history[-1]["grove_slug"] == "a-old"
    assert moved.history[-1]["reason"] == "decommissioned" and moved.verdicts_key
    assert ExecutionPlacement.objects.get(pk=placements[4].pk).grove_slug == "a-old"  # refused: left as it was
    assert_no_overcommit()


@pytest.mark.parametrize(("item", "code"), [
    ({"subject_type": 5, "subject_id": "x", "requirement": requirement_json()}, "invalid_type"),
    ({"subject_type": "pipeline_node", "subject_id": ["x"], "requirement": requirement_json()}, "invalid_type"),
    ({"subject_type": "pipeline_node", "subject_id": "x", "requirement": requirement_json(), "more": 1},
     "unknown_field"),
    ("not an object", "invalid_type"),
    ({"subject_type": "pipeline_node", "subject_id": "", "requirement": requirement_json()}, "invalid_value"),
])
def test_batch_api_reports_bad_items_each_with_its_code(item, code):
    response = api().post(f"{URL}/batch", {"items": [item]}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["results"][0]["error"]["code"] == code


def test_a_full_batch_body_fits_the_endpoints_own_limit(make_grove, settings):
    """The batch endpoint reads up to ``PLACEMENT_BATCH_MAX_BODY_BYTES`` (a full batch is ~1.7 MB); every other
    endpoint keeps the site-wide limit."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024
    settings.PLACEMENT_BATCH_MAX_BODY_BYTES = 256 * 1024
    make_grove("a", units=[unit("a1", cpu=64000, mem_gib=512)])
    body = {"items": [{"subject_type": "pipeline_node", "subject_id": f"big-{i}", "requirement": requirement_json(100)}
                      for i in range(400)]}  # ~120 KB: over the site limit, within the endpoint's
    response = api().post(f"{URL}/batch", body, format="json")
    assert response.status_code == 200, response.content[:300]
    assert response.json()["placed"] == 400
    body["items"] *= 3  # ~360 KB: over the endpoint's limit too
    response = api().post(f"{URL}/batch", body, format="json")
    assert response.status_code == 413 and response.json()["code"] == "payload_too_large"


@pytest.mark.django_db(transaction=True)
def test_concurrent_batches_on_one_unit_read_each_others_ledger(make_grove, monkeypatch):
    """Two batches decide from the same view of one unit (room for four jobs, three each); the second's lock
    waits on the first's commit, and what it reads of the ledger must be what the first committed (read
    after its lock is granted, not by the statement that waited for it): four placed, never six."""
    import threading
    import time

    from django.db import connection

    make_grove("a", units=[unit("a1", cpu=4000, mem_gib=8)])
    snapshot.fleet_refresh(full=True)
    both_decided = threading.Barrier(2)
    first_verify = threading.local()
    verified, ledger_write = writes.verified, writes.ledger_write
    ledger_waited: list[bool] = []

    def verify_together(plans):
        if not getattr(first_verify, "done", False):
            first_verify.done = True
            both_decided.wait(timeout=30)
        return verified(plans)

    def ledger_write_once_the_other_waits(plans, ledger, lost):
        if ledger_waited or all(plan.index in lost for plan in plans):  # only the first to hold the lock
            return ledger_write(plans, ledger, lost)
        ledger_waited.append(True)
        deadline = time.monotonic() + 30
        with connection.cursor() as cursor:  # the other batch's locking statement is queued behind this one
            while time.monotonic() < deadline:
                cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
                if cursor.fetchone()[0]:
                    break
                time.sleep(0.01)
        return ledger_write(plans, ledger, lost)

    monkeypatch.setattr(writes, "verified", verify_together)
    monkeypatch.setattr(writes, "ledger_write", ledger_write_once_the_other_waits)
    outcomes, errors = {}, []

    def place(prefix):
        try:
            outcomes[prefix] = batch.place_batch(items([work()] * 3, prefix=prefix))
        except Exception as exc:  # surfaced below; a thread must not swallow a failure
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=place, args=(prefix,)) for prefix in ("x", "y")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    placed = [o for found in outcomes.values() for o in found if o.status == "placed"]
    assert len(placed) == 4 and ExecutionPlacement.objects.count() == 4
    assert_no_overcommit()


def test_a_grove_that_changed_under_a_batch_sends_back_only_its_own_subjects(make_grove, monkeypatch):
    """Another writer took Grove b's room between the batch's decision and its write: simulated by lowering
    b's free count inside the batch's first write transaction, just before the verify reads it under the
    lock (so the change rolls back with that attempt). The plans on b fail the verify: their rows are taken
    out again and only those subjects are decided again, after b is re-read; the plans on a are written
    with the first transaction, not thrown away with them (all-or-nothing lost whole batches to
    ``fleet_changed`` with two workers at a million)."""
    from apps.groves.models import PlacementUnit

    make_grove("a", units=[unit("a1", cpu=8000, mem_gib=16)])
    b = make_grove("b", units=[unit("b1", cpu=8000, mem_gib=16)])
    snapshot.fleet_refresh(full=True)
    calls: list[dict[str, str]] = []
    written: list[set[str]] = []
    real_write, real_verified = writes.placements_write, writes.verified

    def spy(plans, **kwargs):
        calls.append({plan.subject_id: plan.facts.slug for plan in plans})
        result = real_write(plans, **kwargs)
        written.append(set(ExecutionPlacement.objects.values_list("subject_id", flat=True)))
        return result

    def taken_first(plans):
        if len(calls) == 1:
            PlacementUnit.objects.filter(grove=b, unit_id="b1").update(cpu_milli_free=1000)
        return real_verified(plans)

    monkeypatch.setattr(writes, "placements_write", spy)
    monkeypatch.setattr(writes, "verified", taken_first)
    outcomes = batch.place_batch(items([work()] * 8))
    assert all(o.error is None and o.grove_slug for o in outcomes), [o.error for o in outcomes]
    assert len(calls) == 2, calls
    first, redone = calls
    assert len(first) == 8 and list(first.values()).count("b") >= 2
    assert written[0] == {s for s, g in first.items() if g == "a"}  # written as decided, b's taken out
    assert set(redone) == {s for s, g in first.items() if g == "b"}  # decided again, nothing else
    assert ExecutionPlacement.objects.count() == 8
    assert {o.placement_id for o in outcomes} == set(ExecutionPlacement.objects.values_list("id", flat=True))


@pytest.mark.django_db(transaction=True)
def test_a_batch_holds_no_unit_lock_while_its_rows_are_copied(make_grove, monkeypatch):
    """The COPY of a batch's placements (the long part of its write at a million rows) runs before the unit
    rows are locked: a second batch placing on the same unit meanwhile writes and commits without waiting
    for it. (Locked first, the two workers' writes ran one after the other as the table grew.) Both batches
    are then verified against each other's ledger: nothing overcommits."""
    import threading

    from django.db import connection

    make_grove("a", units=[unit("a1", cpu=10000, mem_gib=20)])
    snapshot.fleet_refresh(full=True)
    in_copy, second_done = threading.Event(), threading.Event()
    real = writes._insert
    waited = []

    def held_copy(plans, now):
        if not waited:
            waited.append(None)
            in_copy.set()
            waited[0] = second_done.wait(timeout=30)
        return real(plans, now)

    monkeypatch.setattr(writes, "_insert", held_copy)
    results, errors = {}, []

    def place(prefix, count):
        try:
            results[prefix] = batch.place_batch(items([work()] * count, prefix=prefix))
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    first = threading.Thread(target=place, args=("x", 6))
    first.start()
    assert in_copy.wait(timeout=30)
    place("y", 6)
    second_done.set()
    first.join(timeout=60)
    assert not errors and waited == [True]
    assert [o.status for o in results["y"]] == ["placed"] * 6
    # The first batch verified after the second committed: its rows on the Grove are taken out, its
    # subjects decided again on what is left (room for 4), the rest refused for want of room.
    statuses = [o.status for o in results["x"]]
    assert statuses.count("placed") == 4 and statuses.count("error") == 2
    assert {o.error.code for o in results["x"] if o.error is not None} == {"no_capacity"}
    assert ExecutionPlacement.objects.count() == 10
    assert sum(load.cpu_milli for load in UnitLoad.objects.all()) == 10 * 1000
