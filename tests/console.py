"""This test run's console scripts (celery, uvicorn, forest, forest-agent, forest-controller): beside the
interpreter running the tests, wherever the virtual environment and the checkout are, never assumed to be
`<checkout>/.venv` (tests/deploy/test_checkout_anywhere.py runs the path-sensitive tests elsewhere)."""

from __future__ import annotations

import sys
from pathlib import Path


def console_script(name: str) -> str:
    """The path of console script `name` of the environment this interpreter belongs to."""
    return str(Path(sys.executable).with_name(name))
