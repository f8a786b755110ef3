"""Placement's raw SQL (docs/architecture.md "Fast paths") answers what its ORM form answers, on real
PostgreSQL: the existence probe (``writes.existing``), the batch writer (``COPY``, and the multi-row
``INSERT … ON CONFLICT`` it falls back to) against the ORM writer ``make run``'s SQLite takes, and the
fleet snapshot's enabled count. The ORM forms are the code's own SQLite branches, run here by making the
connection say it is SQLite."""
from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import orjson
import pytest
from django.db import connection
from django.utils import timezone

from apps.core.db import copy_field
from apps.groves.models import Grove
from apps.placement import batch, ledger, snapshot, writes
from apps.placement.models import ExecutionPlacement, PlacementVerdicts, UnitLoad
from tests.factories import unit
from tests.placement.test_batch import items, work

pytestmark = pytest.mark.django_db
SET_BY_THE_DATABASE = {"id", "history"}  # the sequence's id; history is "[]" either way, compared below
STAMPS = ("created_at", "updated_at")


def _rows() -> list[dict]:
    return [{k: v for k, v in row.items() if k not in SET_BY_THE_DATABASE}
            for row in ExecutionPlacement.objects.order_by("subject_id").values()]


def _unstamped(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in STAMPS} for row in rows]


def _as_sqlite(monkeypatch):
    monkeypatch.setattr(writes.connection, "vendor", "sqlite")


def test_the_existence_probe_finds_what_the_orm_finds(make_grove, monkeypatch):
    make_grove("a", units=[unit("a1", cpu=64000)])
    batch.place_batch(items([work()] * 4, prefix="p") + items([work()] * 2, prefix="q"))
    keys = [("pipeline_node", f"p{i}") for i in range(6)] + [("pipeline_node", "q1"), ("compute_job", "p0")]
    raw = writes.existing(keys)
    _as_sqlite(monkeypatch)
    orm = writes.existing(keys)
    assert {k: v.pk for k, v in raw.items()} == {k: v.pk for k, v in orm.items()}
    assert sorted(raw) == [("pipeline_node", f"p{i}") for i in range(4)] + [("pipeline_node", "q1")]


def test_copy_insert_and_the_orm_writer_write_the_same_rows(make_grove, monkeypatch):
    make_grove("a", units=[unit("a1", cpu=64000)])
    seen = []
    real = writes._insert

    def spy(plans, now):
        seen.append((list(plans), now))
        return real(plans, now)

    monkeypatch.setattr(writes, "_insert", spy)
    batch.place_batch(items([work()] * 5))
    (plans, now), = seen
    copied = _rows()
    assert len(copied) == 5 and {row["outcome"] for row in copied} == {"placed"}
    ids = list(range(1, 6))  # the COPY text is ``_rows``'s values, each as ``copy_field`` writes it
    assert writes._copy_lines(plans, ids, now) == "".join("\t".join(map(copy_field, row)) + "\n"
                                                          for row in writes._rows(plans, ids, now))

    def written(*, orm: bool, taken: bool) -> tuple:
        """(the plans that lost their subject, the rows written) by one writer, from no rows, or with the
        first subject already placed by "another call" (COPY then fails and the INSERT takes over)."""
        ExecutionPlacement.objects.all().delete()
        if taken:  # placed by a call that decided before this batch (the ORM writer tells its rows by time)
            other = ExecutionPlacement.objects.create(**{**copied[0], "history": []})
            ExecutionPlacement.objects.filter(pk=other.pk).update(created_at=now - timedelta(seconds=1))
        with monkeypatch.context() as patch:
            if orm:
                patch.setattr(writes.connection, "vendor", "sqlite")
            lost, ids = real(plans, now)
        assert set(ids) | lost == {plan.index for plan in plans}
        return lost, _rows()

    for taken in (False, True):
        by_sql, by_orm = written(orm=False, taken=taken), written(orm=True, taken=taken)
        # The one difference: the ORM stamps created_at/updated_at itself (auto_now), never before the
        # batch's time; the statements write the batch's one time.
        mine = [(a, b) for a, b in zip(by_sql[1], by_orm[1], strict=True) if a["subject_id"] != "s0" or not taken]
        assert all(a[stamp] == now and b[stamp] >= now for a, b in mine for stamp in STAMPS)
        assert (by_sql[0], _unstamped(by_sql[1])) == (by_orm[0], _unstamped(by_orm[1])), taken
        assert _unstamped(by_sql[1]) == _unstamped(copied) and len(by_sql[0]) == (1 if taken else 0)
    assert connection.vendor == "postgresql"
    assert all(row.history == [] for row in ExecutionPlacement.objects.all())


def test_the_enabled_count_is_the_orms(make_grove):
    for name in ("a", "b", "c"):
        make_grove(name)
    Grove.objects.filter(slug="b").update(enabled=False)
    total, at = snapshot.enabled_count_and_clock()
    assert total == Grove.objects.filter(enabled=True).count() == 2 and at is not None


def test_copy_writes_caller_and_grove_text_exactly_as_given(make_grove, monkeypatch):
    """The COPY rows are built as text (``writes._copy_lines``): every character COPY treats specially
    (backslash, tab, newline, carriage return) in the texts a caller chose (subject id, team, environment,
    spread group) and a Grove reported (a unit id, inside the stored decision's JSON) arrives as given,
    and the ORM writer writes the same rows."""
    odd_unit = 'u\\1"\tx'
    make_grove("a", units=[unit(odd_unit, cpu=64000)])
    awkward = ["tab\there", "line\nbreak\rx", "back\\slash", 'quote"d', "caf\u00e9 \\N"]
    subjects = [batch.BatchItem(subject_type="pipeline_node", subject_id=subject_id, requirement=work(),
                                team="te\\am", environment="env\tx", group="run:\\g\n")
                for subject_id in awkward]
    seen = []
    real = writes._insert
    monkeypatch.setattr(writes, "_insert", lambda plans, now: seen.append((list(plans), now)) or real(plans, now))
    outcomes = batch.place_batch(subjects)
    assert all(o.error is None for o in outcomes), [o.error for o in outcomes]
    copied = {row.subject_id: row for row in ExecutionPlacement.objects.all()}
    assert sorted(copied) == sorted(awkward)
    for row in copied.values():
        assert (row.team, row.environment, row.spread_group) == ("te\\am", "env\tx", "run:\\g\n")
        assert row.decision["unit"] == odd_unit
    as_copied = _rows()
    (plans, now), = seen
    ExecutionPlacement.objects.all().delete()
    with monkeypatch.context() as patch:
        patch.setattr(writes.connection, "vendor", "sqlite")
        real(plans, now)
    assert _unstamped(_rows()) == _unstamped(as_copied)


def test_the_verify_read_locks_and_reads_what_the_orm_reads(make_grove, monkeypatch):
    """``_verify_rows``: the wanted units (only those, in lock order) with their ledger rows, and the Groves'
    rows (freshness judged at the cutoff); the ORM form reads every unit of the Groves and keeps the wanted
    ones. The raw read gives timestamps (the report tokens) and list columns as text, the ORM as values."""
    from datetime import datetime

    a = make_grove("a", units=[unit("a1", cpu=64000), unit("a2", cpu=64000), unit("a3", cpu=64000)])
    b = make_grove("b", units=[unit("b1", cpu=64000)])
    Grove.objects.filter(pk=b.pk).update(last_heartbeat_at=timezone.now() - timedelta(hours=1))
    batch.place_batch(items([work()] * 6))  # ledger rows on some units
    assert UnitLoad.objects.exists()
    grove_ids = sorted([str(a.id), str(b.id)])
    wanted = sorted([(str(a.id), "a1"), (str(a.id), "a3"), (str(b.id), "b1"), (str(b.id), "missing")])
    cutoff = (timezone.now() - timedelta(minutes=5)).timestamp()
    raw_groves, raw_units = ledger._verify_rows(grove_ids, wanted, cutoff)
    _as_sqlite(monkeypatch)
    orm_groves, orm_units = ledger._verify_rows(grove_ids, wanted, cutoff)

    def token(value):
        return datetime.fromisoformat(value) if isinstance(value, str) else value

    assert [(*row[:4], token(row[4]), *row[5:]) for row in raw_units] == orm_units
    assert [key[:2] for key in raw_units] == [w for w in wanted if w[1] != "missing"]

    def normal(groves):
        return {k: (*v[:3], token(v[3]), v[4], *(ledger._listed(x) for x in v[5:])) for k, v in groves.items()}

    assert normal(raw_groves) == normal(orm_groves)
    assert sorted(raw_groves) == grove_ids
    assert raw_groves[str(a.id)][2] is True and raw_groves[str(b.id)][2] is False


def test_the_ledger_upsert_writes_what_the_orm_writes(make_grove, monkeypatch):
    """``ledger_write``: one ``INSERT … SELECT FROM unnest … ON CONFLICT`` against the ORM's
    ``bulk_create(update_conflicts=True)``: a new row, an updated row, an untouched entry, a lost plan."""
    a = make_grove("a", units=[unit("a1", cpu=64000), unit("a2", cpu=64000), unit("a3", cpu=64000)])
    at = a.capacity_reported_at
    resources = SimpleNamespace(resources=SimpleNamespace(cpu_milli=250, memory_bytes=1024))
    plans = [SimpleNamespace(index=i, unit_id=u, facts=SimpleNamespace(id=str(a.id)), requirement=resources)
             for i, u in enumerate(["a1", "a1", "a2", "a3"])]

    def written(orm: bool) -> list[tuple]:
        UnitLoad.objects.all().delete()
        UnitLoad.objects.create(grove=a, unit_id="a2", reported_at=at, cpu_milli=1000, memory_bytes=4096)
        entries = {(str(a.id), "a1"): [at, 0, 0, False], (str(a.id), "a2"): [at, 1000, 4096, False],
                   (str(a.id), "a3"): [at, 0, 0, False]}
        if orm:
            _as_sqlite(monkeypatch)
        ledger.ledger_write(plans, entries, lost={3})
        monkeypatch.undo()
        return list(UnitLoad.objects.order_by("unit_id").values_list("unit_id", "reported_at", "cpu_milli",
                                                                       "memory_bytes"))

    raw = written(orm=False)
    assert raw == [("a1", at, 500, 2048), ("a2", at, 1250, 5120)]  # a3's only plan was lost: no row
    assert written(orm=True) == raw


def test_the_verdicts_insert_writes_what_the_orm_writes():
    """``verdicts_write``: one ``INSERT … ON CONFLICT DO NOTHING`` of the JSON the batch encoded for each key,
    against the ORM's ``bulk_create(ignore_conflicts=True)`` of the bodies (its ``created_at`` is its own
    clock's, compared apart); a key stored already keeps its first body; a plan without a key adds none."""
    now = timezone.now() - timedelta(minutes=5)
    bodies = {"k1": {"candidates": [{"grove_slug": "a", "score": {"total": 0.25, "spread": 1e-05}}],
                     "summary": "1/1 fresh Groves eligible", "eligible_total": 1},
              "k2": {"candidates": [], "summary": 'é \\ "quoted"\ttab', "eligible_total": 0}}
    plans = [SimpleNamespace(verdicts_key=key, verdicts_json=orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode())
             for key, body in bodies.items()] + [SimpleNamespace(verdicts_key="", verdicts_json="")]
    writes.verdicts_write(plans, now)
    raw = list(PlacementVerdicts.objects.order_by("key").values_list("key", "body", "created_at"))
    assert [row[2] for row in raw] == [now, now]
    PlacementVerdicts.objects.all().delete()
    PlacementVerdicts.objects.bulk_create([PlacementVerdicts(key=key, body=body) for key, body in bodies.items()],
                                          ignore_conflicts=True)
    assert [row[:2] for row in raw] == list(PlacementVerdicts.objects.order_by("key").values_list("key", "body"))
    writes.verdicts_write([SimpleNamespace(verdicts_key="k1", verdicts_json='{"candidates": []}')], now)
    assert PlacementVerdicts.objects.get(key="k1").body == bodies["k1"]
    assert PlacementVerdicts.objects.count() == 2


def test_analyze_skips_the_stored_json_columns():
    """The placement table's requirement, decision and history carry no statistics target (migration 0005):
    autovacuum's ANALYZE of a growing table does not sort samples of them; every other column keeps the
    default."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT attname, attstattarget FROM pg_attribute WHERE attrelid = %s::regclass "
                       "AND attnum > 0 AND NOT attisdropped", [ExecutionPlacement._meta.db_table])
        targets = dict(cursor.fetchall())
    assert {name: targets[name] for name in ("requirement", "decision", "history")} == dict.fromkeys(
        ("requirement", "decision", "history"), 0)
    assert all(target in (-1, None) for name, target in targets.items()
               if name not in ("requirement", "decision", "history"))


def test_placements_by_grove_are_found_through_the_composite_index_alone():
    """Every placement written pays an entry in each index of the table: the Grove foreign key has no index
    of its own (migration 0006), the (grove, -created_at) index leads with it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s", [ExecutionPlacement._meta.db_table])
        definitions = [row[0] for row in cursor.fetchall()]
    by_grove = [d for d in definitions if "(grove_id" in d]
    assert len(by_grove) == 1 and "(grove_id, created_at DESC)" in by_grove[0], definitions
