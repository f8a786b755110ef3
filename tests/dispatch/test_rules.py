"""The wire's job half as pure rules: the report body and the long-poll's ``wait``."""
from __future__ import annotations

import pytest

from apps.core.errors import ValidationFailed
from apps.dispatch import rules


@pytest.mark.parametrize(("body", "code", "field"), [
    ({}, "field_required", "state"),
    ({"state": "exploded"}, "invalid_choice", "state"),
    ({"state": "failed", "exit_code": "1"}, "invalid_type", "exit_code"),
    ({"state": "failed", "outputs": []}, "invalid_type", "outputs"),
    ({"state": "failed", "reason": "Not A Code"}, "invalid_reason", "reason"),
    ({"state": "running", "extra": 1}, "unknown_field", "extra"),
    ({"state": "failed", "exit_code": True}, "invalid_type", "exit_code"),
    ({"state": "failed", "exit_code": 256}, "out_of_range", "exit_code"),
    ({"state": "failed", "exit_code": -256}, "out_of_range", "exit_code"),
    ({"state": "failed", "log_tail": ["ok", 3]}, "invalid_type", "log_tail[1]"),
    ({"state": "failed", "outputs": {"blob": "x" * (64 * 1024)}}, "too_large", "outputs"),
    ({"state": "failed", "reason": ""}, "field_blank", "reason"),
    ({"state": "failed", "reason": "x" * 65}, "too_long", "reason"),
    ([], "invalid_type", ""),
])
def test_report_body_validation(body, code, field):
    with pytest.raises(ValidationFailed) as info:
        rules.job_report(body)
    assert (info.value.code, info.value.field) == (code, field)


def test_report_body_normalised_as_before():
    assert rules.job_report({"state": "running"}) == {"state": "running", "log_tail": [], "outputs": {}}
    assert rules.job_report({"state": "failed", "exit_code": -9, "reason": "oom_killed", "outputs": {"a": 1},
                             "log_tail": ["", "x"]}) == {
        "state": "failed", "exit_code": -9, "reason": "oom_killed", "outputs": {"a": 1}, "log_tail": ["", "x"]}
    assert rules.job_report({"state": "failed", "exit_code": None, "reason": None}) == {
        "state": "failed", "log_tail": [], "outputs": {}}


def test_unknown_key_names_the_nearest_declared_one():
    with pytest.raises(ValidationFailed) as info:
        rules.job_report({"state": "failed", "exit_cod": 1})
    assert info.value.detail == "'exit_cod' is not a field here; did you mean 'exit_code'?"


def test_changes_wait_bounds():
    assert rules.changes_wait(None) == 20
    assert rules.changes_wait("0") == 0
    for bad in ("31", "-1", "soon"):
        with pytest.raises(ValidationFailed) as info:
            rules.changes_wait(bad)
        assert info.value.code == "invalid_wait"
