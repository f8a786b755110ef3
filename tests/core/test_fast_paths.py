"""Raw SQL lives only where docs/architecture.md "Fast paths" lists it: a new ``cursor()``, ``execute``,
``raw``, ``extra`` or ``RawSQL`` in a function of apps/ or forest_host/ that the table does not list fails
here, as does a listed function that no longer runs SQL (the list would be stale). Migrations are schema
changes, not reads or writes, and are not scanned. Every statement builder names tables and columns from
``_meta``: ``sql_from_meta`` refuses a field the model does not have."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from apps.core.db import sql_from_meta
from apps.groves.models import Grove, GroveCredential

ROOT = Path(__file__).resolve().parents[2]
CALLS = {"cursor", "execute", "executemany", "raw", "extra"}
NAMES = {"RawSQL"}


def raw_sql_sites(root: Path = ROOT) -> set[tuple[str, str]]:
    """(file, innermost enclosing function) of every call under ``root``'s apps/ and forest_host/ that runs
    SQL by hand."""
    sites = set()
    for path in sorted([*root.joinpath("apps").rglob("*.py"), *root.joinpath("forest_host").rglob("*.py")]):
        if "migrations" in path.relative_to(root).parts:
            continue
        def visit(node, scope: tuple[str, ...], relative: str) -> None:
            for child in ast.iter_child_nodes(node):
                inner = scope
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    inner = (*scope, child.name)
                if isinstance(child, ast.Call):
                    func = child.func
                    if (isinstance(func, ast.Attribute) and func.attr in CALLS) or \
                            (isinstance(func, ast.Name) and func.id in NAMES):
                        sites.add((relative, scope[-1] if scope else "<module>"))
                visit(child, inner, relative)

        visit(ast.parse(path.read_text()), (), path.relative_to(root).as_posix())
    return sites


def listed_sites() -> set[tuple[str, str]]:
    text = ROOT.joinpath("docs/architecture.md").read_text()
    section = text.split("## Fast paths", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `((?:apps|forest_host)/[\w/]+\.py)` `(\w+)` \|", section, flags=re.M))


def test_every_raw_sql_site_is_listed_in_fast_paths_and_every_listed_one_exists():
    found, listed = raw_sql_sites(), listed_sites()
    assert len(listed) >= 15, "the Fast paths table was not parsed"
    assert not found - listed, f"raw SQL not listed in docs/architecture.md 'Fast paths': {sorted(found - listed)}"
    assert not listed - found, f"listed in 'Fast paths' but running no SQL any more: {sorted(listed - found)}"


def test_the_scan_sees_a_new_site(tmp_path):
    """The scan itself: a function running ``cursor.execute`` is found (so an unlisted one would fail)."""
    (tmp_path / "apps" / "core" / "migrations").mkdir(parents=True)
    (tmp_path / "apps" / "core" / "probe.py").write_text(
        "def probe(connection):\n    with connection.cursor() as c:\n        c.execute('SELECT 1')\n"
        "def lookup(Model, RawSQL):\n    return Model.objects.annotate(x=RawSQL('1', []))\n")
    (tmp_path / "apps" / "core" / "migrations" / "0001_x.py").write_text("def f(c):\n    c.execute('')\n")
    assert raw_sql_sites(tmp_path) == {("apps/core/probe.py", "probe"), ("apps/core/probe.py", "lookup")}


def test_statements_name_tables_and_columns_from_meta():
    assert sql_from_meta("SELECT c.{c.grove} FROM {c} c JOIN {g} g ON g.{g.id} = c.{c.grove_id}",
                         c=GroveCredential, g=Grove) == (
        f"SELECT c.grove_id FROM {GroveCredential._meta.db_table} c JOIN {Grove._meta.db_table} g "
        "ON g.id = c.grove_id")
    with pytest.raises(AttributeError, match="no concrete field 'no_such_field'"):
        sql_from_meta("SELECT {g.no_such_field} FROM {g}", g=Grove)
