"""The daily refusal rollup: equal to a direct aggregate of the placements, idempotent across runs, moved by
re-placement, and what the report reads for the days it covers (the rest of a window is read raw)."""
from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, time, timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from apps.placement.models import ExecutionPlacement
from apps.staff import selectors, services, tasks
from apps.staff.models import ALL_CODES, Grain, RefusalRollup, RollupWatermark

pytestmark = pytest.mark.django_db

TODAY = timezone.now().astimezone(UTC).date()


@pytest.fixture(autouse=True)
def _today():
    """Each test's own today (a session may cross midnight UTC)."""
    global TODAY
    TODAY = timezone.now().astimezone(UTC).date()


@pytest.fixture(autouse=True)
def _admin(django_user_model):
    """The report as a staff admin reads it: every team by name."""
    global ADMIN
    ADMIN = django_user_model.objects.create_superuser("rollup-admin")


def _placement(n: int, *, day_ago: int, codes=(), would_refuse=None, enforced=False, grove="g-a", team="ml",
               hour: int = 12) -> ExecutionPlacement:
    would_refuse = bool(codes) and not enforced if would_refuse is None else would_refuse
    row = ExecutionPlacement.objects.create(
        subject_type="compute_step", subject_id=f"s{n}", grove=None, grove_slug=grove,
        selected_platform="linux/amd64", requirement={}, chooser="selection", enforced=enforced,
        would_refuse=would_refuse, team=team,
        decision={"incompatibilities": [{"code": code, "message": "no"} for code in codes], "candidates": []})
    # Today's rows at its first instant: never in the future, whatever the time of day the test runs.
    moment = datetime.combine(TODAY - timedelta(days=day_ago), time(hour) if day_ago else time.min, tzinfo=UTC)
    ExecutionPlacement.objects.filter(pk=row.pk).update(created_at=moment)
    return row


def _estate() -> None:
    """Five days of placements: shadow refusals with one or two codes, enforced refusals, compatible ones
    (shadow and enforced), over two Groves and three teams (one of them empty)."""
    n = 0
    for day_ago in range(5):
        for i in range(day_ago + 2):
            n += 1
            _placement(n, day_ago=day_ago, codes=("platform_mismatch",), grove=("g-a", "g-b")[i % 2],
                       team=("ml", "web", "")[i % 3])
        n += 1
        _placement(n, day_ago=day_ago, codes=("substrate_mismatch", "change_kind_not_advertised"), team="web")
        n += 1
        _placement(n, day_ago=day_ago, codes=("platform_mismatch",), enforced=True, grove="g-b", team="ml")
        n += 1
        _placement(n, day_ago=day_ago)  # compatible
        n += 1
        _placement(n, day_ago=day_ago, enforced=True)  # compatible, enforced
    # Written long before any rollup run (beyond its settle margin).
    ExecutionPlacement.objects.update(
        updated_at=timezone.now() - timedelta(seconds=2 * settings.STAFF_REFUSAL_ROLLUP_SETTLE_S))


def _direct() -> Counter:
    """The rollup computed by hand from the placement rows: the detail grain (refused and would-refuse apart),
    then its margins."""
    detail: Counter = Counter()
    for row in ExecutionPlacement.objects.all():
        codes = [item["code"] for item in row.decision["incompatibilities"]]
        if not (row.would_refuse or (codes and row.enforced)):
            continue
        day = row.created_at.astimezone(UTC).date()
        outcome = "refused" if row.outcome == "refused" or not row.would_refuse else "would_refuse"
        detail[(Grain.DETAIL, day, ALL_CODES, row.grove_slug, row.team, outcome)] += 1
        for code in codes:
            detail[(Grain.DETAIL, day, code, row.grove_slug, row.team, outcome)] += 1
    expected = Counter(detail)
    for (_grain, day, code, grove, team, outcome), n in detail.items():
        if code == ALL_CODES:
            expected[(Grain.DAY, day, "", "", "", "")] += n
            expected[(Grain.GROVE, day, "", grove, "", "")] += n
            expected[(Grain.TEAM, day, "", "", team, "")] += n
            expected[(Grain.OUTCOME, day, "", "", "", outcome)] += n
        else:
            expected[(Grain.CODE, day, code, "", "", "")] += n
    return expected


def _rollup() -> Counter:
    return Counter({(r.grain, r.day, r.code, r.grove_slug, r.team, r.outcome): r.count
                    for r in RefusalRollup.objects.all()})


def _report_figures(since, until) -> tuple:
    report = selectors.refusal_report(ADMIN, since=since, until=until)
    return (report.total, report.refused, report.would_refuse, report.groves, report.no_grove, report.by_code,
            report.by_grove, report.by_team, report.trend)


def test_rollup_equals_a_direct_aggregate_over_several_days():
    _estate()
    window = (datetime.combine(TODAY - timedelta(days=6), time.min, tzinfo=UTC), timezone.now() + timedelta(hours=1))
    raw = _report_figures(*window)  # never run: the report reads the placements
    assert selectors.rollup_covers() is None
    run = services.refusal_rollup_update()
    assert _rollup() == _direct() and len(run.days) == 5 and run.rows == len(_direct())
    four, one = TODAY - timedelta(days=4), TODAY - timedelta(days=1)
    assert _rollup()[(Grain.DETAIL, four, ALL_CODES, "g-a", "web", "would_refuse")] == 2  # one code, two codes
    assert _rollup()[(Grain.DETAIL, one, "change_kind_not_advertised", "g-a", "web", "would_refuse")] == 1
    assert _rollup()[(Grain.DAY, one, "", "", "", "")] == 5  # 3 one-code, 1 two-code, 1 enforced
    assert _rollup()[(Grain.OUTCOME, one, "", "", "", "refused")] == 1  # the enforced one: refused, not would-refuse
    assert _rollup()[(Grain.OUTCOME, one, "", "", "", "would_refuse")] == 4
    assert selectors.rollup_covers() == TODAY
    # The same figures, now from the rollup for the four whole past days and the placements for today.
    assert _report_figures(*window) == raw
    assert raw[0] == sum(n for (grain, *_key), n in _direct().items() if grain == Grain.DAY)


def test_incremental_runs_never_double_count_and_follow_changed_verdicts():
    _estate()
    services.refusal_rollup_update()
    first = _rollup()
    again = services.refusal_rollup_update()
    assert _rollup() == first and again.days == []  # nothing changed since the watermark
    # New refusals today, one stamped on an old day (a late commit), and a re-placed row that no longer refuses.
    _placement(100, day_ago=0, codes=("platform_mismatch",), team="data")
    _placement(101, day_ago=3, codes=("substrate_mismatch",), grove="g-c")
    replaced = ExecutionPlacement.objects.filter(would_refuse=True, created_at__date=TODAY - timedelta(days=2)).first()
    replaced.would_refuse = False
    replaced.decision = {"incompatibilities": [], "candidates": []}
    replaced.save()
    run = services.refusal_rollup_update()
    assert sorted(run.days) == sorted({TODAY, TODAY - timedelta(days=2), TODAY - timedelta(days=3)})
    assert _rollup() == _direct() != first
    services.refusal_rollup_update()
    services.refusal_rollup_update(rebuild=True)
    assert _rollup() == _direct()


def test_a_run_reads_back_over_the_settle_margin():
    """A placement stamped before the last run but committed after it is still found by the next run."""
    _estate()
    services.refusal_rollup_update()
    late = _placement(200, day_ago=1, codes=("platform_mismatch",), grove="g-late")
    stamp = timezone.now() - timedelta(seconds=settings.STAFF_REFUSAL_ROLLUP_SETTLE_S / 2)
    ExecutionPlacement.objects.filter(pk=late.pk).update(updated_at=stamp)
    RollupWatermark.objects.filter(name=selectors.REFUSAL_ROLLUP).update(through=timezone.now())
    services.refusal_rollup_update()
    assert _rollup()[(Grain.GROVE, TODAY - timedelta(days=1), "", "g-late", "", "")] == 1 and _rollup() == _direct()


def test_the_report_reads_the_rollup_for_covered_days_and_placements_for_the_rest():
    _estate()
    services.refusal_rollup_update()
    covered = TODAY - timedelta(days=2)
    # Doctor the margins of one day: the report's figures for that day follow them, which only a rollup read
    # explains.
    RefusalRollup.objects.filter(grain=Grain.DAY, day=covered).update(count=1000)
    RefusalRollup.objects.filter(grain=Grain.GROVE, day=covered, grove_slug="g-b").update(count=1000)
    RefusalRollup.objects.filter(grain=Grain.CODE, day=covered, code="substrate_mismatch").update(count=500)
    # Today is not covered yet: a refusal made after the run is counted from the placements.
    _placement(300, day_ago=0, codes=("accelerator_api_mismatch",), grove="g-new", team="new", hour=0)
    since = datetime.combine(TODAY - timedelta(days=4), time.min, tzinfo=UTC)
    report = selectors.refusal_report(ADMIN, since=since, until=timezone.now() + timedelta(minutes=1))
    assert dict(report.trend)[covered] == 1000 and report.by_grove[0][0] == "g-b" and report.by_grove[0][1] > 1000
    assert dict(report.by_code)["substrate_mismatch"] == 500 + 4  # the doctored day, plus four days of one each
    assert ("g-new", 1) in report.by_grove and ("new", 1) in report.by_team
    assert dict(report.by_code)["accelerator_api_mismatch"] == 1
    # A window that starts mid-day reads that partial day from the placements (the doctored day is excluded).
    later = selectors.refusal_report(ADMIN, since=datetime.combine(covered, time(13), tzinfo=UTC),
                                     until=datetime.combine(covered + timedelta(days=1), time.min, tzinfo=UTC))
    assert later.total == 0


def test_the_beat_task_updates_the_rollup():
    assert "staff.refusal_rollup" in {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    _estate()
    assert tasks.refusal_rollup.apply().get() == len(_direct())
    assert _rollup() == _direct()


def _orm_counts(key: str, since, until) -> list[tuple]:
    """``selectors._counts`` through the ORM and Python: refused placements created in [since, until)."""
    counts: Counter = Counter()
    for row in ExecutionPlacement.objects.filter(created_at__gte=since, created_at__lt=until):
        codes = [item["code"] for item in row.decision["incompatibilities"]]
        if not (row.would_refuse or row.outcome == "refused" or (codes and row.enforced)):
            continue
        if key == "code":
            counts.update(code for code in codes if code)
        else:
            counts[{"total": "", "day": row.created_at.astimezone(UTC).date(), "grove_slug": row.grove_slug,
                    "team": row.team}[key]] += 1
    order = (lambda item: item[0]) if key == "day" else (lambda item: (-item[1], item[0]))
    return sorted(counts.items(), key=order)


@pytest.mark.parametrize("key", ["total", "day", "grove_slug", "team", "code"])
def test_the_count_statement_equals_its_orm_form_from_placements_and_from_the_rollup(key):
    """docs/architecture.md "Fast paths": ``_counts`` (placements, rollup margins, or both in one statement)
    answers what the ORM reading of the placements answers, for a window cutting days in half."""
    _estate()
    since = datetime.combine(TODAY - timedelta(days=3), time(6), tzinfo=UTC)
    until = timezone.now() + timedelta(hours=1)

    def raw() -> list[tuple]:
        return [(str(k) if key == "total" else k, n) for k, n in selectors._counts(selectors._split(since, until),
                                                                                   key=key)]

    expected = [("", n) for _k, n in _orm_counts(key, since, until)] if key == "total" else \
        _orm_counts(key, since, until)
    if key == "total":
        expected = [("", sum(n for _k, n in expected))]
    assert raw() == expected  # the rollup never ran: all from the placements
    services.refusal_rollup_update()
    assert selectors._split(since, until).first is not None
    assert raw() == expected  # whole days from the rollup, the rest from the placements
