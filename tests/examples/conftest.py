"""Fixtures for the examples tests: the wire Grove of the pipeline tests."""
from tests.pipelines.conftest import wire  # noqa: F401
