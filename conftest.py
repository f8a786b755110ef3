"""Repository-wide pytest options, loaded for every test path (Host tests and the agent's own)."""
from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-goldens", action="store_true", default=False,
                     help="rewrite golden files (renderer YAML, examples/gpu-smoke/rendered); review the diff")


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens", default=False))
