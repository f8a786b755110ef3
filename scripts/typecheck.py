#!/usr/bin/env python3
"""mypy over Host, the Grove side and the CLI, held by a ratchet.

The strict modules (the ``[[tool.mypy.overrides]]`` block of pyproject.toml that sets
``disallow_untyped_defs``: rules, vocabularies, states, the lifecycle, platforms, forest_agent, forest_cli)
must have no error at all. Every other file may have at most the number of errors ``mypy-baseline.json``
records for it: a change that adds one fails, a change that removes some is told to lower the baseline
(``--update``, which never raises a count unless ``--allow-raise``).

    scripts/typecheck.py                          check (exit 1 on a new error, or when mypy did not run)
    scripts/typecheck.py --update                 write the lower counts back
    scripts/typecheck.py --update --allow-raise   accept today's counts, higher ones too (a new baseline)
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "mypy-baseline.json"
PYPROJECT = ROOT / "pyproject.toml"
TARGETS = ["apps", "forest_host", "forest_cli", "agent/src/forest_agent"]
SOURCE_ROOTS = ("agent/src/",)  # mypy_path: a module below one is named from there
# Options the parsing below relies on, whatever pyproject.toml or a user's mypy config says.
MYPY_FLAGS = ["--no-pretty", "--error-summary", "--no-color-output"]
_ERROR = re.compile(r"^(?P<file>[^:\s]+\.py):\d+(?::\d+)?: error: ")
_SUCCESS = re.compile(r"^Success: no issues found in (?P<checked>\d+) source files?$")
_FOUND = re.compile(r"^Found (?P<errors>\d+) errors? in \d+ files? \(checked (?P<checked>\d+) source files?\)$")


class MypyDidNotRun(SystemExit):
    """mypy crashed, was missing, or printed what this script cannot read: never a pass."""

    def __init__(self, why: str, output: str = "") -> None:
        super().__init__(f"mypy did not run: {why}" + (f"\n{output.rstrip()}" if output.strip() else ""))


def _module_regex(pattern: str) -> re.Pattern[str]:
    """mypy's override pattern as a regex: a ``*`` component stands for zero or more components."""
    regex = ""
    for index, part in enumerate(pattern.split(".")):
        regex += r"(?:\.[^.]+)*" if part == "*" else (r"\." if index else "") + re.escape(part)
    return re.compile(f"^{regex}$")


def strict_patterns(pyproject: Path = PYPROJECT) -> list[re.Pattern[str]]:
    """The module patterns pyproject.toml holds to mypy's strict flags (the one list of strict modules)."""
    overrides = tomllib.loads(pyproject.read_text()).get("tool", {}).get("mypy", {}).get("overrides", [])
    modules = [module for block in overrides if block.get("disallow_untyped_defs")
               for module in ([block["module"]] if isinstance(block["module"], str) else block["module"])]
    if not modules:
        raise SystemExit(f"{pyproject} holds no strict mypy override (disallow_untyped_defs): nothing is strict")
    return [_module_regex(module) for module in modules]


def module_of(file: str) -> str:
    """``agent/src/forest_agent/kube/spec.py`` -> ``forest_agent.kube.spec``; a package is its __init__."""
    for root in SOURCE_ROOTS:
        file = file.removeprefix(root)
    parts = file.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_strict(file: str, patterns: list[re.Pattern[str]]) -> bool:
    return any(pattern.match(module_of(file)) for pattern in patterns)


def parse(stdout: str, returncode: int) -> list[tuple[str, str]]:
    """Each error of one mypy run as (file, line). Raises ``MypyDidNotRun`` unless mypy ended with its own
    summary, checked at least one file and printed exactly the errors that summary counts."""
    lines = stdout.splitlines()
    errors = [(m["file"], line) for line in lines if (m := _ERROR.match(line))]
    summary = next((m for line in reversed(lines) if (m := _SUCCESS.match(line) or _FOUND.match(line))), None)
    if returncode not in (0, 1) or summary is None:
        raise MypyDidNotRun(f"exit status {returncode} and no summary line", stdout)
    if int(summary["checked"]) == 0:
        raise MypyDidNotRun("it checked no file", stdout)
    counted = int(summary.groupdict().get("errors") or 0)
    if counted != len(errors) or (returncode == 0) != (counted == 0):
        raise MypyDidNotRun(f"its summary counts {counted} errors, {len(errors)} were read (exit {returncode})",
                            stdout)
    return errors


def run_mypy(command: list[str] | None = None) -> list[tuple[str, str]]:
    if command is None:
        if importlib.util.find_spec("mypy") is None:
            raise MypyDidNotRun(f"it is not installed for {sys.executable} (pip install -e '.[dev]')")
        command = [sys.executable, "-m", "mypy", *MYPY_FLAGS, *TARGETS]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "agent/src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    return parse(done.stdout + done.stderr if done.returncode not in (0, 1) else done.stdout, done.returncode)


@dataclass
class Verdict:
    strict_errors: list[str] = field(default_factory=list)
    worse: dict[str, tuple[int, int]] = field(default_factory=dict)  # file -> (now, allowed)
    better: dict[str, tuple[int, int]] = field(default_factory=dict)  # file -> (now, allowed)
    counts: Counter[str] = field(default_factory=Counter)  # errors outside the strict modules, by file

    @property
    def failed(self) -> bool:
        return bool(self.strict_errors or self.worse)


def judge(errors: list[tuple[str, str]], baseline: dict[str, int], patterns: list[re.Pattern[str]]) -> Verdict:
    verdict = Verdict()
    for file, line in errors:
        if is_strict(file, patterns):
            verdict.strict_errors.append(line)
        else:
            verdict.counts[file] += 1
    verdict.worse = {f: (n, baseline.get(f, 0)) for f, n in verdict.counts.items() if n > baseline.get(f, 0)}
    verdict.better = {f: (verdict.counts.get(f, 0), n) for f, n in baseline.items() if verdict.counts.get(f, 0) < n}
    return verdict


def updated_baseline(verdict: Verdict, baseline: dict[str, int], *, allow_raise: bool) -> dict[str, int]:
    """Lower every count to today's; a higher count (or a new file) only with ``allow_raise``."""
    return {f: n if allow_raise or n <= baseline.get(f, 0) else baseline[f] for f, n in sorted(verdict.counts.items())
            if allow_raise or f in baseline}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--update", action="store_true", help="write lowered counts to mypy-baseline.json")
    parser.add_argument("--allow-raise", action="store_true", help="with --update: accept higher counts too")
    args = parser.parse_args(argv)
    patterns = strict_patterns()
    print("mypy: checking", " ".join(TARGETS), flush=True)
    errors = run_mypy()
    baseline: dict[str, int] = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    verdict = judge(errors, baseline, patterns)
    if args.update:
        baseline = updated_baseline(verdict, baseline, allow_raise=args.allow_raise)
        BASELINE.write_text(json.dumps(baseline, indent=1, sort_keys=True) + "\n")
        print(f"{BASELINE.name}: {sum(baseline.values())} errors in {len(baseline)} files")
        verdict = judge(errors, baseline, patterns)
    for line in verdict.strict_errors:
        print(line)
    for file, (now, allowed) in sorted(verdict.worse.items()):
        print(f"{file}: {now} mypy errors, the baseline allows {allowed}:")
        print("\n".join("  " + line for f, line in errors if f == file))
    if verdict.better:
        print(f"{len(verdict.better)} files have fewer errors than the baseline; run scripts/typecheck.py --update")
    if verdict.failed:
        print(f"mypy: FAILED ({len(verdict.strict_errors)} errors in strict modules, {len(verdict.worse)} files "
              f"above the baseline)")
        return 1
    print(f"mypy: ok (0 errors in strict modules; {sum(verdict.counts.values())} known errors in "
          f"{len(verdict.counts)} other files, the baseline allows {sum(baseline.values())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
