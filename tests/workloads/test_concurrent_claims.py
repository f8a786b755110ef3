"""Issue 33: two teams applying workloads for the same host names at the same moment, over real HTTP
against a live Host on PostgreSQL: one wins, the other gets ``409 ingress_host_taken`` — never a 500 and
never ``write_conflict`` (host names are locked in one order before anything else is written, so two
applies cannot deadlock). The names are claimed in opposite orders, the case that deadlocked before."""
from __future__ import annotations

import threading

import httpx
import pytest

from apps.accounts import roles
from apps.workloads.models import IngressHostname, NativeWorkload
from tests.artifacts.conftest import signed_bundle
from tests.factories import UserFactory, api_token_for, grant

pytestmark = pytest.mark.django_db(transaction=True)
ROUNDS = 4


def _race(url: str, bodies: dict[str, dict], tokens: dict[str, str]) -> dict[str, httpx.Response]:
    """Post each team's body at the same moment (a barrier releases both threads together)."""
    barrier = threading.Barrier(len(bodies))
    answers: dict[str, httpx.Response] = {}

    def apply(team: str) -> None:
        barrier.wait(timeout=30)
        answers[team] = httpx.post(url, json=bodies[team], timeout=60,
                                   headers={"Authorization": f"Token {tokens[team]}"})

    threads = [threading.Thread(target=apply, args=(team,)) for team in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    return answers


def test_racing_applies_for_one_host_name_get_one_winner_and_one_409(live_server, settings, fresh_grove):
    settings.FOREST_NATIVE_WORKLOAD_DISPATCH = True
    settings.FOREST_INGRESS_DOMAINS = ["apps.example.com"]
    fresh_grove(name="mac", roles=("runtime",), platforms=("darwin/arm64",),
                change_kinds=["native.job", "native.workload"])
    bundle = signed_bundle(b"a shared bundle")  # team-less: both teams may run it
    tokens = {team: api_token_for(grant(UserFactory(username=f"{team}-op"), roles.WORKLOAD_OPERATOR, teams=(team,)))
              for team in ("red", "blue")}
    for round_ in range(ROUNDS):
        names = [f"a{round_}.apps.example.com", f"b{round_}.apps.example.com"]
        bodies = {team: {"slug": f"{team}-{round_}", "bundle_digest": bundle.digest, "command": ["./server"],
                         "ingress": {"hostnames": hostnames, "port": 8080}, "ports": [{"name": "http", "port": 8080}]}
                  for team, hostnames in (("red", names), ("blue", names[::-1]))}
        answers = _race(f"{live_server.url}/api/forest/v1/workloads", bodies, tokens)
        outcomes = sorted((answers[team].status_code, answers[team].json().get("code", "")) for team in answers)
        assert outcomes == [(200, ""), (409, "ingress_host_taken")], {t: a.text for t, a in answers.items()}
        winner = next(team for team in answers if answers[team].status_code == 200)
        # The loser wrote nothing: no workload, no host name; the winner holds both names.
        assert not NativeWorkload.objects.filter(slug=f"{'blue' if winner == 'red' else 'red'}-{round_}").exists()
        assert set(IngressHostname.objects.filter(hostname__in=names).values_list("workload__slug", flat=True)) == {
            f"{winner}-{round_}"}
