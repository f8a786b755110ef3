"""What every Grove-side command shares (forest-agent and forest-controller): exit codes, argument types,
signal handling, the wire timing options and the one ``main`` that runs a command and maps its failure
to one redacted line and an exit code. Below both executors: it imports neither ``native`` nor ``kube``."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from forest_agent.errors import AgentError, ConfigError
from forest_agent.logring import LogRing, Redactor, install_logging
from forest_agent.wire.client import WireError

EXIT_CONFIG, EXIT_REFUSED, EXIT_UNREACHABLE = 2, 3, 4


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a whole number greater than 0")
    return int(text)


def stop_on_signals(stop_event: threading.Event, *, hurry: threading.Event | None = None) -> None:
    """SIGTERM or Ctrl-C asks the executor to stop cleanly. A second one (of either: a Ctrl-C in
    `make run` reaches the agent as SIGINT from the terminal *and* SIGTERM from the process manager)
    sets `hurry` when given: the stop goes on, only its waits are cut short, so what the executor
    started is still stopped. Without `hurry`, or at the third, the default action kills at once."""
    received = 0

    def _stop(signum: int, _frame: Any) -> None:
        nonlocal received
        received += 1
        if received == 1:
            stop_event.set()
            return
        if hurry is not None and not hurry.is_set():
            hurry.set()
            return
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)


def add_wire_timing(timing: argparse._ArgumentGroup) -> None:
    """The wire client's timing options, the same for every executor (forest-agent, forest-controller)."""
    timing.add_argument(
        "--heartbeat-interval",
        type=positive_float,
        default=15.0,
        metavar="SECONDS",
        help="seconds between heartbeats (default 15; shortened if Host asks)",
    )
    timing.add_argument(
        "--poll-wait",
        type=int,
        default=20,
        choices=range(0, 31),
        metavar="SECONDS",
        help="long-poll wait, 0..30 (default 20)",
    )
    timing.add_argument(
        "--backoff-max",
        type=positive_float,
        default=60.0,
        metavar="SECONDS",
        help="longest wait between retries while Host is unreachable (default 60)",
    )


ExitRule = tuple[type[BaseException], Callable[[Any], int]]
# How each failure ends a command (checked in order; a program may put its own rules first).
EXIT_RULES: tuple[ExitRule, ...] = (
    (ConfigError, lambda exc: EXIT_CONFIG),
    (AgentError, lambda exc: EXIT_REFUSED),
    (WireError, lambda exc: EXIT_UNREACHABLE if exc.retryable else EXIT_REFUSED),
)


def run_command(program: str, build: Callable[[], argparse.ArgumentParser], argv: list[str] | None,
                commands: dict[str, Callable[[argparse.Namespace, LogRing], int]],
                exit_rules: tuple[ExitRule, ...] = ()) -> int:
    """Parse, set up logging through the redacting ring, run the chosen command, and turn a known failure
    into one redacted line and its exit code (the shared ``main`` of forest-agent and forest-controller)."""
    args = build().parse_args(argv)
    ring = LogRing(500, Redactor())
    install_logging(ring, verbose=args.verbose)
    try:
        return commands[args.command](args, ring)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        for kind, exit_code in (*exit_rules, *EXIT_RULES):
            if isinstance(exc, kind):
                print(f"{program}: error: {ring.redactor.redact(str(exc))}", file=sys.stderr)
                return exit_code(exc)
        raise
