"""Presented secrets are verified, never only looked up by their key id (which is not secret: admin and
``api_token list`` show it), and never echoed: right key id + wrong secret is 401 for API tokens,
enrollment tokens and Grove credentials on the Django path (the lean routes: tests/dispatch/
test_lean_secrets.py), and no answer, log line or audit row carries a presented value."""
from __future__ import annotations

import logging
import uuid

import pytest
from rest_framework.test import APIClient

from apps.accounts.models import AuditEvent
from apps.dispatch import services as dispatch
from apps.groves import services as grove_services
from apps.groves.models import Grove
from tests.factories import UserFactory, api_token_for, grant, heartbeat_body

pytestmark = pytest.mark.django_db
V1 = "/api/forest/v1"


def wrong_secret(presented: str) -> str:
    """The same prefix and key id with another secret of the same shape."""
    head, _, secret = presented.partition(".")
    return f"{head}.{'A' * len(secret) if secret[0] != 'A' else 'B' * len(secret)}"


def secret_of(presented: str) -> str:
    return presented.partition(".")[2]


def assert_not_echoed(response, *values: str) -> None:
    for value in values:
        assert value not in response.content.decode(errors="replace"), response.content


@pytest.fixture
def submitter(db):
    return grant(UserFactory(username="sub", is_staff=False), "submitter", teams=("red",))


def test_an_api_token_with_the_right_key_id_and_a_wrong_secret_is_refused(submitter, caplog):
    token = api_token_for(submitter)
    forged = wrong_secret(token)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {forged}")
    with caplog.at_level(logging.DEBUG):
        response = client.get(f"{V1}/pipelines/runs")
    assert response.status_code == 401 and response.json()["code"] == "authentication_failed"
    assert_not_echoed(response, secret_of(forged), secret_of(token))
    assert secret_of(forged) not in caplog.text and secret_of(token) not in caplog.text
    # The real one works: the refusal was about the secret, not the key id.
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get(f"{V1}/pipelines/runs").status_code == 200


@pytest.mark.parametrize("header", ["{token}", "{token} extra", "Bogus {token}", "fat {token}"])
def test_a_token_sent_without_its_scheme_word_is_never_echoed(submitter, header, caplog):
    token = api_token_for(submitter)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header.format(token=token))
    with caplog.at_level(logging.DEBUG):
        response = client.get(f"{V1}/pipelines/runs")
    assert response.status_code == 401
    assert_not_echoed(response, token, secret_of(token), token.partition(".")[0])
    assert "Authorization: Token" in response.json()["detail"]  # still says what to send
    assert secret_of(token) not in caplog.text


def test_a_known_scheme_word_is_named_in_the_hint(submitter):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token_for(submitter)}")
    assert "You sent a 'Bearer' credential" in client.get(f"{V1}/pipelines/runs").json()["detail"]


def test_an_enrollment_token_with_a_wrong_secret_is_refused_and_stays_unspent(db):
    _, token = grove_services.enrollment_token_create(roles=["compute"], substrate="native")
    body = {"name": "box", "substrate": "native", "platforms": ["linux/amd64"], "version": "test"}
    forged = wrong_secret(token)
    response = APIClient().post(f"{V1}/groves/enroll", {**body, "token": forged}, format="json")
    assert response.status_code == 401, response.content
    assert_not_echoed(response, secret_of(forged), secret_of(token))
    assert not Grove.objects.exists()
    assert APIClient().post(f"{V1}/groves/enroll", {**body, "token": token}, format="json").status_code == 201


@pytest.fixture
def wire(fresh_grove):
    grove, credential = fresh_grove()
    job = dispatch.grove_job_create(grove=grove, run_id=uuid.uuid4(), node_id=1, change_kind="native.job",
                                    payload={"node": "n1", "timeout_s": 60}, idempotency_key="secrets:1", attempt=1)
    return grove, credential, job


def _calls(grove, job):
    return {
        "heartbeat": ("post", f"{V1}/groves/{grove.id}/heartbeat", heartbeat_body(log_tail=["forged"])),
        "changes": ("get", f"{V1}/groves/{grove.id}/changes?wait=0", None),
        "claim": ("post", f"{V1}/groves/{grove.id}/jobs/{job.id}/claim", {}),
        "report": ("post", f"{V1}/groves/{grove.id}/jobs/{job.id}/report", {"state": "succeeded", "exit_code": 0}),
    }


@pytest.mark.parametrize("call", ["heartbeat", "changes", "claim", "report"])
def test_a_grove_credential_with_a_wrong_secret_is_refused_on_every_wire_call(wire, call):
    grove, credential, job = wire
    before = Grove.objects.get(pk=grove.pk)
    forged = wrong_secret(credential)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {forged}")
    method, path, body = _calls(grove, job)[call]
    response = getattr(client, method)(path, body, format="json") if body is not None else client.get(path)
    assert response.status_code == 401, response.content
    assert response.json()["code"] == "credential_unknown"
    assert_not_echoed(response, secret_of(forged), secret_of(credential))
    after = Grove.objects.get(pk=grove.pk)
    assert (after.last_heartbeat_at, after.log_tail) == (before.last_heartbeat_at, before.log_tail)
    job.refresh_from_db()
    assert job.status == "assigned"


def test_audit_rows_never_carry_a_presented_secret(submitter, estate):
    token = api_token_for(submitter, name="audited")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    run = estate["red"]["run"]
    assert client.post(f"{V1}/pipelines/runs/{run.id}/cancel").status_code == 200
    rows = list(AuditEvent.objects.values_list("detail", "target_id", "actor_label", "action"))
    assert any(action == "pipeline-run-cancel" for *_, action in rows)
    assert secret_of(token) not in repr(rows)
