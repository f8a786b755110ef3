"""Issue 33 (follow-up): the lean ``changes`` route (apps/dispatch/api/lean.py, through the real ASGI
application on PostgreSQL) hands each Grove only the secrets of the generations it runs, each resolved under
its workload's own team — the same read (``selectors.workload_secret_values``) as the Django view and the
generation writer. Two teams hold a secret of the same (environment, name) with different values."""
from __future__ import annotations

import pytest

from apps.workloads import services
from tests.artifacts.conftest import signed_bundle
from tests.dispatch.test_lean import V1, _runner, get, loop, served  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)


def test_each_grove_gets_only_its_own_generations_secrets_on_the_lean_route(fresh_grove, settings):
    settings.FOREST_NATIVE_WORKLOAD_DISPATCH = True
    groves = {team: fresh_grove(name=f"mac-{team}", roles=("runtime",), platforms=("darwin/arm64",),
                                change_kinds=["native.job", "native.workload"]) for team in ("red", "blue")}
    bundle = signed_bundle(b"a shared bundle")
    for team in ("red", "blue"):
        services.workload_secret_set(team=team, environment="prod", name="API_TOKEN", value=f"{team}-value")
        services.native_workload_apply(body={"slug": f"{team}-web", "team": team, "environment": "prod",
                                             "bundle_digest": bundle.digest, "command": ["./server"],
                                             "secret_refs": ["API_TOKEN"], "grove": groves[team][0].slug})
    for team, other in (("red", "blue"), ("blue", "red")):
        grove, credential = groves[team]
        before = served("changes", "served")
        response = get(f"{V1}/groves/{grove.id}/changes?wait=0", credential=credential)
        assert response.status_code == 200 and served("changes", "served") == before + 1
        assert {item["workload"]: item["secrets"] for item in response.json()["workloads"]} == {
            f"{team}-web": {"API_TOKEN": f"{team}-value"}}
        assert f"{other}-value" not in response.text


def test_the_lean_route_sends_a_declared_stop_grace_and_leaves_an_undeclared_one_out(fresh_grove, settings):
    """Issue 38: the lean ``changes`` route carries the generation's ``stop_grace_s`` as the Django view does."""
    settings.FOREST_NATIVE_WORKLOAD_DISPATCH = True
    grove, credential = fresh_grove(name="mac-grace", roles=("runtime",), platforms=("darwin/arm64",),
                                    change_kinds=["native.job", "native.workload"])
    bundle = signed_bundle(b"a bundle with a grace")
    for slug, grace in (("polite", 7), ("default", None)):
        services.native_workload_apply(body={"slug": slug, "bundle_digest": bundle.digest, "command": ["./server"],
                                             "grove": grove.slug, "stop_grace_s": grace})
    before = served("changes", "served")
    response = get(f"{V1}/groves/{grove.id}/changes?wait=0", credential=credential)
    assert response.status_code == 200 and served("changes", "served") == before + 1
    items = {item["workload"]: item for item in response.json()["workloads"]}
    assert items["polite"]["stop_grace_s"] == 7 and "stop_grace_s" not in items["default"]
