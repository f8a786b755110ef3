"""The curated mutation check (scripts/mutation_check.py) stays applicable: every break's text is in its file
exactly once, and every test it runs exists. Cheap (no break is applied here); ``make mutation`` applies them."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("mutation_check", ROOT / "scripts" / "mutation_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_every_break_still_applies_and_names_tests_that_exist():
    script = _script()
    names = [mutant.name for mutant in script.MUTANTS]
    assert len(names) == len(set(names))
    for mutant in script.MUTANTS:
        text = (ROOT / mutant.path).read_text()
        assert text.count(mutant.find) == 1, f"{mutant.name}: its text is not in {mutant.path} exactly once"
        assert mutant.find != mutant.replace
        for test in mutant.tests:
            path, _, function = test.partition("::")
            assert (ROOT / path).is_file(), f"{mutant.name}: no {path}"
            assert not function or f"def {function}(" in (ROOT / path).read_text(), f"{mutant.name}: no {test}"
