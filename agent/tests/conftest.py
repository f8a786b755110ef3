"""Fixtures for the agent's own tests. Nothing here needs Django or a database: the agent is a
separate package, and these tests run with plain pytest (`cd agent && pytest`) or from the repo root.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import pytest
from helpers import Signer
from stub_host import StubHost


@pytest.fixture
def host() -> Iterator[StubHost]:
    server = StubHost().start()
    yield server
    server.stop()


@pytest.fixture
def signer() -> Signer:
    return Signer()


@pytest.fixture(autouse=True)
def _agent_logs_propagate() -> Iterator[None]:
    # The CLI detaches the agent logger from root; tests want caplog to see it.
    logger = logging.getLogger("forest_agent")
    logger.propagate = True
    logger.setLevel(logging.INFO)
    yield


def pytest_addoption(parser: pytest.Parser) -> None:
    # The repository's root conftest adds the same option when the agent is tested from the repo root.
    with contextlib.suppress(ValueError):
        parser.addoption(
            "--update-goldens",
            action="store_true",
            default=False,
            help="rewrite the golden YAML of the Kubernetes renderer (review the diff before committing)",
        )


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens", default=False))
