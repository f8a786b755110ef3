"""Readiness tells the truth about the background processes (issue 34, item 3): the liveness probe's record,
/healthz's ``processes`` and ``?require=``, the metrics, the staff status page, and the heartbeat files the
container health check reads (forest_host/liveness.py, forest_host/beat.py)."""
from __future__ import annotations

import socket
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.core.liveness import ProcessRole
from apps.core.models import ProcessHeartbeat
from apps.core.selectors import process_liveness
from apps.core.services import process_heartbeat_record
from apps.core.tasks import liveness_probe

pytestmark = pytest.mark.django_db


def _verdicts() -> dict[str, str]:
    return {row.role: row.verdict for row in process_liveness()}


def test_a_role_is_live_within_the_bound_stale_beyond_it_and_unknown_when_never_seen(settings):
    settings.FOREST_LIVENESS_WITHIN_S = 60
    now = timezone.now()
    process_heartbeat_record(role=ProcessRole.WORKER, node="celery@a", at=now - timedelta(seconds=59))
    process_heartbeat_record(role=ProcessRole.RUNNER, node="runner@a", at=now - timedelta(seconds=61))
    assert _verdicts() == {"worker": "live", "runner": "stale", "beat": "unknown"}
    # the newest node of a role decides: a second worker that is alive keeps the role live
    process_heartbeat_record(role=ProcessRole.RUNNER, node="runner@b", at=now)
    assert _verdicts()["runner"] == "live"


def test_an_older_probe_never_replaces_a_newer_stamp():
    now = timezone.now()
    process_heartbeat_record(role=ProcessRole.WORKER, node="celery@a", at=now)
    process_heartbeat_record(role=ProcessRole.WORKER, node="celery@a", at=now - timedelta(minutes=5))
    assert ProcessHeartbeat.objects.get(node="celery@a").seen_at == now


def test_the_probe_records_the_consuming_node_and_when_beat_sent_it():
    sent = time.time() - 5
    liveness_probe.apply(kwargs={"role": "runner", "sent_at": sent})  # eager: the node is this host's name
    rows = {(r.role, r.node): r.seen_at for r in ProcessHeartbeat.objects.all()}
    assert set(rows) == {("runner", socket.gethostname()), ("beat", "beat")}
    assert abs(rows[("beat", "beat")].timestamp() - sent) < 0.01
    assert (timezone.now() - rows[("runner", socket.gethostname())]).total_seconds() < 5


def test_healthz_reports_each_role_and_refuses_only_when_asked(client, settings):
    settings.FOREST_LIVENESS_WITHIN_S = 60
    now = timezone.now()
    process_heartbeat_record(role=ProcessRole.WORKER, node="celery@a", at=now - timedelta(seconds=300))
    process_heartbeat_record(role=ProcessRole.RUNNER, node="runner@a", at=now)
    process_heartbeat_record(role=ProcessRole.BEAT, node="beat", at=now)
    answer = client.get("/healthz")
    assert answer.status_code == 200  # a web with stale workers still takes reports: the outbox holds them
    assert answer.json() == {"status": "degraded", "processes": {"worker": "stale", "runner": "live",
                                                                 "beat": "live"}}
    assert "celery@a" not in answer.content.decode()  # roles and verdicts only, never node names
    assert client.get("/healthz?require=runner,beat").status_code == 200
    gated = client.get("/healthz?require=worker")
    assert gated.status_code == 503
    assert gated.json()["code"] == "processes_stale" and "worker" in gated.json()["detail"]
    wrong = client.get("/healthz?require=wizard")
    assert wrong.status_code == 400 and wrong.json()["code"] == "invalid_role" and wrong.json()["field"] == "require"
    process_heartbeat_record(role=ProcessRole.WORKER, node="celery@b", at=now)
    assert client.get("/healthz").json()["status"] == "ok"


def test_metrics_and_the_staff_status_page_show_liveness(client, staff_user, settings):
    from apps.flags.services import flag_override_set
    from apps.staff.views import FLAG

    flag_override_set(name=FLAG, enabled=True, reason="test")
    settings.FOREST_LIVENESS_WITHIN_S = 60
    process_heartbeat_record(role=ProcessRole.WORKER, node="celery@a", at=timezone.now() - timedelta(seconds=120))
    process_heartbeat_record(role=ProcessRole.BEAT, node="beat", at=timezone.now())
    client.force_login(staff_user)
    text = client.get("/metrics").content.decode()
    assert 'forest_process_live{role="worker"} 0.0' in text and 'forest_process_live{role="beat"} 1.0' in text
    assert 'forest_process_last_seen_age_seconds{role="runner"} -1.0' in text
    page = client.get("/staff/status/").content.decode()
    table = page.split('id="process-table"', 1)[1].split("</table>", 1)[0]
    rows = {cells[0]: cells[1] for cells in
            ([part.split("</td>")[0].split(">")[-1] if i == 0 else part for i, part in enumerate(row.split("<td>")[1:])]
             for row in table.split("<tr>")[2:])}
    assert ">stale<" in rows["worker"] and ">live<" in rows["beat"] and ">unknown<" in rows["runner"]


def test_heartbeat_files_age_and_beat_touches_only_after_a_publish_that_reached_the_broker(tmp_path, monkeypatch):
    """The beat side against a real broker URL on a closed loopback port: the send fails, so no touch."""
    from celery import Celery
    from celery.beat import ScheduleEntry, SchedulingError

    from forest_host import beat, liveness

    monkeypatch.setenv("FOREST_VAR_DIR", str(tmp_path))
    assert liveness.age_s("celery@x") is None and not liveness.is_live("celery@x")
    liveness.touch("celery@x")
    assert liveness.is_live("celery@x")
    assert liveness.age_s("celery@x", now=time.time() + liveness.STALE_AFTER_S + 1) > liveness.STALE_AFTER_S

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    app = Celery("beat-test", broker=f"redis://127.0.0.1:{port}/0")
    app.conf.broker_connection_max_retries = 0
    app.conf.broker_transport_options = {"max_retries": 0}
    scheduler = beat.Scheduler(app=app, schedule_filename=str(tmp_path / "schedule"), lazy=True)
    entry = ScheduleEntry(name="probe", task="core.liveness_probe", schedule=timedelta(seconds=10), app=app)
    with pytest.raises(SchedulingError):
        scheduler.apply_async(entry, advance=False)
    assert liveness.age_s(beat.beat_node()) is None


@pytest.mark.parametrize(("role", "node"), [("worker", "celery"), ("runner", "runner"), ("beat", "beat")])
def test_the_container_health_check_reads_each_roles_heartbeat_file(tmp_path, monkeypatch, role, node):
    import importlib.util

    from forest_host import liveness

    spec = importlib.util.spec_from_file_location("host_healthcheck", liveness.liveness_dir().parents[1] /
                                                  "docker" / "host-healthcheck.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    monkeypatch.setenv("FOREST_VAR_DIR", str(tmp_path))
    monkeypatch.setattr(check, "role", lambda: role)
    assert check.main() == 1  # never touched: unhealthy
    liveness.touch(f"{node}@{socket.gethostname()}")
    assert check.main() == 0
    old = time.time() - liveness.STALE_AFTER_S - 5
    import os

    os.utime(liveness.liveness_dir() / f"{node}@{socket.gethostname()}", (old, old))
    assert check.main() == 1  # stopped touching: unhealthy
