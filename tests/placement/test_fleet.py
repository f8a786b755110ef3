"""The fleet snapshot on PostgreSQL: the same decisions as the SQL candidate query, bounded staleness,
and no stale snapshot ever persisting a placement the database would not allow."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.accelerators import services as accelerator_services
from apps.core.errors import ForestError
from apps.flags import services as flags
from apps.groves import services as grove_services
from apps.groves.models import AcceleratorInventoryItem, Grove, GroveCapability, PlacementUnit
from apps.pipelines.rules import node_requirement
from apps.placement import decide, fleet, rules, services, snapshot, writes
from apps.placement.models import ExecutionPlacement
from apps.placement.requirements import (
    AcceleratorRequest,
    Compatibility,
    ExecutionRequirement,
    PlatformConstraint,
    Resources,
)
from tests.factories import unit
from tests.placement.conftest import DEFAULT_KINDS, grove_make
from tests.placement.oracle import sql_candidates

pytestmark = pytest.mark.django_db
IMAGE = "registry.example/app@sha256:" + "a" * 64
PLATFORMS = ["linux/amd64", "linux/arm64", "darwin/arm64", "linux/arm/v7"]
GIB = 1 << 30


def container(platform=("linux/amd64",)) -> ExecutionRequirement:
    return node_requirement({"id": "n", "kind": "exec", "image": IMAGE, "platform": list(platform)},
                                           run_kind="build")


# --- equivalence with the SQL query ---------------------------------------------------------------

KINDS = {"native": ["native.job", "native.workload"], "kubernetes": ["k8s.job", "k8s.build_job", "k8s.deployment"]}
ISOLATION = {"native": ["host_process"], "kubernetes": ["container", "vm"]}
# Mostly coherent Groves (a substrate's own change kinds and isolation), sometimes anything, so that many
# Groves are eligible and the ranking, not just the filtering, is exercised.
grove_spec = st.booleans().flatmap(lambda native: st.fixed_dictionaries({
    "native": st.just(native),
    "roles": st.lists(st.sampled_from(["build", "runtime", "compute"]), min_size=1, max_size=3, unique=True),
    "platforms": st.lists(st.sampled_from(PLATFORMS), min_size=1, max_size=3, unique=True),
    "kinds": st.one_of(st.just(KINDS["native" if native else "kubernetes"]),
                       st.lists(st.sampled_from(KINDS["native"] + KINDS["kubernetes"]), max_size=3, unique=True)),
    "isolation": st.one_of(st.just(ISOLATION["native" if native else "kubernetes"]),
                           st.lists(st.sampled_from(["container", "vm", "host_process"]), min_size=1, max_size=2,
                                    unique=True)),
    "units": st.lists(st.tuples(st.integers(0, 16), st.integers(0, 16)), max_size=3),
    "apis": st.lists(st.sampled_from(["cuda", "metal", "rocm"]), max_size=2, unique=True),
    "stale": st.integers(0, 5).map(lambda n: n == 0),
    "unready": st.integers(0, 5).map(lambda n: n == 0),  # live, never polled (the demo's simulated Groves)
    "enabled": st.integers(0, 6).map(lambda n: n != 0),
}))
requirement_spec = st.builds(
    lambda family, native, kind, trust, allowed, cpu, memory, api: ExecutionRequirement(
        family=family, trust=trust, resources=Resources(cpu_milli=cpu * 1000, memory_bytes=memory * GIB),
        accelerators=AcceleratorRequest(count=1, api=api) if api else None,
        compatibility=Compatibility(platform=PlatformConstraint(allowed=tuple(allowed)),
                                    change_kind=KINDS["native" if native else "kubernetes"][kind % (2 + (not native))],
                                    isolation="host_process" if native else "container")),
    st.sampled_from(["build", "runtime", "compute"]), st.booleans(), st.integers(0, 2),
    st.sampled_from(["trusted", "trusted", "untrusted"]), st.lists(st.sampled_from(PLATFORMS), max_size=2, unique=True),
    st.integers(0, 12), st.integers(0, 12), st.sampled_from(["", "", "cuda", "metal"]),
) | st.builds(
    lambda family, kind, isolation, allowed: ExecutionRequirement(
        family=family, compatibility=Compatibility(platform=PlatformConstraint(allowed=tuple(allowed)),
                                                   change_kind=kind, isolation=isolation)),
    st.sampled_from(["build", "runtime", "compute"]), st.sampled_from(KINDS["native"] + KINDS["kubernetes"]),
    st.sampled_from(["container", "vm", "host_process"]), st.lists(st.sampled_from(PLATFORMS), max_size=2, unique=True),
)


def load_fleet(specs: list[dict]) -> None:
    Grove.objects.all().delete()
    now = timezone.now()
    groves = [Grove(slug=f"g{index:03d}-{'n' if spec['native'] else 'k'}", name=f"g{index}",
                    substrate="native" if spec["native"] else "kubernetes", roles=spec["roles"],
                    platforms=spec["platforms"], isolation_modes=spec["isolation"], change_kinds=spec["kinds"],
                    enabled=spec["enabled"],
                    last_heartbeat_at=now - timedelta(seconds=600 if spec["stale"] else 1),
                    last_polled_at=None if spec["unready"] else now - timedelta(seconds=1))
              for index, spec in enumerate(specs)]
    Grove.objects.bulk_create(groves)
    PlacementUnit.objects.bulk_create([
        PlacementUnit(grove=grove, unit_id=f"u{i}", cpu_milli_allocatable=16000, cpu_milli_free=cpu * 1000,
                      memory_bytes_allocatable=16 * GIB, memory_bytes_free=memory * GIB,
                      accelerators=[{"inventory_id": "gpu-0", "allocatable": 1, "free": cpu % 2}]
                      if spec["apis"] and i == 0 else [])
        for grove, spec in zip(groves, specs, strict=True) for i, (cpu, memory) in enumerate(spec["units"])])
    AcceleratorInventoryItem.objects.bulk_create([
        AcceleratorInventoryItem(grove=grove, inventory_id="gpu-0", kind="gpu", vendor="acme", apis=spec["apis"],
                                 memory_bytes=8 * GIB, memory_kind="dedicated", memory_enforced=True,
                                 share_mode="exclusive")
        for grove, spec in zip(groves, specs, strict=True) if spec["apis"]])
    GroveCapability.objects.bulk_create([
        GroveCapability(grove=grove, kind="accelerator_api", value=api)
        for grove, spec in zip(groves, specs, strict=True) for api in spec["apis"]])


def shape(found: fleet.CandidateSet) -> tuple:
    return ([(c.facts.slug, c.platform_rank, c.fits_cpu_memory, c.facts.last_heartbeat_at,
              c.facts.accelerator_units, c.facts.devices) for c in found.eligible],
            [(c.facts.slug, c.facts.accelerator_units, c.facts.devices) for c in found.others],
            found.eligible_total, found.ineligible_total)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(specs=st.lists(grove_spec, max_size=30), requirements=st.lists(requirement_spec, min_size=1, max_size=4))
def test_snapshot_selects_exactly_what_the_sql_query_selects(specs, requirements):
    load_fleet(specs)
    for requirement in requirements:
        for limit in (2, 20):
            for role_only in (False, True):
                assert shape(snapshot.candidates(requirement, limit=limit, role_only=role_only)) == shape(
                    sql_candidates(requirement, limit=limit, role_only=role_only)), (limit, role_only)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(specs=st.lists(grove_spec, min_size=1, max_size=12), requirement=requirement_spec,
       enforced=st.booleans())
def test_snapshot_decision_equals_the_sql_decision(specs, requirement, enforced):
    load_fleet(specs)
    ours = services.placement_decide(requirement=requirement, enforced=enforced)
    with mock.patch.object(snapshot, "candidates", sql_candidates):
        theirs = services.placement_decide(requirement=requirement, enforced=enforced)
    assert ours.to_json() == theirs.to_json()
    assert (ours.refusal and ours.refusal.code) == (theirs.refusal and theirs.refusal.code)


def test_a_heartbeat_keeps_the_shape_cache_and_a_rule_key_change_clears_it():
    index = fleet.FleetIndex()
    now = timezone.now()
    facts = rules.GroveFacts(id="1", slug="a", substrate="kubernetes", roles=("build",), platforms=("linux/amd64",),
                             isolation_modes=("container",), change_kinds=("k8s.job",), last_heartbeat_at=now,
                             units=((1000, GIB),))
    index.replace_all([facts])
    cutoff = (now - timedelta(seconds=60)).timestamp()
    assert [c.facts.slug for c in index.select(container(), limit=5, cap=10, cutoff=cutoff).eligible] == ["a"]
    assert len(index._shapes) == 1
    index.upsert(replace(facts, last_heartbeat_at=now + timedelta(seconds=5), units=((0, 0),)))
    assert len(index._shapes) == 1  # a heartbeat with new capacity: indexes and cached shapes stand
    assert index.select(container(), limit=5, cap=10, cutoff=cutoff).eligible[0].fits_cpu_memory is False
    index.upsert(replace(facts, change_kinds=("k8s.deployment",)))
    assert not index._shapes
    assert index.select(container(), limit=5, cap=10, cutoff=cutoff).eligible == []


def test_frontier_keeps_only_undominated_units():
    units = rules.frontier([(1, 1), (4, 1), (2, 3), (2, 2), (0, 5)])
    assert units == ((4, 1), (2, 3), (0, 5))
    record = rules.GroveFacts(id="1", slug="a", substrate="native", roles=(), platforms=(), isolation_modes=(),
                              change_kinds=(), last_heartbeat_at=None, units=units, apis=frozenset())
    assert record.fits(2, 3) and record.fits(0, 5) and not record.fits(3, 2) and not record.fits(5, 0)


# --- refresh: bounded staleness -----------------------------------------------------------------------

@pytest.fixture
def slow_refresh(settings):
    """A snapshot that would not refresh by itself during the test."""
    settings.PLACEMENT_FLEET_REFRESH_S = 3600
    snapshot.fleet_refresh(full=True)
    return settings


def eligible_slugs(requirement=None) -> list[str]:
    """The eligible sample, by slug (its own order is the sampling ring's)."""
    return sorted(c.facts.slug for c in snapshot.candidates(requirement or container(), limit=20).eligible)


def prefer(slug: str) -> None:
    """Staff prefer this Grove (the operator-preference score plugin): it wins over equal Groves."""
    Grove.objects.filter(slug=slug).update(placement_preference=100)


def test_a_new_grove_is_seen_after_a_refresh(slow_refresh):
    grove_make("a-first")
    snapshot.fleet_refresh()
    grove_make("b-new")
    assert eligible_slugs() == ["a-first"]  # bounded staleness: not yet
    snapshot.fleet_refresh()
    assert eligible_slugs() == ["a-first", "b-new"]


def test_a_new_heartbeat_makes_a_stale_grove_fresh_after_a_refresh(slow_refresh):
    grove = grove_make("quiet")
    Grove.objects.filter(pk=grove.pk).update(last_heartbeat_at=grove.last_heartbeat_at - timedelta(minutes=10))
    snapshot.fleet_refresh()
    assert eligible_slugs() == []
    grove_services.grove_heartbeat_record(grove=Grove.objects.get(pk=grove.pk), body={
        "version": "test", "change_kinds": DEFAULT_KINDS["kubernetes"], "isolation": ["container"],
        "capacity": {"placement_units": [unit()], "accelerators": []}})
    assert eligible_slugs() == []
    snapshot.fleet_refresh()
    assert eligible_slugs() == ["quiet"]


def test_a_grove_goes_stale_at_decision_time_without_a_refresh(slow_refresh):
    grove_make("a")
    grove = grove_make("b")
    Grove.objects.filter(pk=grove.pk).update(last_heartbeat_at=grove.last_heartbeat_at - timedelta(seconds=60))
    snapshot.fleet_refresh()
    assert eligible_slugs() == ["a", "b"]
    slow_refresh.GROVE_STALE_AFTER_S = 30  # the same as b's heartbeat ageing past the window
    assert eligible_slugs() == ["a"]
    found = snapshot.candidates(container(), limit=20)
    assert (found.eligible_total, found.ineligible_total) == (1, 0)
    slow_refresh.GROVE_STALE_AFTER_S = 90
    assert eligible_slugs() == ["a", "b"]


@pytest.mark.parametrize("change", ["disable", "delete"])
def test_a_disabled_or_deleted_grove_drops_out_after_a_refresh(slow_refresh, change):
    grove_make("a-going")
    grove_make("b-staying")
    snapshot.fleet_refresh()
    queryset = Grove.objects.filter(slug="a-going")
    queryset.update(enabled=False) if change == "disable" else queryset.delete()
    assert eligible_slugs() == ["a-going", "b-staying"]
    snapshot.fleet_refresh()
    assert eligible_slugs() == ["b-staying"]
    assert len(snapshot._FLEET) == 1


def test_an_incremental_refresh_reads_only_the_groves_written_since(slow_refresh, monkeypatch):
    monkeypatch.setattr(snapshot, "WATERMARK_OVERLAP", timedelta(0))
    groves = [grove_make(f"g{i}") for i in range(5)]
    snapshot.fleet_refresh()
    assert snapshot.fleet_refresh() == 0
    Grove.objects.filter(pk=groves[2].pk).update(version="2")  # any write, even a queryset update
    assert snapshot.fleet_refresh() == 1


# --- a stale snapshot never persists a wrong placement ------------------------------------------------

def test_a_stale_snapshot_does_not_persist_on_a_grove_disabled_since(slow_refresh):
    grove_make("a-best")
    grove_make("b-next")
    prefer("a-best")
    snapshot.fleet_refresh()
    Grove.objects.filter(slug="a-best").update(enabled=False)
    assert services.placement_decide(requirement=container()).grove.slug == "a-best"  # the preview is stale
    result = services.place_execution(subject_type="pipeline_node", subject_id="1", requirement=container())
    assert result.grove.slug == "b-next" and result.placement.grove_slug == "b-next"
    assert services.placement_decide(requirement=container()).grove.slug == "b-next"  # and now refreshed


def test_a_stale_snapshot_does_not_persist_on_a_grove_now_incompatible(slow_refresh):
    grove_make("a-best")
    grove_make("b-next")
    snapshot.fleet_refresh()
    grove = Grove.objects.get(slug="a-best")
    grove_services.grove_heartbeat_record(grove=grove, body={  # it stops advertising k8s.job
        "version": "test", "change_kinds": ["k8s.deployment"], "isolation": ["container"],
        "capacity": {"placement_units": [unit()], "accelerators": []}})
    result = services.place_execution(subject_type="pipeline_node", subject_id="1", requirement=container())
    assert result.placement.grove_slug == "b-next"


def test_a_stale_snapshot_with_no_alternative_refuses_instead_of_persisting(slow_refresh):
    grove_make("only")
    snapshot.fleet_refresh()
    Grove.objects.filter(slug="only").update(enabled=False)
    with pytest.raises(ForestError) as caught:
        services.place_execution(subject_type="pipeline_node", subject_id="1", requirement=container())
    assert caught.value.code == "no_eligible_grove"
    assert not ExecutionPlacement.objects.exists()


def test_a_refusal_is_checked_against_a_refreshed_snapshot(slow_refresh):
    snapshot.fleet_refresh()
    grove_make("just-enrolled")
    result = services.place_execution(subject_type="pipeline_node", subject_id="1", requirement=container())
    assert result.placement.grove_slug == "just-enrolled"


def test_a_grove_that_keeps_changing_ends_in_a_clear_refusal(slow_refresh, monkeypatch):
    grove_make("flapping")
    def moved(decision, requirement):
        raise writes.SnapshotBehind

    monkeypatch.setattr(writes, "still_holds", moved)
    with pytest.raises(ForestError) as caught:
        services.place_execution(subject_type="pipeline_node", subject_id="1", requirement=container())
    assert caught.value.code == "fleet_changed"
    assert not ExecutionPlacement.objects.exists()


def test_accelerator_fit_counts_hosts_claims_made_after_the_snapshot(slow_refresh):
    gpu = {"id": "GPU-0", "kind": "gpu", "vendor": "nvidia", "model": "H100", "apis": ["cuda"],
           "memory_bytes": 80 << 30, "memory_kind": "dedicated", "memory_enforced": True, "share_mode": "exclusive"}
    slot = [{"inventory_id": "GPU-0", "allocatable": 1, "free": 1}]
    first = grove_make("a-gpu", units=[unit(accelerators=slot)], accelerators=[gpu])
    grove_make("b-gpu", units=[unit(accelerators=slot)], accelerators=[gpu])
    prefer("a-gpu")
    snapshot.fleet_refresh()
    requirement = container()
    requirement = ExecutionRequirement(family=requirement.family, compatibility=requirement.compatibility,
                                       accelerators=AcceleratorRequest(count=1, vendor="nvidia", api="cuda"))
    assert services.placement_decide(requirement=requirement).grove.slug == "a-gpu"
    accelerator_services.accelerator_claim(grove=first, requirement=requirement, job_ref="job-1", team="ml")
    decision = services.placement_decide(requirement=requirement)  # no refresh: the claim is read live
    assert decision.grove.slug == "b-gpu"
    verdict = next(c for c in decision.candidates if c["grove_slug"] == "a-gpu")
    assert verdict["fits_accelerators"] is False


def test_an_explicit_target_has_the_facts_the_snapshot_builds(slow_refresh):
    gpu = {"id": "GPU-0", "kind": "gpu", "vendor": "nvidia", "model": "H100", "apis": ["cuda"],
           "memory_bytes": 80 << 30, "memory_kind": "dedicated", "memory_enforced": True, "share_mode": "exclusive"}
    grove_make("gpu", units=[unit(accelerators=[{"inventory_id": "GPU-0", "allocatable": 1, "free": 1}]),
                             unit(unit_id="u2", free_cpu=500)], accelerators=[gpu])
    snapshot.fleet_refresh()
    held = snapshot._FLEET.records["gpu"]
    assert decide.target_facts("gpu") == held == decide.target_facts(held.id)
    assert held.apis == {"cuda"} and held.devices and held.accelerator_units and held.units


# --- a rule added only to rules.py is honoured by the snapshot ------------------------------------

def _quarantined(requirement, grove) -> list[rules.Incompatibility]:
    if not grove.slug.startswith("q-"):
        return []
    return [rules.Incompatibility("grove_quarantined", f"Grove {grove.slug} is quarantined.", grove.slug)]


QUARANTINE = rules.Rule("quarantine", ("grove_quarantined",), check=_quarantined,
                        keys=lambda grove: () if grove.slug.startswith("q-") else ("open",),
                        accepts=lambda requirement: ("open",))


def test_a_rule_registered_only_in_rules_is_followed_by_the_snapshot(slow_refresh, monkeypatch):
    """Before rules declared their index keys, the snapshot kept choosing q-first and the write's re-check
    refused it three times: a misleading ``fleet_changed``."""
    grove_make("q-first")
    grove_make("r-open")
    prefer("q-first")
    snapshot.fleet_refresh()
    assert services.placement_decide(requirement=container()).grove.slug == "q-first"
    monkeypatch.setattr(rules, "RULES", (*rules.RULES, QUARANTINE))
    assert eligible_slugs() == ["r-open"]  # no refresh: the snapshot re-files its Groves under the new rule
    result = services.place_execution(subject_type="pipeline_node", subject_id="1", requirement=container())
    assert result.placement.grove_slug == "r-open" and not result.would_refuse
    verdicts = {c["grove_slug"]: [i["code"] for i in c["incompatibilities"]] for c in result.decision["candidates"]}
    assert verdicts == {"r-open": [], "q-first": ["grove_quarantined"]}

    Grove.objects.filter(slug="r-open").update(enabled=False)
    snapshot.fleet_refresh()
    flags.flag_override_set(name="host.deploy.forest_compatibility", enabled=True, reason="test")
    with pytest.raises(ForestError) as caught:
        services.place_execution(subject_type="pipeline_node", subject_id="2", requirement=container())
    assert caught.value.code == "placement_refused"
    assert [i["code"] for i in caught.value.extra["incompatibilities"]] == ["grove_quarantined"]


@pytest.mark.django_db
def test_a_reload_of_many_groves_reads_their_rows_whole_and_builds_the_same_facts(make_grove, monkeypatch):
    """Past ``FILTER_MAX`` Groves a reload reads the unit, device, API, claim and ledger tables unfiltered
    (thousands of ids were one placeholder each); it builds exactly the facts the filtered read builds, for
    the Groves asked and no other."""
    from tests.factories import nvidia_gpu

    groves = [make_grove(f"m{i}", units=[unit(f"m{i}-a", cpu=4000), unit(f"m{i}-b", cpu=8000)]) for i in range(3)]
    gpu = nvidia_gpu("GPU-0")
    make_grove("gpu", roles=("compute",), accelerators=[gpu],
               units=[unit("g1", cpu=8000, accelerators=[{"inventory_id": gpu["id"], "allocatable": 1, "free": 1}])])
    make_grove("other", units=[unit("o1", cpu=2000)])
    wanted = Grove.objects.exclude(slug="other")
    filtered = snapshot.load_facts(wanted)
    monkeypatch.setattr(snapshot, "FILTER_MAX", 0)
    whole = snapshot.load_facts(wanted)
    assert whole == filtered and len(whole) == len(groves) + 1
    assert {facts.slug for facts in whole} == {"m0", "m1", "m2", "gpu"}
