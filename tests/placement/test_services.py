"""place_execution on PostgreSQL: the chooser, verdicts, shadow mode, persistence, retries, re-place, plan check."""
from __future__ import annotations

import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.core.errors import ForestError
from apps.flags import services as flags
from apps.groves.models import Grove
from apps.pipelines.rules import node_requirement
from apps.placement import decide, rules, scoring, services, snapshot
from apps.placement.models import ExecutionPlacement
from apps.placement.requirements import ExecutionRequirement
from tests.factories import UserFactory, unit
from tests.placement.conftest import grove_make

pytestmark = pytest.mark.django_db
IMAGE = "registry.example/app@sha256:" + "a" * 64
COMPAT, PERSISTED = "host.deploy.forest_compatibility", "host.deploy.persisted_placement"


def flag(name: str, on: bool, **scope) -> None:
    flags.flag_override_set(name=name, enabled=on, reason="test", **scope)


def container(platform=("linux/amd64",), family="build", **extra) -> ExecutionRequirement:
    return node_requirement({"id": "n", "kind": "exec", "image": IMAGE, "platform": list(platform),
                                            **extra}, run_kind={"build": "build", "runtime": "deploy",
                                                                "compute": "compute"}[family])


def place(requirement, subject="1", **kwargs):
    return services.place_execution(subject_type="pipeline_node", subject_id=subject, requirement=requirement,
                                    **kwargs)


def test_platform_preference_order_ranks_first(make_grove):
    make_grove("a-prefers-arm", platforms=("linux/arm64", "linux/amd64"))
    make_grove("b-prefers-amd", platforms=("linux/amd64", "linux/arm64"))
    result = place(container(platform=("linux/amd64",)))
    assert result.grove.slug == "b-prefers-amd" and result.selected_platform == "linux/amd64"
    assert result.decision["scores"]["chosen"]["platform"] == 1.0
    assert result.decision["scores"]["runner_up"]["platform"] == 0.5
    assert "by platform (1.00 vs 0.50" in result.decision["scores"]["why"]
    result = place(container(platform=("linux/arm64", "linux/amd64")), subject="2")
    # both list an accepted platform first: every score ties, so the stable hash of subject and Grove decides
    assert result.selected_platform == result.grove.platforms[0]
    assert "by the tie-break" in result.decision["scores"]["why"]


def test_room_now_ranks_first_then_scores(make_grove):
    make_grove("a-full", units=[unit(cpu=8000, free_cpu=0)])
    make_grove("b-free")
    make_grove("c-free")
    result = place(container())
    assert result.grove.slug in {"b-free", "c-free"}
    ranks = {c["grove_slug"]: c["rank"] for c in result.decision["candidates"]}
    assert ranks[result.grove.slug] == 1 and ranks["a-full"] == 3
    full = next(c for c in result.decision["candidates"] if c["grove_slug"] == "a-full")
    assert full["score"] is None and full["fit"]["state"] == "later"  # no room now: filtered, not scored


def test_accelerator_fit_ranks_after_cpu_memory(make_grove):
    gpu = {"id": "GPU-0", "kind": "gpu", "vendor": "nvidia", "model": "H100", "apis": ["cuda"],
           "memory_bytes": 80 << 30, "memory_kind": "dedicated", "memory_enforced": True, "share_mode": "exclusive"}
    make_grove("a-no-gpu")
    make_grove("b-busy-gpu", units=[unit(accelerators=[{"inventory_id": "GPU-0", "allocatable": 1, "free": 0}])],
               accelerators=[gpu])
    make_grove("c-gpu", units=[unit(accelerators=[{"inventory_id": "GPU-0", "allocatable": 1, "free": 1}])],
               accelerators=[gpu])
    result = place(container(accelerators={"count": 1, "vendor": "nvidia"}))
    assert result.grove.slug == "c-gpu"
    verdicts = {c["grove_slug"]: c for c in result.decision["candidates"]}
    assert verdicts["b-busy-gpu"]["fits_accelerators"] is False
    assert verdicts["b-busy-gpu"]["accelerator_reasons"][0]["code"] == "accelerator_unavailable"
    assert verdicts["a-no-gpu"]["accelerator_reasons"][0]["code"] == "accelerator_none_reported"


def test_decision_explains_every_other_grove(make_grove):
    make_grove("arm-only", platforms=("linux/arm64",))
    make_grove("mac", substrate="native", roles=("build",), platforms=("darwin/arm64",))
    make_grove("runtime-only", roles=("runtime",))
    make_grove("good")
    make_grove("stale-good", heartbeat=False)
    result = place(container())
    decision = result.decision
    assert result.grove.slug == "good" and decision["chooser"] == "selection" and not result.would_refuse
    verdicts = {c["grove_slug"]: [i["code"] for i in c["incompatibilities"]] for c in decision["candidates"]}
    assert verdicts == {
        "good": [], "arm-only": ["platform_mismatch"],
        "mac": ["platform_mismatch", "substrate_mismatch", "isolation_unavailable", "change_kind_not_advertised"],
        "runtime-only": ["role_missing"],
    }  # a Grove that never reported is not fresh, so it is not a candidate at all
    assert (decision["eligible_total"], decision["ineligible_total"]) == (1, 3)
    assert decision["summary"].startswith("1/4 fresh Groves eligible")
    stored = ExecutionPlacement.objects.get()
    assert stored.decision == decision and stored.requirement == container().to_json()
    assert stored.selected_platform == "linux/amd64" and stored.enforced is False


def test_shadow_mode_places_incompatible_work_and_records_would_refuse(make_grove, caplog):
    make_grove("arm-only", platforms=("linux/arm64",))
    with caplog.at_level(logging.WARNING, logger="apps.placement.services"):
        result = place(container(platform=("linux/amd64",)))
    assert result.grove.slug == "arm-only" and result.would_refuse
    assert result.decision["chooser"] == "fallback"
    assert [i["code"] for i in result.decision["incompatibilities"]] == ["platform_mismatch"]
    row = ExecutionPlacement.objects.get()
    assert row.would_refuse and not row.enforced
    assert any(r.getMessage() == "placement would refuse" for r in caplog.records)


def test_enforcement_refuses_before_anything_is_stored(make_grove):
    flag(COMPAT, True)
    make_grove("arm-only", platforms=("linux/arm64",))
    with pytest.raises(ForestError) as exc:
        place(container(platform=("linux/amd64",)))
    assert exc.value.code == "placement_refused" and exc.value.status == 409
    assert [i["code"] for i in exc.value.extra["incompatibilities"]] == ["platform_mismatch"]
    assert not ExecutionPlacement.objects.exists()


def test_enforcement_is_scoped_by_environment(make_grove):
    flag(COMPAT, True, scope="environment", scope_value="prod")
    make_grove("arm-only", platforms=("linux/arm64",))
    assert place(container(), subject="s1", environment="staging").would_refuse
    with pytest.raises(ForestError):
        place(container(), subject="s2", environment="prod")


def test_no_grove_with_the_role_is_refused_in_both_modes(make_grove):
    make_grove("runtime-only", roles=("runtime",))
    with pytest.raises(ForestError) as exc:
        place(container(family="build"))
    assert exc.value.code == "no_eligible_grove"


@pytest.mark.parametrize("enforced", [False, True])
def test_explicit_target_never_waives_compatibility(make_grove, enforced):
    flag(COMPAT, enforced)
    make_grove("good")
    arm = make_grove("arm-only", platforms=("linux/arm64",))
    requirement = container(grove=str(arm.id))
    if enforced:
        with pytest.raises(ForestError) as exc:
            place(requirement)
        assert exc.value.code == "placement_refused"
    else:
        result = place(requirement)
        assert result.grove == arm and result.would_refuse and result.decision["chooser"] == "explicit"


def test_explicit_target_by_slug_and_unknown_target(make_grove):
    make_grove("good")
    other = make_grove("other")
    assert place(container(), target="other").grove == other
    with pytest.raises(ForestError) as exc:
        place(container(), subject="2", target="nope")
    assert exc.value.code == "grove_not_found"


def test_retry_reads_the_stored_placement_even_if_a_better_grove_appears(make_grove):
    make_grove("b-first")
    first = place(container())
    make_grove("a-better")  # would win the slug tie-break now
    again = place(container())
    assert again.reused and again.grove.slug == "b-first" and again.placement.pk == first.placement.pk
    assert ExecutionPlacement.objects.count() == 1


def test_retry_uses_the_stored_requirement_not_a_new_one(make_grove):
    make_grove("amd")
    place(container(platform=("linux/amd64",)))
    again = place(container(platform=("linux/arm64",)))  # the node changed; the retry must not re-derive
    assert again.reused and again.grove.slug == "amd" and not again.would_refuse


@pytest.mark.parametrize("how", ["deleted", "disabled"])
def test_retry_to_a_gone_grove_fails_clearly(make_grove, how):
    grove = make_grove("only")
    place(container())
    make_grove("another")
    if how == "deleted":
        grove.delete()
    else:
        Grove.objects.filter(pk=grove.pk).update(enabled=False)
    with pytest.raises(ForestError) as exc:
        place(container())
    assert exc.value.code == "placed_grove_gone" and exc.value.status == 410


@pytest.mark.parametrize("enforced", [False, True])
def test_retry_to_a_grove_that_became_incompatible_fails_clearly(make_grove, enforced):
    flag(COMPAT, enforced)
    grove = make_grove("flips")
    place(container())
    Grove.objects.filter(pk=grove.pk).update(platforms=["linux/arm64"])
    with pytest.raises(ForestError) as exc:
        place(container())
    assert exc.value.code == "placed_grove_incompatible"


def test_retry_of_a_shadow_placement_follows_the_switch(make_grove):
    make_grove("arm-only", platforms=("linux/arm64",))
    place(container())  # placed with would_refuse while enforcement is off
    assert place(container()).would_refuse  # same facts, still off: reused, still would-refuse
    flag(COMPAT, True)
    with pytest.raises(ForestError) as exc:
        place(container())
    assert exc.value.code == "placed_grove_incompatible"


def test_persisted_placement_off_stores_nothing_and_retries_choose_afresh(make_grove):
    flag(PERSISTED, False)
    make_grove("b-first")
    first = place(container())
    assert first.placement is None and not ExecutionPlacement.objects.exists()
    make_grove("a-better", platforms=("linux/arm64", "linux/amd64"))  # ranks lower, and only by its facts
    type(first.grove).objects.filter(slug="b-first").update(enabled=False)
    again = place(container())
    assert not again.reused and again.grove.slug == "a-better"


def test_staff_replace_moves_a_placement_and_keeps_history(make_grove):
    grove = make_grove("only")
    first = place(container())
    make_grove("replacement")
    grove.delete()
    staff = UserFactory(username="ops", is_staff=True)
    with pytest.raises(ForestError) as exc:
        services.placement_replace(placement=first.placement, actor=UserFactory(username="dev", is_staff=False),
                                   reason="x")
    assert exc.value.code == "staff_only"
    result = services.placement_replace(placement=first.placement, actor=staff, reason="Grove decommissioned")
    assert result.grove.slug == "replacement"
    row = ExecutionPlacement.objects.get()
    assert row.grove_slug == "replacement" and row.history[0]["grove_slug"] == "only"
    assert row.history[0]["reason"] == "Grove decommissioned" and row.history[0]["replaced_by"] == "ops"
    assert place(container()).grove.slug == "replacement"


def test_pin_validates_and_stores(make_grove):
    make_grove("a")
    pinned = make_grove("b")
    result = services.placement_pin(subject_type="compute_step", subject_id="job1:s1", requirement=container(),
                                    grove="b")
    assert result.grove == pinned and result.placement.chooser == "explicit"
    with pytest.raises(ForestError) as exc:
        services.placement_pin(subject_type="compute_step", subject_id="job1:s1", requirement=container(), grove="a")
    assert exc.value.code == "placement_exists"


def test_unknown_subject_type_is_refused(make_grove):
    with pytest.raises(ForestError) as exc:
        services.place_execution(subject_type="build", subject_id="1", requirement=container())
    assert exc.value.code == "invalid_choice"


@pytest.mark.parametrize("enforced", [False, True])
def test_plan_check_reports_never_placeable(make_grove, enforced, caplog):
    flag(COMPAT, enforced)
    make_grove("k8s-arm", platforms=("linux/arm64",))
    native = node_requirement({"id": "sign", "kind": "exec", "runtime": "native",
                                              "platform": ["darwin/arm64"]}, run_kind="build")
    assert services.placement_plan_check(requirement=container(platform=("linux/arm64",))).never_placeable is False
    if enforced:
        with pytest.raises(ForestError) as exc:
            services.placement_plan_check(requirement=native)
        assert exc.value.code == "never_placeable"
        assert {r["code"] for r in exc.value.extra["reasons"]} >= {"substrate_mismatch", "platform_mismatch"}
    else:
        with caplog.at_level(logging.WARNING, logger="apps.placement.services"):
            check = services.placement_plan_check(requirement=native)
        assert check.never_placeable and "substrate_mismatch" in {r["code"] for r in check.reasons}
        assert any(r.getMessage() == "never placeable at plan time" for r in caplog.records)


PLATFORMS = ("linux/amd64", "linux/arm64", "darwin/arm64")
grove_specs = st.lists(st.tuples(
    st.sampled_from(("kubernetes", "native")),
    st.lists(st.sampled_from(("build", "runtime", "compute")), unique=True, min_size=1, max_size=2),
    st.lists(st.sampled_from(PLATFORMS), unique=True, min_size=1, max_size=2),
    st.booleans(),  # advertises every change kind of its substrate, or only the first
), min_size=1, max_size=5)
nodes = st.fixed_dictionaries({
    "kind": st.sampled_from(("exec", "build_image", "deploy")), "runtime": st.sampled_from(("container", "native")),
    "platform": st.lists(st.sampled_from(PLATFORMS), unique=True, max_size=2),
    "trust": st.sampled_from(("trusted", "untrusted")),
}, optional={"grove": st.integers(min_value=0, max_value=4)})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=grove_specs, node=nodes, run_kind=st.sampled_from(("build", "deploy", "compute")))
def test_enforced_placement_never_picks_a_grove_the_checker_rejects(db, specs, node, run_kind):
    flag(COMPAT, True)
    ExecutionPlacement.objects.all().delete()
    Grove.objects.all().delete()
    made = []
    for index, (substrate, roles, platforms, all_kinds) in enumerate(specs):
        kinds = ["native.job", "native.workload"] if substrate == "native" else ["k8s.job", "k8s.build_job",
                                                                                 "k8s.deployment"]
        made.append(grove_make(f"g{index}", substrate=substrate, roles=roles, platforms=platforms,
                               change_kinds=kinds if all_kinds else kinds[:1]))
    node = {"id": "n", **node}
    if "grove" in node:
        node["grove"] = made[node["grove"] % len(made)].slug
    requirement = node_requirement(node, run_kind=run_kind)
    try:
        result = place(requirement)
    except ForestError as exc:
        assert exc.code in {"placement_refused", "no_eligible_grove"}
        compatible = [g for g in made if not rules.check(requirement, snapshot.grove_facts(g))]
        if requirement.target is None:
            assert not compatible  # refused only when the checker rejects every Grove
        return
    assert rules.check(requirement, snapshot.grove_facts(result.grove)) == []
    assert not result.would_refuse


def test_bounded_candidates_still_pick_the_true_best_and_cap_totals(make_grove, monkeypatch):
    """With fewer verdict slots than eligible Groves, the first (best-key, slug-ordered) query and the full
    ranking agree; totals beyond the cap are reported as 'N+'."""
    monkeypatch.setattr(decide, "CANDIDATE_LIMIT", 2)
    monkeypatch.setattr(snapshot, "COUNT_CAP", 3)
    make_grove("a-second-platform", platforms=("linux/arm64", "linux/amd64"))
    make_grove("b-full", units=[unit(cpu=8000, free_cpu=0)])
    for name in ("c-best", "d-best", "e-best"):
        make_grove(name)
    result = place(container())
    sampled = [c["grove_slug"] for c in result.decision["candidates"] if c["eligible"]]
    assert len(sampled) == 2 and set(sampled) <= {"c-best", "d-best", "e-best"}  # room now, best platform
    assert result.decision["eligible_total"] == 3 and result.decision["summary"].startswith("3+/")
    make_grove("z-arm", platforms=("linux/arm64",))
    found = snapshot.candidates(container(platform=("linux/arm64",)), limit=2)
    # only a-second-platform and z-arm accept arm64 at all; both list it first
    assert sorted(c.facts.slug for c in found.eligible) == ["a-second-platform", "z-arm"]


def test_equal_groves_are_chosen_by_the_hash_of_subject_and_grove_never_by_slug(make_grove):
    """Four identical Groves tie on every column for every subject: each subject's choice is the Grove with
    the least ``tie_key(subject, grove id)``, so equal Groves share the work (a slug order would send every
    subject to the first slug)."""
    groves = [make_grove(name) for name in ("t-a", "t-b", "t-c", "t-d")]
    chosen = {}
    for index in range(24):
        subject = f"pipeline_node:{index}"
        decision = services.placement_decide(requirement=container(), subject=subject)
        expected = min(groves, key=lambda grove: scoring.tie_key(subject, str(grove.id)))
        assert decision.grove.slug == expected.slug, subject
        assert "by the tie-break" in decision.scores["why"]
        chosen[subject] = decision.grove.slug
    assert len(set(chosen.values())) > 1
