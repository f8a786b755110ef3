"""Grove readiness apart from liveness (docs/decisions.md "Grove readiness"): a Grove that heartbeats but
never polls for work is live, not ready; placement never chooses it, and says why with a stable code."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.groves import services as grove_services
from apps.groves.models import Grove
from apps.placement import batch, fleet, rules, services
from tests.placement.test_rules import grove as facts_of
from tests.placement.test_rules import req as plain_requirement
from tests.placement.test_services import COMPAT, container, flag, place


def test_the_readiness_rule_refuses_a_grove_that_does_not_poll():
    requirement = plain_requirement()
    ready = facts_of()
    assert rules.check(requirement, ready) == []
    never = replace(ready, ready=False)
    found = rules.check(requirement, never)
    assert [item.code for item in found] == ["grove_not_polling"] and "never polled" in found[0].message
    gone_quiet = replace(ready, ready=False, last_polled_at=timezone.now() - timedelta(hours=1))
    assert "last polled for work at" in rules.check(requirement, gone_quiet)[0].message


def test_the_fleet_files_a_grove_again_as_unready_once_its_last_poll_expires():
    now = timezone.now()
    facts = replace(facts_of("a"), last_heartbeat_at=now, units=((1000, 1 << 30),), last_polled_at=now)
    index = fleet.FleetIndex()
    index.replace_all([facts])
    requirement = plain_requirement()
    stale_cutoff = (now - timedelta(seconds=90)).timestamp()
    assert [c.facts.slug for c in index.select(requirement, limit=5, cap=10, cutoff=stale_cutoff).eligible] == ["a"]
    assert index.unready((now - timedelta(seconds=90)).timestamp()) == []  # polled just now: still ready
    assert index.unready((now + timedelta(seconds=1)).timestamp()) == ["a"]
    found = index.select(requirement, limit=5, cap=10, cutoff=stale_cutoff)
    assert found.eligible == [] and [c.facts.slug for c in found.others] == ["a"]
    assert found.others[0].facts.ready is False


@pytest.mark.django_db
@pytest.mark.parametrize("enforced", [False, True])
def test_selection_skips_a_live_grove_that_never_polls_and_says_why(make_grove, enforced):
    flag(COMPAT, enforced)
    make_grove("a-simulated", polled=False)  # outranks by slug, heartbeats, never polls
    make_grove("b-agent")
    result = place(container())
    assert result.grove.slug == "b-agent" and not result.would_refuse
    verdicts = {c["grove_slug"]: c for c in result.decision["candidates"]}
    assert verdicts["a-simulated"]["eligible"] is False
    assert [i["code"] for i in verdicts["a-simulated"]["incompatibilities"]] == ["grove_not_polling"]


@pytest.mark.django_db
def test_shadow_mode_never_falls_back_to_an_unready_grove(make_grove):
    flag(COMPAT, False)
    make_grove("only-simulated", polled=False)
    decision = services.placement_decide(requirement=container())
    assert decision.grove is None and decision.refusal.code == "no_eligible_grove"


@pytest.mark.django_db
def test_a_pin_to_an_unready_grove_says_so(make_grove):
    flag(COMPAT, False)
    make_grove("sim", polled=False)
    shadow = services.placement_decide(requirement=container(), target="sim")
    assert shadow.grove.slug == "sim" and [i["code"] for i in shadow.incompatibilities] == ["grove_not_polling"]
    flag(COMPAT, True)
    refused = services.placement_decide(requirement=container(), target="sim", enforced=True)
    assert refused.grove is None and refused.refusal.code == "placement_refused"


@pytest.mark.django_db
def test_the_snapshot_learns_a_grove_became_ready_and_went_quiet(make_grove, settings):
    grove = make_grove("a", polled=False)
    assert services.placement_decide(requirement=container()).grove is None
    grove_services.grove_poll_record(grove=Grove.objects.get(pk=grove.pk))  # the agent's first poll
    assert services.placement_decide(requirement=container()).grove.slug == "a"
    # The poll grows old (time passes): the snapshot files it unready without any write to the row.
    settings.GROVE_READY_WITHIN_S = 0
    assert services.placement_decide(requirement=container()).grove is None


@pytest.mark.django_db
def test_a_held_snapshot_expires_readiness_without_being_refreshed(make_grove, settings):
    """The earlier test refreshes the snapshot at every decision (``PLACEMENT_FLEET_REFRESH_S=0``) and the
    refresh re-reads the Grove it just polled, so it passes on the refresh alone. Here the snapshot is
    loaded once and then held (no refresh for an hour): only the snapshot's own expiry of readiness can
    take the Grove out, for a single decision and for a batch alike."""
    make_grove("a")
    assert services.placement_decide(requirement=container()).grove.slug == "a"  # loads the snapshot
    settings.PLACEMENT_FLEET_REFRESH_S = 3600
    settings.GROVE_READY_WITHIN_S = 0  # the poll has grown old: time passed, no row was written
    decision = services.placement_decide(requirement=container())
    assert decision.grove is None and decision.refusal.code == "no_eligible_grove"
    [outcome] = batch.place_batch([batch.BatchItem(subject_type="pipeline_node", subject_id="b1",
                                                   requirement=container())])
    assert outcome.grove_id is None and outcome.status != "placed", outcome
