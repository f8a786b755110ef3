"""A workload status report is validated from its declaration (``apps.workloads.bodies.WorkloadStatus``) in
today's shape: the same codes, exact paths, the nearest key for a typo, and the same normalised dict."""
from __future__ import annotations

import pytest

from apps.core.errors import ValidationFailed
from apps.workloads import rules
from apps.workloads.bodies import WorkloadStatus


@pytest.mark.parametrize(("body", "code", "field"), [
    ({}, "field_required", "state"),
    ({"state": "exploded"}, "invalid_choice", "state"),
    ({"state": "live", "live": 1}, "invalid_type", "live"),
    ({"state": "live", "restarts": -1}, "out_of_range", "restarts"),
    ({"state": "live", "restarts": 1_000_001}, "out_of_range", "restarts"),
    ({"state": "live", "probes": []}, "invalid_type", "probes"),
    ({"state": "live", "probes": {"readiness": "green"}}, "invalid_choice", "probes.readiness"),
    ({"state": "live", "probes": {"liveness": None}}, "invalid_choice", "probes.liveness"),
    ({"state": "live", "probes": {"startup": "passing"}}, "unknown_field", "probes.startup"),
    ({"state": "live", "reason": 5}, "invalid_type", "reason"),
    ({"state": "live", "message": "m" * 2001}, "too_long", "message"),
    ({"state": "live", "log_tail": ["", 1]}, "invalid_type", "log_tail[1]"),
    ({"state": "live", "restart": 1}, "unknown_field", "restart"),
    ("live", "invalid_type", ""),
])
def test_refusals_keep_todays_code_and_path(body, code, field):
    with pytest.raises(ValidationFailed) as info:
        rules.status_report(body)
    assert (info.value.code, info.value.field) == (code, field)


def test_a_typo_names_the_nearest_key():
    with pytest.raises(ValidationFailed) as info:
        rules.status_report({"state": "live", "restart": 1})
    assert info.value.detail == "'restart' is not a field here; did you mean 'restarts'?"


def test_the_normalised_report():
    assert rules.status_report({"state": "starting"}) == {
        "state": "starting", "live": False, "restarts": 0, "probes": {}, "reason": "", "message": "", "log_tail": []}
    assert rules.status_report({"state": "live", "live": True, "restarts": 2, "probes": {"liveness": "failing"},
                                "reason": "probe", "message": "m", "log_tail": ["a", ""]}) == {
        "state": "live", "live": True, "restarts": 2, "probes": {"liveness": "failing"}, "reason": "probe",
        "message": "m", "log_tail": ["a", ""]}


def test_a_probe_left_out_has_no_null_default_in_the_schema():
    probes = WorkloadStatus.model_json_schema()["$defs"]["ProbeResults"]
    assert "default" not in probes["properties"]["readiness"] and not probes.get("required")
