"""Right key id, wrong secret on the lean ASGI routes (heartbeat, changes, claim, report): each is 401,
nothing is written, the answer does not carry the secret, and the lean route did not serve it (the
credential check — ``grove_authenticate``, or ``heartbeat_sql()``'s twin of it — refused, and Django gave the
refusal)."""
from __future__ import annotations

import pytest

from apps.groves.models import Grove
from tests.accounts.test_secrets import secret_of, wrong_secret
from tests.dispatch.test_lean import V1, _job, _runner, get, loop, post, served  # noqa: F401 - fixtures
from tests.factories import heartbeat_body

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("call", ["heartbeat", "changes", "claim", "report"])
def test_a_wrong_secret_is_refused_on_every_lean_route(fresh_grove, call):
    grove, credential = fresh_grove()
    job = _job(grove, 1)
    forged = wrong_secret(credential)
    before = Grove.objects.get(pk=grove.pk)
    route = "heartbeat" if call == "heartbeat" else call
    served_before = served(route, "served")
    if call == "heartbeat":
        response = post(f"{V1}/groves/{grove.id}/heartbeat", credential=forged,
                        body=heartbeat_body(log_tail=["forged"]))
    elif call == "changes":
        response = get(f"{V1}/groves/{grove.id}/changes?wait=0", credential=forged)
    elif call == "claim":
        response = post(f"{V1}/groves/{grove.id}/jobs/{job.id}/claim", credential=forged, body={})
    else:
        response = post(f"{V1}/groves/{grove.id}/jobs/{job.id}/report", credential=forged,
                        body={"state": "succeeded", "exit_code": 0})
    assert response.status_code == 401, response.text
    assert response.json()["code"] == "credential_unknown"
    assert secret_of(forged) not in response.text and secret_of(credential) not in response.text
    assert served(route, "served") == served_before
    after = Grove.objects.get(pk=grove.pk)
    assert (after.last_heartbeat_at, after.log_tail) == (before.last_heartbeat_at, before.log_tail)
    job.refresh_from_db()
    assert job.status == "assigned"
    # The real credential is served on the same route: the refusal was the secret's.
    if call == "heartbeat":
        assert post(f"{V1}/groves/{grove.id}/heartbeat", credential=credential,
                    body=heartbeat_body()).status_code == 200
        assert served("heartbeat", "served") == served_before + 1
