"""The status snapshot `forest-agent status` reads back: an object, or nothing (a missing, unreadable or
non-object file is no snapshot, so the status command never fails on `.get` of a list)."""
from __future__ import annotations

from pathlib import Path

import pytest

from forest_agent.state import StateDir


def test_the_snapshot_written_is_the_snapshot_read(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    assert state.read_status() is None
    state.write_status({"jobs": [{"job_id": "j1", "state": "running"}]})
    assert state.read_status() == {"jobs": [{"job_id": "j1", "state": "running"}]}


@pytest.mark.parametrize("text", ["[]", "null", '"running"', "{not json"])
def test_a_snapshot_that_is_not_an_object_is_none(tmp_path: Path, text: str) -> None:
    state = StateDir(tmp_path)
    state.status_path.write_text(text)
    assert state.read_status() is None
