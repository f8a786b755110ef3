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
])
def test_report_body_validation(body, code, field):
    with pytest.raises(ValidationFailed) as info:
        rules.job_report(body)
    assert (info.value.code, info.value.field) == (code, field)


def test_changes_wait_bounds():
    assert rules.changes_wait(None) == 20
    assert rules.changes_wait("0") == 0
    for bad in ("31", "-1", "soon"):
        with pytest.raises(ValidationFailed) as info:
            rules.changes_wait(bad)
        assert info.value.code == "invalid_wait"
