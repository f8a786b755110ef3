"""Browser fixtures: Playwright driving Debian's Chromium (/usr/bin/chromium) against a live Host.

Playwright's sync API runs an event loop in the test thread, so Django's async-safety guard must be
relaxed for these tests only (the ORM calls happen in the same thread, never concurrently).
"""
from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture
def browser_page(tmp_path):
    if not os.path.exists(CHROMIUM):
        pytest.fail("Debian's chromium is not installed (scripts/services-up.sh installs it when run as root)")
    from playwright.sync_api import sync_playwright

    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        page = browser.new_page()
        page.set_default_timeout(15_000)
        try:
            yield page
        finally:
            browser.close()
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
