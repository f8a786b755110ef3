"""End-to-end fixtures: Playwright driving Debian's Chromium (/usr/bin/chromium) against a live Host, and
the real ``forest-agent`` process (enrolled through its own CLI) with a real Celery worker.

Playwright's sync API runs an event loop in the test thread, so Django's async-safety guard must be
relaxed for these tests only (the ORM calls happen in the same thread, never concurrently).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from apps.groves.models import Grove
from apps.groves.services import enrollment_token_create
from tests.console import console_script

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]
AGENT = console_script("forest-agent")


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


# The real Celery worker subprocess and its private queue, shared with the pipeline reliability tests.
from tests.pipelines.conftest import celery_queue, worker  # noqa: E402,F401


class AgentProcess:
    """``forest-agent run`` as a child process in its own session, with its output in a file."""

    def __init__(self, state_dir: Path, log_path: Path, *args: str):
        self.state_dir, self.log_path, self.args, self.proc = state_dir, log_path, args, None

    def start(self) -> AgentProcess:
        self.log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [str(AGENT), "run", "--state-dir", str(self.state_dir), "--heartbeat-interval", "1",
             "--poll-wait", "2", "--kill-grace", "1", "--backoff-max", "2", *self.args],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def kill(self) -> None:
        """SIGKILL the agent alone (its jobs run in their own process groups and survive it)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]


@pytest.fixture
def enrolled(live_server, tmp_path):
    """Enroll a fresh state directory through the agent's own CLI; returns (grove, state dir)."""
    _, token = enrollment_token_create(roles=["compute", "runtime"], substrate="native")
    state_dir = tmp_path / "agent-state"
    result = subprocess.run([str(AGENT), "enroll", "--host", live_server.url, "--token", token, "--name", "e2e-box",
                             "--state-dir", str(state_dir)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    grove = Grove.objects.get(name="e2e-box")
    identity = next(state_dir.glob("identity*"))
    assert identity.stat().st_mode & 0o077 == 0  # the credential file is private
    return grove, state_dir


@pytest.fixture
def agents(tmp_path):
    started: list[AgentProcess] = []

    def _start(state_dir: Path, *args: str) -> AgentProcess:
        agent = AgentProcess(state_dir, tmp_path / f"agent-{len(started)}.log", *args).start()
        started.append(agent)
        return agent

    yield _start
    for agent in started:
        agent.stop()
