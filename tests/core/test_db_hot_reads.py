"""The hot-path reads and writes of apps/core/db.py (SQL from the models' metadata instead of the ORM's
query building) give what the ORM gives, on real PostgreSQL."""
from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection
from django.db.models import signals
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.core.db import instance_from_row, save_fields, select_columns
from apps.dispatch import services as dispatch
from apps.dispatch.models import GroveJob
from apps.groves import services as grove_services
from apps.groves.models import Grove, GroveCredential

pytestmark = pytest.mark.django_db


def _job(grove) -> GroveJob:
    return dispatch.grove_job_create(grove=grove, run_id=uuid.uuid4(), node_id=7, change_kind="native.job",
                                     payload={"node": "n", "timeout_s": 60, "nested": {"a": [1, 2]}},
                                     idempotency_key=f"hot:{uuid.uuid4()}", attempt=1)


def _fields(instance, model) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in model._meta.concrete_fields}


def test_the_credential_read_loads_what_the_orm_loads(fresh_grove):
    grove, presented = fresh_grove()
    credential = grove_services.grove_authenticate(presented=presented)
    orm = GroveCredential.objects.select_related("grove").get(pk=credential.pk)
    assert _fields(credential, GroveCredential) == _fields(orm, GroveCredential)
    assert not credential._state.adding and credential._state.db == "default"
    with CaptureQueriesContext(connection) as queries:  # the Grove came in the same row
        assert credential.grove.pk == grove.pk and credential.grove.roles == orm.grove.roles
    assert len(queries) == 0
    assert credential.grove.capacity == orm.grove.capacity  # deferred: loaded when asked for
    grove_services.grove_credential_revoke(credential=credential, reason="test")  # a loaded row saves
    assert GroveCredential.objects.get(pk=credential.pk).revoked_at is not None


def test_the_job_read_loads_what_the_orm_loads_and_refuses_what_it_refused(fresh_grove):
    grove, _ = fresh_grove()
    other, _ = fresh_grove(name="other")
    job = _job(grove)
    loaded = dispatch._grove_job(grove, str(job.pk), lock=False)
    assert _fields(loaded, GroveJob) == _fields(GroveJob.objects.get(pk=job.pk), GroveJob)
    assert loaded.payload["nested"] == {"a": [1, 2]}  # JSON through the field's converter
    for bad in ("not-a-uuid", uuid.uuid4(), None):
        with pytest.raises(Exception) as refused:
            dispatch._grove_job(grove, bad, lock=True)
        assert refused.value.code == "job_not_found"
    with pytest.raises(Exception) as refused:  # another Grove's job
        dispatch._grove_job(other, job.pk, lock=False)
    assert refused.value.code == "job_not_found"


def test_save_fields_writes_what_save_update_fields_writes(fresh_grove):
    grove, _ = fresh_grove()
    fast, slow = _job(grove), _job(grove)
    now = timezone.now()
    for job in (fast, slow):
        job.outputs, job.exit_code, job.finished_at, job.log_tail = {"k": ["v", 1]}, None, now, ["a", "b"]
        job.build_id = None
    save_fields(fast, ["outputs", "exit_code", "finished_at", "log_tail", "build_id", "grove_id"])
    GroveJob.save(slow, update_fields=["outputs", "exit_code", "finished_at", "log_tail", "build_id", "grove_id"])
    keep = {"outputs", "exit_code", "finished_at", "log_tail", "build_id", "grove_id"}
    fast_row, slow_row = GroveJob.objects.get(pk=fast.pk), GroveJob.objects.get(pk=slow.pk)
    assert {k: v for k, v in _fields(fast_row, GroveJob).items() if k in keep} == \
        {k: v for k, v in _fields(slow_row, GroveJob).items() if k in keep}
    gone = GroveJob(pk=uuid.uuid4(), grove=grove)
    gone._state.adding = False
    with pytest.raises(DatabaseError, match="did not affect any rows"):
        save_fields(gone, ["reason"])


def _saved(job, save, names, *, listen: bool) -> tuple[list, list[str]]:
    """(what receivers of GroveJob's save signals heard, the statements run) for one save."""
    heard = []

    def receiver(signal, sender, instance, **kwargs):
        heard.append((signal is signals.pre_save, sender, instance is job, kwargs))

    if listen:
        for signal in (signals.pre_save, signals.post_save):
            signal.connect(receiver, sender=GroveJob)
    try:
        with CaptureQueriesContext(connection) as queries:
            save(job, update_fields=names)
    finally:
        for signal in (signals.pre_save, signals.post_save):
            signal.disconnect(receiver, sender=GroveJob)
    return heard, [query["sql"] for query in queries]


def test_lean_save_is_the_same_with_and_without_signal_receivers(fresh_grove):
    """The documented rule (apps/core/db.py LeanSave): one UPDATE either way, and receivers hear what
    Django's own save would have told them."""
    from django.db import models

    grove, _ = fresh_grove()
    lean, django = _job(grove), _job(grove)
    names = ["deadline_at", "reason"]
    statements = {}
    for listen in (False, True):
        for job in (lean, django):
            job.deadline_at, job.reason = timezone.now() + timedelta(hours=1), f"listen={listen}"
        heard_lean, statements[listen] = _saved(lean, GroveJob.save, names, listen=listen)
        heard_django, _ = _saved(django, models.Model.save, names, listen=listen)
        assert heard_lean == heard_django
        assert len(heard_lean) == (2 if listen else 0)
        assert len(statements[listen]) == 1 and statements[listen][0].startswith("UPDATE")
        for job in (lean, django):
            assert GroveJob.objects.filter(pk=job.pk, reason=f"listen={listen}").exists()
    # The same table and columns set (the captured text may carry the values, which differ by design).
    assert [re.findall(r'"(\w+)" = ', statements[listen][0].split("WHERE")[0]) for listen in (False, True)] == \
        [["deadline_at", "reason"]] * 2
    if heard_lean:
        pre, post = heard_lean[0][3], heard_lean[1][3]
        assert pre["update_fields"] == frozenset(names) and post["created"] is False and post["raw"] is False


def test_lean_save_leaves_new_rows_empty_lists_and_bad_names_to_django(fresh_grove):
    grove, _ = fresh_grove()
    job = _job(grove)
    heard, statements = _saved(job, GroveJob.save, [], listen=True)
    assert heard == [] and statements == []  # Django's save with update_fields=[] does nothing either
    with pytest.raises(ValueError, match="do not exist"):
        job.save(update_fields=["no_such_field"])
    with pytest.raises(ValueError):
        job.save(update_fields=["id"])  # the primary key is not updatable, as in Django
    fresh = GroveJob(grove=grove, run_id=uuid.uuid4(), node_id=1, change_kind="native.job", payload={},
                     idempotency_key=f"hot:{uuid.uuid4()}", attempt=1, deadline_at=timezone.now())
    fresh.save()  # a new row: Django's INSERT
    assert GroveJob.objects.filter(pk=fresh.pk).exists()


def test_instance_from_row_reads_prefixed_columns(fresh_grove):
    grove, _ = fresh_grove()
    sql = (f"SELECT {select_columns(Grove, alias='g', exclude=('capacity', 'log_tail'))}, "
           f"{select_columns(GroveCredential, alias='c', prefix='x_')} FROM {GroveCredential._meta.db_table} c "
           f"JOIN {Grove._meta.db_table} g ON g.id = c.grove_id WHERE c.grove_id = %s")
    row = next(iter(Grove.objects.raw(sql, [grove.pk])))
    credential = instance_from_row(GroveCredential, row, prefix="x_")
    assert _fields(credential, GroveCredential) == _fields(GroveCredential.objects.get(grove=grove), GroveCredential)
    assert set(row.get_deferred_fields()) == {"capacity", "log_tail"}
