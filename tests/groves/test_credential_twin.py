"""One check of a Grove credential (apps/groves/services.py, "the Grove credential check"):
``grove_authenticate`` (every wire call: DRF's authentication, ``grove_for_request``, the lean routes' claim,
report and changes), its SQL form ``credential_sql`` inside ``heartbeat_sql()`` (the heartbeat's one
statement, on the Django path and the lean route) and its ORM form ``live_credentials`` (that statement on
SQLite) give the same answer for every kind of presented value, and every caller goes through them. A
change to one that the others do not follow (comparing the key id alone, say, or forgetting revocation)
fails here."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from apps.core.errors import NotAuthenticated
from apps.groves import services
from apps.groves.models import GroveCredential
from tests.accounts.test_secrets import wrong_secret
from tests.factories import heartbeat_body

pytestmark = pytest.mark.django_db

CASES = ["right", "wrong secret", "unknown key id", "revoked", "other grove's", "malformed", "other prefix"]


def _presented(case: str, credential: str, other: str) -> str:
    key_id = credential.partition("_")[2].partition(".")[0]
    return {"right": credential, "wrong secret": wrong_secret(credential),
            "unknown key id": credential.replace(key_id, "f" * len(key_id)), "revoked": credential,
            "other grove's": other, "malformed": credential + "!", "other prefix": "fat" + credential[3:]}[case]


def _by_function(grove, presented: str) -> bool:
    try:
        credential = services.grove_authenticate(presented=presented)
    except NotAuthenticated:
        return False
    return credential.grove_id == grove.pk


def _by_statement(grove, presented: str, *, orm: bool) -> bool | None:
    """Whether the heartbeat statement would write this Grove's row for ``presented`` (rolled back)."""
    row = services.heartbeat_fast_row(grove_id=grove.pk, presented=presented, body=heartbeat_body())
    if row is None:
        return None  # not even shaped like a Grove credential: the statement is never run
    row["at"] = (timezone.now() + timedelta(seconds=1)).isoformat()
    with transaction.atomic():
        written = (services._heartbeat_row_orm(row) is not None) if orm else (
            str(grove.pk) in services.heartbeat_rows_run([row]))
        transaction.set_rollback(True)
    return written


@pytest.mark.parametrize("case", CASES)
def test_the_function_and_its_sql_twin_give_the_same_answer(fresh_grove, case):
    grove, credential = fresh_grove(name="one")
    _, other = fresh_grove(name="two")
    if case == "revoked":
        services.grove_credential_revoke(credential=GroveCredential.objects.get(grove=grove), reason="test")
    presented = _presented(case, credential, other)
    expected = case == "right"
    assert _by_function(grove, presented) is expected
    for orm in (False, True):
        answer = _by_statement(grove, presented, orm=orm)
        # A value the fast path does not even try goes to the full path, i.e. to the function.
        assert (answer if answer is not None else _by_function(grove, presented)) is expected, (case, orm)


def test_every_caller_goes_through_the_one_definition(fresh_grove, monkeypatch):
    from apps.dispatch.api import lean
    from apps.groves.api import authentication

    assert services.credential_sql("i.key_id") in services.heartbeat_sql()
    assert authentication.grove_authenticate is services.grove_authenticate  # grove_for_request, DRF's class
    grove, credential = fresh_grove()
    seen = []
    real = services.grove_authenticate

    def spy(*, presented):
        seen.append(presented)
        return real(presented=presented)

    monkeypatch.setattr(services, "grove_authenticate", spy)
    assert lean._authenticated(credential, str(grove.pk)).pk == grove.pk and seen == [credential]
