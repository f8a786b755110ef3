"""scripts/typecheck.py, the mypy ratchet: it reads the strict modules from pyproject.toml, holds every other
file to its baseline count, and never passes when mypy did not run (a crash, mypy missing, output it cannot
read). The real mypy run is ``make lint``'s; these feed the script mypy-shaped output."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("typecheck", ROOT / "scripts" / "typecheck.py")
assert _spec is not None and _spec.loader is not None
typecheck = importlib.util.module_from_spec(_spec)
sys.modules["typecheck"] = typecheck  # dataclasses look their module up by name
_spec.loader.exec_module(typecheck)

STRICT = typecheck.strict_patterns()


def _found(*lines: str, checked: int = 340) -> str:
    files = len({line.split(":")[0] for line in lines})
    return "\n".join([*lines, f"Found {len(lines)} error{'s' * (len(lines) != 1)} in {files} file"
                               f"{'s' * (files != 1)} (checked {checked} source files)"]) + "\n"


@pytest.mark.parametrize(("file", "strict"), [
    ("apps/pipelines/rules.py", True),
    ("apps/groves/vocabulary.py", True),
    ("apps/workloads/states.py", True),
    ("apps/core/lifecycle.py", True),
    ("apps/core/platforms.py", True),
    ("forest_cli/main.py", True),
    ("agent/src/forest_agent/__init__.py", True),
    ("agent/src/forest_agent/kube/controller.py", True),
    ("apps/pipelines/services/dispatching.py", False),
    ("apps/core/validation.py", False),
    ("apps/staff/views.py", False),
    ("forest_host/asgi.py", False),
])
def test_the_strict_modules_are_pyprojects_own(file, strict):
    assert typecheck.is_strict(file, STRICT) is strict


def test_a_star_stands_for_any_number_of_components():
    pattern = typecheck._module_regex("apps.*.rules")
    assert [bool(pattern.match(m)) for m in ("apps.rules", "apps.groves.rules", "apps.a.b.rules",
                                              "apps.groves.rules_extra", "apps.groves.services")] == \
        [True, True, True, False, False]


def test_errors_are_read_with_their_file():
    out = _found("apps/x.py:3: error: Missing type arguments  [type-arg]",
                 "apps/x.py:9:5: error: Returning Any  [no-any-return]",
                 "forest_cli/main.py:1: error: Bad  [misc]")
    assert [file for file, _ in typecheck.parse(out, 1)] == ["apps/x.py", "apps/x.py", "forest_cli/main.py"]
    assert typecheck.parse("Success: no issues found in 342 source files\n", 0) == []


@pytest.mark.parametrize(("stdout", "returncode", "why"), [
    ("", 1, "no summary line"),  # python -m mypy without mypy: "No module named mypy" on stderr
    ("Traceback (most recent call last):\n  ...\nINTERNAL ERROR\n", 2, "no summary line"),
    ("pyproject.toml: [mypy]: Unrecognized option\nSuccess: no issues found in 3 source files\n", 2,
     "exit status 2"),
    ("Success: no issues found in 0 source files\n", 0, "checked no file"),
    # --pretty (or another format) wraps lines the script cannot read: a count it cannot match is no pass
    ("apps/x.py:3: error: Missing type\n    arguments\nFound 2 errors in 1 file (checked 4 source files)\n", 1,
     "summary counts 2 errors, 1 were read"),
    ("apps/x.py:3: error: Missing  [type-arg]\nSuccess: no issues found in 4 source files\n", 0,
     "summary counts 0 errors, 1 were read"),
])
def test_a_mypy_that_did_not_run_never_passes(stdout, returncode, why):
    with pytest.raises(typecheck.MypyDidNotRun, match=why):
        typecheck.parse(stdout, returncode)


def test_a_command_that_is_not_mypy_is_refused_loudly():
    with pytest.raises(typecheck.MypyDidNotRun) as raised:
        typecheck.run_mypy([sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(2)"])
    assert raised.value.code.startswith("mypy did not run: exit status 2")
    assert "boom" in raised.value.code


def test_strict_modules_fail_on_one_error_the_rest_on_more_than_the_baseline():
    errors = typecheck.parse(_found("apps/pipelines/rules.py:3: error: a  [type-arg]",
                                    "apps/staff/views.py:4: error: b  [misc]",
                                    "apps/staff/views.py:5: error: c  [misc]",
                                    "apps/core/validation.py:6: error: d  [misc]"), 1)
    verdict = typecheck.judge(errors, {"apps/staff/views.py": 2, "apps/core/validation.py": 3,
                                       "apps/gone.py": 1}, STRICT)
    assert verdict.strict_errors == ["apps/pipelines/rules.py:3: error: a  [type-arg]"]
    assert verdict.worse == {}
    assert verdict.better == {"apps/core/validation.py": (1, 3), "apps/gone.py": (0, 1)}
    assert verdict.failed

    verdict = typecheck.judge(errors[1:], {"apps/staff/views.py": 1}, STRICT)
    assert verdict.strict_errors == []
    assert verdict.worse == {"apps/staff/views.py": (2, 1), "apps/core/validation.py": (1, 0)}
    assert verdict.failed
    assert not typecheck.judge(errors[1:], {"apps/staff/views.py": 2, "apps/core/validation.py": 1}, STRICT).failed


def test_update_lowers_counts_and_raises_none_unless_asked():
    errors = typecheck.parse(_found("apps/a.py:1: error: x  [misc]",
                                    "apps/b.py:1: error: x  [misc]", "apps/b.py:2: error: x  [misc]",
                                    "apps/new.py:1: error: x  [misc]",
                                    "forest_cli/main.py:1: error: x  [misc]"), 1)
    verdict = typecheck.judge(errors, {"apps/a.py": 3, "apps/b.py": 1, "apps/gone.py": 2}, STRICT)
    baseline = {"apps/a.py": 3, "apps/b.py": 1, "apps/gone.py": 2}
    assert typecheck.updated_baseline(verdict, baseline, allow_raise=False) == {"apps/a.py": 1, "apps/b.py": 1}
    # a strict module never enters the baseline, even when every count is accepted
    assert typecheck.updated_baseline(verdict, baseline, allow_raise=True) == {
        "apps/a.py": 1, "apps/b.py": 2, "apps/new.py": 1}
