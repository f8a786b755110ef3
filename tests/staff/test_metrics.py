"""/metrics: Forest's own gauges next to the process ones, for staff or the scrape token only."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def _value(text: str, prefix: str) -> float:
    line = next(line for line in text.splitlines() if line.startswith(prefix))
    return float(line.rsplit(" ", 1)[1])


def test_metrics_need_staff_or_the_scrape_token(client, settings, django_user_model, staff_user):
    settings.FOREST_METRICS_TOKEN = "scrape-secret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret").status_code == 200
    client.force_login(django_user_model.objects.create_user("visitor", is_staff=False))
    assert client.get("/metrics").status_code == 401
    client.force_login(staff_user)
    assert client.get("/metrics").status_code == 200


def test_no_token_configured_means_staff_only(client, settings):
    settings.FOREST_METRICS_TOKEN = ""
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401


def test_forest_metrics_describe_groves_placements_queue_and_outbox(staff_browser, dispatched_run):
    dispatched_run()
    text = staff_browser.get("/metrics").content.decode()
    assert _value(text, 'forest_groves{simulated="false",state="fresh",substrate="native"}') == 1
    assert _value(text, 'forest_groves{simulated="false",state="fresh",substrate="kubernetes"}') == 1
    assert _value(text, 'forest_placement_decisions_recent{chooser="explicit",outcome="would_refuse"}') == 1
    assert _value(text, 'forest_placement_decisions_recent{chooser="selection",outcome="placed"}') == 1
    assert _value(text, 'forest_pipeline_queue_depth{status="awaiting"}') == 2
    assert _value(text, 'forest_grove_jobs_live{status="assigned"}') == 2
    assert _value(text, "forest_outbox_backlog") == 0
    assert "forest_resume_lag_seconds" in text and "forest_placement_incompatibilities_recent{code=" in text
    assert "django_http_requests" in text  # django-prometheus's process metrics are still there


def test_simulated_and_not_ready_groves_are_labelled(staff_browser, fresh_grove):
    from apps.groves.models import Grove

    demo, _ = fresh_grove(name="demo", polled=False)
    Grove.objects.filter(pk=demo.pk).update(simulated=True)
    fresh_grove(name="idle", polled=False)
    fresh_grove(name="busy")
    text = staff_browser.get("/metrics").content.decode()
    assert _value(text, 'forest_groves{simulated="true",state="fresh",substrate="native"}') == 1
    assert _value(text, 'forest_groves{simulated="false",state="fresh",substrate="native"}') == 2
    assert _value(text, 'forest_groves_unready{simulated="true",substrate="native"}') == 1
    assert _value(text, 'forest_groves_unready{simulated="false",substrate="native"}') == 1


def test_the_grafana_dashboard_queries_only_metrics_we_serve(staff_browser):
    import json
    import re
    from pathlib import Path

    from django.conf import settings

    dashboard = json.loads((Path(settings.BASE_DIR) / "docs/grafana-dashboard.json").read_text())
    served = staff_browser.get("/metrics").content.decode()
    for panel in dashboard["panels"]:
        for name in re.findall(r"\b(forest_[a-z_]+)", panel["targets"][0]["expr"]):
            assert f"# TYPE {name} " in served, name
