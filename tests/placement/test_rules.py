"""The compatibility checker: one table per rule, the design note's examples, and order independence."""
from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apps.placement import rules
from apps.placement.requirements import (
    ARTIFACT_KINDS,
    CHANGE_KINDS,
    FAMILIES,
    ISOLATION_MODES,
    Compatibility,
    ExecutionRequirement,
    PlatformConstraint,
)

K8S_KINDS = ("k8s.job", "k8s.build_job", "k8s.deployment")
NATIVE_KINDS = ("native.job", "native.workload")


def req(family="build", platforms=("linux/amd64",), change_kind="k8s.job", isolation="container",
        trust="trusted", artifact_kind="oci_image") -> ExecutionRequirement:
    return ExecutionRequirement(
        family=family, trust=trust,
        compatibility=Compatibility(platform=PlatformConstraint(tuple(platforms), ("node:n",)),
                                    artifact_kind=artifact_kind, change_kind=change_kind, isolation=isolation))


def grove(slug="g", substrate="kubernetes", roles=("build",), platforms=("linux/amd64",), isolation=None,
          change_kinds=None) -> rules.GroveFacts:
    if isolation is None:
        isolation = ("host_process",) if substrate == "native" else ("container",)
    if change_kinds is None:
        change_kinds = NATIVE_KINDS if substrate == "native" else K8S_KINDS
    return rules.GroveFacts(id=slug, slug=slug, substrate=substrate, roles=tuple(roles), platforms=tuple(platforms),
                            isolation_modes=tuple(isolation), change_kinds=tuple(change_kinds))


def codes(requirement, facts, rule=None):
    found = rule(requirement, facts) if rule else rules.check(requirement, facts)
    return [item.code for item in found]


@pytest.mark.parametrize(("requirement", "facts", "expected"), [
    (req(family="build"), grove(roles=("build",)), []),
    (req(family="build"), grove(roles=("build", "runtime")), []),
    (req(family="runtime"), grove(roles=("build",)), ["role_missing"]),
    (req(family="compute"), grove(roles=()), ["role_missing"]),
])
def test_rule_role(requirement, facts, expected):
    assert codes(requirement, facts, rules.ROLE.check) == expected


@pytest.mark.parametrize(("requirement", "facts", "expected"), [
    (req(platforms=("linux/amd64",)), grove(platforms=("linux/amd64",)), []),
    (req(platforms=("linux/amd64", "linux/arm64")), grove(platforms=("linux/arm64",)), []),
    (req(platforms=()), grove(platforms=("darwin/arm64",)), []),
    # the design note: an amd64 image offered to an arm64-only Grove
    (req(platforms=("linux/amd64",)), grove(platforms=("linux/arm64",)), ["platform_mismatch"]),
    (req(platforms=("linux/arm64",)), grove(platforms=("darwin/arm64",)), ["platform_mismatch"]),
])
def test_rule_platform(requirement, facts, expected):
    assert codes(requirement, facts, rules.PLATFORM.check) == expected


@pytest.mark.parametrize(("change_kind", "substrate", "expected"), [
    ("k8s.job", "kubernetes", []), ("k8s.build_job", "kubernetes", []), ("k8s.deployment", "kubernetes", []),
    ("native.job", "native", []), ("native.workload", "native", []),
    ("native.job", "kubernetes", ["substrate_mismatch"]), ("native.workload", "kubernetes", ["substrate_mismatch"]),
    ("k8s.build_job", "native", ["substrate_mismatch"]), ("k8s.job", "native", ["substrate_mismatch"]),
])
def test_rule_substrate(change_kind, substrate, expected):
    assert codes(req(change_kind=change_kind), grove(substrate=substrate), rules.SUBSTRATE.check) == expected


@pytest.mark.parametrize(("isolation", "facts", "expected"), [
    ("container", grove(isolation=("container",)), []),
    ("vm", grove(isolation=("container", "vm")), []),
    ("vm", grove(isolation=("container",)), ["isolation_unavailable"]),
    ("host_process", grove(substrate="native"), []),
    ("container", grove(substrate="native"), ["isolation_unavailable"]),
    ("host_process", grove(substrate="kubernetes"), ["host_process_needs_native"]),
    # even if a Kubernetes Grove claimed host_process, the rule holds
    ("host_process", grove(substrate="kubernetes", isolation=("host_process",)), ["host_process_needs_native"]),
])
def test_rule_isolation(isolation, facts, expected):
    assert codes(req(isolation=isolation), facts, rules.ISOLATION.check) == expected


@pytest.mark.parametrize(("trust", "substrate", "expected"), [
    ("trusted", "kubernetes", []), ("trusted", "native", []), ("untrusted", "kubernetes", []),
    # the design note: untrusted work to a native Grove
    ("untrusted", "native", ["untrusted_needs_kubernetes"]),
])
def test_rule_trust(trust, substrate, expected):
    assert codes(req(trust=trust), grove(substrate=substrate), rules.TRUST.check) == expected


@pytest.mark.parametrize(("change_kind", "advertised", "expected"), [
    ("k8s.job", ("k8s.job",), []),
    ("k8s.build_job", ("k8s.job",), ["change_kind_not_advertised"]),
    ("native.job", (), ["change_kind_not_advertised"]),
])
def test_rule_change_kind(change_kind, advertised, expected):
    assert codes(req(change_kind=change_kind), grove(change_kinds=advertised), rules.CHANGE_KIND.check) == expected


@pytest.mark.parametrize(("name", "requirement", "facts", "expected"), [
    ("amd64 image to an arm64-only Grove",
     req(platforms=("linux/amd64",)), grove(platforms=("linux/arm64",)), ["platform_mismatch"]),
    ("a native command to a Kubernetes Grove with matching arm64",
     req(platforms=("linux/arm64",), change_kind="native.job", isolation="host_process",
         artifact_kind="host_command"),
     grove(platforms=("linux/arm64",)),
     ["substrate_mismatch", "host_process_needs_native", "change_kind_not_advertised"]),
    ("untrusted work to a native Grove",
     req(platforms=("darwin/arm64",), change_kind="native.job", isolation="host_process", trust="untrusted"),
     grove(substrate="native", platforms=("darwin/arm64",)), ["untrusted_needs_kubernetes"]),
    ("everything wrong at once",
     req(family="runtime", platforms=("linux/amd64",), change_kind="k8s.deployment", trust="untrusted"),
     grove(substrate="native", roles=("build",), platforms=("darwin/arm64",)),
     ["role_missing", "platform_mismatch", "substrate_mismatch", "isolation_unavailable",
      "untrusted_needs_kubernetes", "change_kind_not_advertised"]),
])
def test_design_note_examples_report_every_incompatibility(name, requirement, facts, expected):
    found = rules.check(requirement, facts)
    assert [item.code for item in found] == expected, name
    assert all(item.message and item.grove == facts.slug for item in found)


def test_codes_are_the_stable_list():
    assert set(rules.CODES) == {"role_missing", "platform_mismatch", "substrate_mismatch", "host_process_needs_native",
                                "isolation_unavailable", "untrusted_needs_kubernetes", "change_kind_not_advertised",
                                "grove_not_polling"}


@pytest.mark.parametrize(("allowed", "grove_platforms", "platform", "rank"), [
    ((), ("linux/arm64", "linux/amd64"), "linux/arm64", 0),
    (("linux/amd64",), ("linux/arm64", "linux/amd64"), "linux/amd64", 1),
    (("linux/amd64", "linux/arm64"), ("linux/arm64", "linux/amd64"), "linux/arm64", 0),
])
def test_selected_platform_follows_the_groves_preference(allowed, grove_platforms, platform, rank):
    requirement, facts = req(platforms=allowed), grove(platforms=grove_platforms)
    assert rules.selected_platform(requirement, facts) == platform
    assert rules.platform_rank(facts.platforms, frozenset(allowed)) == rank


PLATFORMS = ("linux/amd64", "linux/arm64", "darwin/arm64", "windows/amd64")
requirements = st.builds(
    lambda family, platforms, change_kind, isolation, trust, artifact: req(
        family=family, platforms=tuple(platforms), change_kind=change_kind, isolation=isolation, trust=trust,
        artifact_kind=artifact),
    st.sampled_from(FAMILIES), st.lists(st.sampled_from(PLATFORMS), unique=True, max_size=3),
    st.sampled_from(CHANGE_KINDS), st.sampled_from(ISOLATION_MODES), st.sampled_from(("trusted", "untrusted")),
    st.sampled_from(ARTIFACT_KINDS))
groves = st.builds(
    lambda substrate, roles, platforms, isolation, kinds: grove(
        substrate=substrate, roles=tuple(roles), platforms=tuple(platforms), isolation=tuple(isolation),
        change_kinds=tuple(kinds)),
    st.sampled_from(("kubernetes", "native")), st.lists(st.sampled_from(FAMILIES), unique=True, max_size=3),
    st.lists(st.sampled_from(PLATFORMS), unique=True, min_size=1, max_size=4),
    st.lists(st.sampled_from(ISOLATION_MODES), unique=True, max_size=3),
    st.lists(st.sampled_from(CHANGE_KINDS), unique=True, max_size=5))


@given(requirements, groves, st.randoms(use_true_random=False))
def test_checker_is_order_independent(requirement, facts, rnd: random.Random):
    """Neither the order of the rules nor the order of any list in the inputs changes the result."""
    expected = rules.check(requirement, facts)
    shuffled_rules = list(rules.RULES)
    rnd.shuffle(shuffled_rules)

    def shuffled(values):
        values = list(values)
        rnd.shuffle(values)
        return tuple(values)

    other = rules.GroveFacts(id=facts.id, slug=facts.slug, substrate=facts.substrate, roles=shuffled(facts.roles),
                             platforms=shuffled(facts.platforms), isolation_modes=shuffled(facts.isolation_modes),
                             change_kinds=shuffled(facts.change_kinds))
    other_req = ExecutionRequirement(
        family=requirement.family, trust=requirement.trust,
        compatibility=Compatibility(
            platform=PlatformConstraint(shuffled(requirement.compatibility.platform.allowed), ("node:n",)),
            artifact_kind=requirement.compatibility.artifact_kind,
            change_kind=requirement.compatibility.change_kind, isolation=requirement.compatibility.isolation))
    assert [i.code for i in rules.check(other_req, other, rules=shuffled_rules)] == [i.code for i in expected]
    # each rule contributes independently: the composition is the union of the parts
    assert sorted(i.code for i in expected) == sorted(
        i.code for rule in rules.RULES for i in rule.check(requirement, facts))


def test_summary_counts_codes_like_a_scheduler():
    verdicts = [{"eligible": False, "incompatibilities": [{"code": "platform_mismatch"}]},
                {"eligible": False, "incompatibilities": [{"code": "platform_mismatch"}, {"code": "role_missing"}]},
                {"eligible": True, "incompatibilities": []}]
    assert rules.summarise(verdicts) == "1/3 Groves eligible: 2 platform_mismatch, 1 role_missing"


@given(requirements, groves)
def test_each_rule_declares_the_index_key_its_check_uses(requirement, facts):
    """The invariant the fleet snapshot relies on: a rule passes exactly when it does not constrain the
    requirement or the Grove is filed under a value the requirement accepts."""
    for rule in rules.RULES:
        accepted = rule.accepts(requirement)
        indexed = accepted is None or bool(set(rule.keys(facts)) & set(accepted))
        assert (rule.check(requirement, facts) == []) is indexed, rule.name


def test_every_code_belongs_to_one_rule():
    owners = [rule.name for rule in rules.RULES for _ in rule.codes]
    assert len(owners) == len(set(rules.CODES)) and len({rule.name for rule in rules.RULES}) == len(rules.RULES)
