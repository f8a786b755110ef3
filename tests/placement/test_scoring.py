"""Score plugins (apps.placement.scoring), pure: each plugin normalised to 0..1, the policy's weights, the
documented total, the tie key, and the "why here" sentence."""
from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apps.placement import scoring

GIB = 1024**3
NEEDS = scoring.Needs(1000, GIB)
WEIGHTS = {"platform": 3, "spread": 2, "binpack": 2, "run_spread": 1, "preference": 1}
POLICIES = {"compute": "spread", "build": "binpack", "accelerators": "binpack"}


def load(cpu_free=8000, memory_free=8 * GIB, **kwargs) -> scoring.Load:
    return scoring.Load(cpu_allocatable=8000, cpu_free=cpu_free, memory_allocatable=8 * GIB,
                        memory_free=memory_free, **kwargs)


def test_spread_prefers_the_emptier_grove_and_bin_pack_the_fuller():
    empty, half = load(), load(cpu_free=4000, memory_free=4 * GIB)
    assert scoring.spread(NEEDS, empty) == pytest.approx(1 - 0.125)
    assert scoring.spread(NEEDS, half) == pytest.approx(1 - 0.625)
    assert scoring.binpack(NEEDS, half) > scoring.binpack(NEEDS, empty)
    assert scoring.binpack(NEEDS, half) + scoring.spread(NEEDS, half) == pytest.approx(1)


@pytest.mark.parametrize("plugin", scoring.PLUGINS, ids=lambda p: p.name)
@pytest.mark.parametrize("state", [load(), load(cpu_free=0, memory_free=0), load(cpu_free=-5, group=7, preference=300,
                                                                               platform_rank=9)])
def test_every_plugin_is_normalised(plugin, state):
    assert 0.0 <= plugin.score(NEEDS, state) <= 1.0


def test_the_policy_zeroes_the_plugin_it_does_not_use():
    compute = scoring.policy_for(family="compute", accelerators=False, policies=POLICIES, weights=WEIGHTS)
    assert compute.name == "spread" and dict(compute.weights)["binpack"] == 0 and dict(compute.weights)["spread"] == 2
    gpu = scoring.policy_for(family="compute", accelerators=True, policies=POLICIES, weights=WEIGHTS)
    assert gpu.name == "binpack" and dict(gpu.weights)["spread"] == 0
    unknown = scoring.policy_for(family="runtime", accelerators=False, policies={"runtime": "nonsense"},
                                 weights=WEIGHTS)
    assert unknown.name == "spread"


def test_the_total_is_the_weighted_mean_of_every_column():
    policy = scoring.policy_for(family="compute", accelerators=False, policies=POLICIES, weights=WEIGHTS)
    state = load(cpu_free=4000, memory_free=4 * GIB, group=1, preference=100, platform_rank=1)
    score = scoring.score(NEEDS, state, policy)
    columns = dict(zip(scoring.NAMES, score.columns, strict=True))
    assert columns == pytest.approx({"platform": 0.5, "spread": 0.375, "binpack": 0.625, "run_spread": 0.5,
                                     "preference": 1.0})
    assert score.total == pytest.approx((3 * 0.5 + 2 * 0.375 + 0 * 0.625 + 1 * 0.5 + 1 * 1.0) / 7)
    shown = score.to_json()
    assert list(shown) == [*scoring.NAMES, "total"]  # every column, the unused one too
    assert scoring.cells(shown)[2] == "0.62" and scoring.cells(None) == ["—"] * (len(scoring.NAMES) + 1)


def test_ties_break_by_a_stable_hash_of_subject_and_grove_not_by_name():
    groves = [f"g{i}" for i in range(10)]
    first = {subject: min(groves, key=lambda g: scoring.tie_key(subject, g)) for subject in
             (f"s{i}" for i in range(200))}
    assert len(set(first.values())) == 10  # different subjects land on different equal Groves
    assert scoring.tie_key("s1", "g1") == scoring.tie_key("s1", "g1") != scoring.tie_key("s2", "g1")


def test_the_tie_key_is_the_hash_of_subject_and_grove_and_its_bytes_sort_as_it_does():
    """``rank`` sorts a tie by ``tie_order``'s bytes: the same hash, the same order as the number."""
    groves = [f"g{i}" for i in range(50)]
    for subject in ("s1", "compute_step:c1m-7", ""):
        order = scoring.tie_order(subject)
        for grove in groves:
            expected = hashlib.blake2b(f"{subject}\x00{grove}".encode(), digest_size=8).digest()
            assert order(grove) == expected and scoring.tie_key(subject, grove) == int.from_bytes(expected, "big")
        assert sorted(groves, key=order) == sorted(groves, key=lambda g: scoring.tie_key(subject, g))


@given(first=st.floats(-1e7, 1e7), delta=st.sampled_from([0.0, 1e-13, 4e-10, 5e-10, 1e-9, 1.5e-9, 2e-9, 2.1e-9, 3e-9])
       | st.floats(-1e-8, 1e-8))
def test_tied_is_equality_of_the_rounded_totals(first, delta):
    """``rank`` groups ties by ``tied`` without rounding every total: the very partition rounding gives."""
    for other in (first - delta, first + delta):
        assert scoring.tied(first, other) == (round(first, scoring.TOTAL_DIGITS) == round(other, scoring.TOTAL_DIGITS))


def test_why_names_the_plugin_that_separated_the_two():
    policy = scoring.policy_for(family="compute", accelerators=False, policies=POLICIES, weights=WEIGHTS)
    emptier = scoring.score(NEEDS, load(), policy)
    fuller = scoring.score(NEEDS, load(cpu_free=2000, memory_free=2 * GIB), policy)
    sentence = scoring.why("k8s-1", emptier, "k8s-gpu-2", fuller, policy)
    assert sentence.startswith("k8s-1 chosen over k8s-gpu-2 by spread (0.88 vs 0.12")
    assert "tie-break" in scoring.why("a", emptier, "b", emptier, policy)
    assert "only Grove" in scoring.why("a", emptier, None, None, policy)


@given(cpu_need=st.integers(0, 64000), memory_need=st.integers(0, 64 * GIB),
       cpu_allocatable=st.integers(-1, 128000), cpu_free=st.integers(-64000, 128000),
       memory_allocatable=st.integers(-1, 256 * GIB), memory_free=st.integers(-GIB, 256 * GIB),
       group=st.integers(0, 50), preference=st.integers(-10, 200), platform_rank=st.integers(0, 9),
       policy=st.sampled_from(["spread", "binpack"]),
       weights=st.dictionaries(st.sampled_from(scoring.NAMES), st.sampled_from([0, 0.5, 1, 2, 3, 7]), min_size=5))
def test_total_of_is_the_scored_total_to_the_bit(cpu_need, memory_need, cpu_allocatable, cpu_free,
                                                 memory_allocatable, memory_free, group, preference, platform_rank,
                                                 policy, weights):
    """The batch ranks by ``total_of`` (plain numbers, no ``Load``): the very float ``score`` stores, so the
    order a batch chooses by is the order an explanation shows."""
    chosen = scoring.policy_for(family="compute", accelerators=False, policies={"compute": policy}, weights=weights)
    state = scoring.Load(cpu_allocatable=cpu_allocatable, cpu_free=cpu_free, memory_allocatable=memory_allocatable,
                         memory_free=memory_free, group=group, preference=preference, platform_rank=platform_rank)
    needs = scoring.Needs(cpu_need, memory_need)
    expected = scoring.score(needs, state, chosen).total
    assert scoring.total_of(chosen, cpu_need, memory_need, cpu_allocatable, cpu_free, memory_allocatable,
                            memory_free, group, preference, platform_rank) == expected
    assert scoring.total(needs, state, chosen) == expected
    assert scoring.score_of(chosen, cpu_need, memory_need, cpu_allocatable, cpu_free, memory_allocatable,
                            memory_free, group, preference, platform_rank) == scoring.score(needs, state, chosen)


def test_why_names_the_column_with_the_largest_weighted_gap_not_the_largest_raw_one():
    """Under spread, bin-pack weighs 0 and platform weighs 3: a wide bin-pack gap and a wider run-spread gap
    lose to a narrow platform gap, because "why here" explains the weighted total, column by column."""
    policy = scoring.policy_for(family="compute", accelerators=False, policies=POLICIES, weights=WEIGHTS)
    assert dict(policy.weights)["binpack"] == 0 and dict(policy.weights)["platform"] == 3

    def columns(**values) -> tuple[float, ...]:
        return tuple(values.get(name, 0.5) for name in scoring.NAMES)

    chosen = columns(platform=0.6, binpack=1.0, run_spread=0.8)
    other = columns(platform=0.5, binpack=0.0, run_spread=0.6)
    chosen_score = scoring.Score(chosen, scoring.total_from(policy, chosen))
    other_score = scoring.Score(other, scoring.total_from(policy, other))
    assert chosen_score.total > other_score.total
    sentence = scoring.why("a", chosen_score, "b", other_score, policy)
    assert sentence.startswith("a chosen over b by platform (0.60 vs 0.50"), sentence
