"""CLI tables at 80 columns (forest_cli/tables.py): every line fits, every header word is whole, no cell is
cut to nothing or to "…", and columns left out at a narrow width are named in the caption. Rendered by a
rich Console of the given width, and through the real commands against a live Host with COLUMNS=80."""
from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console
from typer.testing import CliRunner

from forest_cli.main import app
from forest_cli.tables import Col, table

HEADERS = ["grove", "substrate", "roles", Col("platforms", drop=1),
           "cpu free/alloc", "memory free/alloc", "accelerators", "report"]
ROWS = [["gpu-box-1", "kubernetes", "compute, build", "linux/amd64, linux/arm64", "12.5/16", "23.5 GiB/64 GiB",
         "NVIDIA H100 80GB HBM3 (cuda)", "[green]fresh[/green] [red]not ready[/red] 3 m ago"],
        ["mac-studio-1", "native", "compute", "darwin/arm64", "24/24", "192 GiB/192 GiB", "Apple M2 Ultra (metal)",
         "fresh 1 s ago"]]


def _render(width: int, headers=HEADERS, rows=ROWS) -> str:
    buffer = io.StringIO()
    Console(width=width, file=buffer, color_system=None).print(table(headers, rows, width=width, title="Groves"))
    return buffer.getvalue()


def _readable(text: str, headers, width: int) -> None:
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width, text
    assert "…" not in text, text
    words = set(re.findall(r"\S+", text))
    shown = [h for h in headers if (h.header if isinstance(h, Col) else h) not in _hidden(text)]
    for header in shown:
        for word in (header.header if isinstance(header, Col) else header).split():
            assert word in words, (word, text)


def _hidden(text: str) -> list[str]:
    found = re.search(r"not shown at \d+ columns: (.*?) \(--json", text.replace("\n", " "))
    return found[1].split(", ") if found else []


@pytest.mark.parametrize("width", [80, 100, 120, 200])
def test_every_width_keeps_headers_whole_and_no_cell_empty(width):
    text = _render(width)
    _readable(text, HEADERS, width)
    tokens = re.findall(r"\S+", text)
    for row in ROWS:
        for header, cell in zip(HEADERS, row, strict=True):
            name = header.header if isinstance(header, Col) else header
            if name in _hidden(text):
                continue
            first = re.sub(r"\[/?[a-z ]+\]", "", cell).split()[0]
            # each cell starts on its line whole (its first word, up to 6 characters): folded, never cut away
            assert any(token.startswith(first[:6]) for token in tokens), (name, cell, text)


def test_at_80_columns_the_optional_column_goes_and_the_caption_says_so():
    text = _render(80)
    assert _hidden(text) == ["platforms"] and "linux/amd64" not in text
    assert "gpu-box-1" in text and "kubernetes" in text  # words up to 12 characters are not folded
    assert "platforms" in _render(200) and _hidden(_render(200)) == []


def test_an_id_column_is_never_folded():
    rows = [["a", "0f6c2a9e-1b7d-4c55-9a1e-2d3b4c5d6e7f", "x" * 90]]
    text = _render(80, ["name", Col("id", whole=True), "detail"], rows)
    _readable(text, ["name", "id", "detail"], 80)
    assert "0f6c2a9e-1b7d-4c55-9a1e-2d3b4c5d6e7f" in text


@pytest.mark.django_db(transaction=True)
def test_the_commands_read_well_at_80_columns(live_server, staff_user, flag_on, fresh_grove, tmp_path):
    from tests.factories import api_token_for
    from tests.pipelines.graphs import IMAGE

    flag_on("host.staff.execution_observability")
    flag_on("host.deploy.forest_compute_jobs")
    fresh_grove(name="gpu-box-with-a-long-name", gpus=2)
    fresh_grove(name="kube", substrate="kubernetes", roles=("compute", "build"))
    token = api_token_for(staff_user)

    def run(*args: str) -> str:
        result = CliRunner().invoke(app, ["--host", live_server.url, "--token", token, *args],
                                    catch_exceptions=False, env={"COLUMNS": "80"})
        assert result.exit_code == 0, result.output
        return result.output

    submitted = json.loads(run("--json", "compute", "submit", "--cmd", "python -c 'print(1)'", "--image", IMAGE))
    for args, headers in (
            (("groves",), ["grove", "substrate", "roles", "cpu free/alloc", "memory free/alloc", "accelerators",
                           "report"]),
            (("inventory",), ["api", "vendor", "model", "memory", "sharing", "groves", "items",
                              "devices free/alloc"]),
            (("compute", "list"), ["name", "status", "environment", "steps", "id"]),
            (("compute", "status", submitted["id"]), ["step", "status", "try", "wait", "grove", "exit", "reason"]),
            (("runs", "list"), ["kind", "status", "environment", "id"]),
            (("placements",), ["id", "subject", "status", "grove", "verdict", "placed"])):
        text = run(*args)
        _readable(text, headers, 80)
