"""``forest artifacts lineage`` against a live Host: an artifact's producer and consumers, and a run's
inputs and outputs, as tables and as JSON."""
from __future__ import annotations

import json
import uuid

import pytest
from typer.testing import CliRunner

from forest_cli.main import app
from tests.artifacts.test_inputs import _produce
from tests.factories import api_token_for

pytestmark = pytest.mark.django_db(transaction=True)
runner = CliRunner()


def test_lineage_of_an_artifact_and_of_a_run(live_server, staff_user):
    token = api_token_for(staff_user, "cli")

    def cli(*args):
        return runner.invoke(app, ["--host", live_server.url, "--token", token, *args], catch_exceptions=False)

    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    data = _produce(first, "write", b"a result")
    _produce(second, "check", b"a verdict", inputs=[data])

    shown = cli("artifacts", "lineage", str(data.pk))
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "produced by" in text and "consumed by" in text
    assert f"{first}:write" in text and f"{second}:check" in text and data.digest[:19] in text

    as_json = json.loads(cli("--json", "artifacts", "lineage", str(data.pk), "--depth", "1").output)
    assert [c["run_id"] for c in as_json["consumers"]] == [second]

    run = json.loads(cli("--json", "artifacts", "lineage", "--run", second).output)
    assert [i["artifact"]["id"] for i in run["inputs"]] == [data.pk]
    assert len(run["outputs"]) == 1

    both = cli("artifacts", "lineage", str(data.pk), "--run", second)
    assert both.exit_code == 2 and "one of the two" in both.output
