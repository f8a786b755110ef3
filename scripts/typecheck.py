#!/usr/bin/env python3
"""mypy over Host, the Grove side and the CLI, held by a ratchet.

The strict modules (``[tool.mypy]`` overrides in pyproject.toml: rules, vocabularies, states, the lifecycle,
platforms, forest_agent, forest_cli) must have no error at all. Every other file may have at most the
number of errors ``mypy-baseline.json`` records for it: a change that adds one fails, a change that removes
some is told to lower the baseline (``--update``, which never raises a count unless ``--allow-raise``).

    scripts/typecheck.py            check (exit 1 on a new error)
    scripts/typecheck.py --update   write the lower counts back
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "mypy-baseline.json"
TARGETS = ["apps", "forest_host", "forest_cli", "agent/src/forest_agent"]
STRICT = re.compile(r"^(apps/[a-z_]+/(rules|vocabulary|states)\.py|apps/core/(lifecycle|platforms)\.py"
                    r"|forest_cli/.*|agent/src/forest_agent/.*)$")
_LINE = re.compile(r"^(?P<file>[^:\s]+\.py):\d+(?::\d+)?: error: ")


def run_mypy() -> tuple[Counter, list[str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "agent/src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    mypy = Path(sys.executable).with_name("mypy")
    done = subprocess.run([str(mypy), *TARGETS], cwd=ROOT, env=env, capture_output=True, text=True)
    lines = done.stdout.splitlines()
    if done.returncode not in (0, 1) or (done.returncode == 1 and not any(_LINE.match(x) for x in lines)):
        sys.exit(f"mypy did not run:\n{done.stdout}\n{done.stderr}")
    counts = Counter(m["file"] for line in lines if (m := _LINE.match(line)))
    return counts, [line for line in lines if _LINE.match(line)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="write lowered counts to mypy-baseline.json")
    parser.add_argument("--allow-raise", action="store_true", help="with --update: accept higher counts too")
    args = parser.parse_args()
    print("mypy: checking", " ".join(TARGETS), flush=True)
    counts, lines = run_mypy()
    baseline: dict[str, int] = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    strict_errors = [line for line in lines if STRICT.match(_LINE.match(line)["file"])]
    worse = {f: (n, baseline.get(f, 0)) for f, n in counts.items()
             if not STRICT.match(f) and n > baseline.get(f, 0)}
    better = {f: (counts.get(f, 0), n) for f, n in baseline.items() if counts.get(f, 0) < n}
    if args.update:
        updated = {f: n for f, n in sorted(counts.items()) if not STRICT.match(f)
                   and (args.allow_raise or n <= baseline.get(f, 0))}
        kept = {f: baseline[f] for f in worse if not args.allow_raise}
        BASELINE.write_text(json.dumps({**updated, **kept}, indent=1, sort_keys=True) + "\n")
        print(f"mypy-baseline.json: {sum(updated.values()) + sum(kept.values())} errors in "
              f"{len(updated) + len(kept)} files")
    for line in strict_errors:
        print(line)
    for file, (now, allowed) in sorted(worse.items()):
        print(f"{file}: {now} mypy errors, the baseline allows {allowed}:")
        print("\n".join("  " + line for line in lines if line.startswith(file + ":")))
    if better and not args.update:
        print(f"{len(better)} files have fewer errors than the baseline; run scripts/typecheck.py --update")
    total = sum(counts.values())
    if strict_errors or worse:
        print(f"mypy: FAILED ({len(strict_errors)} in strict modules, {len(worse)} files above the baseline)")
        return 1
    print(f"mypy: ok ({total} known errors outside the strict modules, {len(baseline)} files in the baseline)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
