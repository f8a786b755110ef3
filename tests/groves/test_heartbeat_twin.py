"""``heartbeat_sql()`` (the heartbeat's one statement, PostgreSQL) and its ORM form for the embedded SQLite
(``_heartbeat_row_orm``) write the same columns of the same rows, and answer the same (not written, live,
moved), for the same input: docs/architecture.md "Fast paths". Each case runs both against the same Grove
from the same state (each in a rolled-back savepoint), on real PostgreSQL."""
from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from apps.groves import rules, services
from apps.groves.models import Grove, PlacementUnit
from tests.factories import heartbeat_body

pytestmark = pytest.mark.django_db
# Stamped by the table's trigger from the clock (groves migrations 0003, 0005), not by either writer.
TRIGGER_STAMPED = {"updated_at", "liveness_stamped_at"}


def _state(grove) -> tuple:
    row = Grove.objects.filter(pk=grove.pk).values().get()
    units = list(PlacementUnit.objects.filter(grove=grove).order_by("unit_id").values())
    return {k: v for k, v in row.items() if k not in TRIGGER_STAMPED}, units


def _body(case: str) -> dict:
    body = heartbeat_body(log_tail=["line one", "line two"])
    if case == "free moved":
        body["capacity"]["placement_units"][0]["cpu_milli"]["free"] -= 1000
    elif case == "shape changed":
        body["change_kinds"] = ["native.job", "native.workload"]
    elif case == "mesh":
        body["mesh"] = {"address": "10.8.0.7", "proxy_port": 8480}
    elif case == "no log tail":
        body["log_tail"] = []
    return body


def _both(grove, body: dict, *, credential) -> tuple:
    data = rules.heartbeat(body, substrate=None, mesh_networks=["10.8.0.0/24"])
    row = services.heartbeat_row(grove_id=grove.pk, data=data, now=timezone.now() + timedelta(seconds=5),
                                 credential=credential)
    answers = []
    for run in (lambda: services.heartbeat_rows_run([copy.deepcopy(row)]).get(str(grove.pk)),
                lambda: services._heartbeat_row_orm(copy.deepcopy(row))):
        with transaction.atomic():
            answers.append((run(), _state(grove)))
            transaction.set_rollback(True)
    return answers[0], answers[1]


@pytest.mark.parametrize("case", ["live", "free moved", "shape changed", "mesh", "no log tail"])
@pytest.mark.parametrize("substrate", ["native", "kubernetes"])
@pytest.mark.parametrize("authenticated", [False, True])
def test_the_statement_and_its_orm_form_write_the_same(fresh_grove, case, substrate, authenticated):
    grove, presented = fresh_grove(substrate=substrate, roles=("compute", "build"))
    if substrate == "kubernetes":
        body = _body(case)
        body.update({key: value for key, value in heartbeat_body(substrate=substrate).items()
                     if key in ("change_kinds", "isolation")})
        if case == "shape changed":
            body["change_kinds"] = ["k8s.job"]
    else:
        body = _body(case)
    credential = services.secrets.split(presented, services.secrets.CREDENTIAL_PREFIX) if authenticated else None
    before = _state(grove)
    (sql_answer, sql_state), (orm_answer, orm_state) = _both(grove, body, credential=credential)
    assert sql_answer == orm_answer and sql_state == orm_state, case
    expected = {"live": False, "no log tail": False, "free moved": True, "shape changed": None,
                "mesh": None}[case]  # a changed mesh is claimed by the full path, never by the shared statement
    assert sql_answer is expected
    assert (sql_state == before) is (expected is None)
