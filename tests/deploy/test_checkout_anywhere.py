"""The suite's path-sensitive tests, run from a checkout under /tmp with a virtual environment inside it.

A fresh clone under /tmp once failed the Kubernetes end-to-end tests (every container step exited 127),
the step-data tests through the controller and the two-controller leader test: the fake kubelet maps a
Pod's volume mounts (one is `/tmp`) onto local directories, and rewrote the interpreter's own path,
`/tmp/<checkout>/.venv/bin/python`, as if it were inside the Pod's `/tmp` volume (agent/tests/kube_fake.py
`local_path` now leaves the image's own files alone). Those tests, run here from such a checkout, keep
that from coming back, and so does anything else that ties a test to where the checkout lies: its code,
its tests and its interpreter all come from the copy (checked first), and the console scripts the tests
start are the copy's virtual environment's (tests/console.py).

What is not real: the copy's virtual environment is made with `python -m venv` but installs nothing; it
sees this run's installed packages through a .pth file (nothing is downloaded at test time), and its
console scripts are this environment's, their interpreter line pointed at the copy's Python.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

REPO = Path(__file__).resolve().parents[2]
# The tests that failed from a checkout under /tmp, one of each kind (Kubernetes steps, step data through the
# controller, two controller processes electing a leader).
PATH_SENSITIVE = [
    "tests/e2e/test_kube_controller.py::test_container_steps_run_through_the_controller_and_resume_their_nodes",
    "tests/e2e/test_kube_step_data.py::test_a_missing_output_fails_the_step_with_output_missing",
    "agent/tests/test_kube_leader.py::test_two_controllers_one_leads_and_the_other_takes_over_when_it_is_killed",
]
LOCAL_STATE = (".venv", ".git", "var", "staticfiles", "__pycache__", "*.egg-info", ".mypy_cache", ".ruff_cache",
               ".pytest_cache", ".hypothesis", "build", ".terraform", "node_modules")

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(900)]


@pytest.fixture
def checkout() -> Iterator[Path]:
    """A copy of this checkout's files under /tmp itself (not $TMPDIR): `/tmp` is what the Pods mount."""
    root = Path(tempfile.mkdtemp(prefix="forest-anywhere-", dir="/tmp"))
    try:
        copy = root / "forest"
        shutil.copytree(REPO, copy, ignore=shutil.ignore_patterns(*LOCAL_STATE), symlinks=True)
        yield copy
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _venv(copy: Path) -> Path:
    """`copy/.venv`, seeing this run's packages, with this environment's console scripts; returns its python."""
    venv = copy / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    tested = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (purelib / "_forest_tested.pth").write_text("".join(f"{path}\n" for path in tested))
    ours = Path(sys.executable).parent
    for script in ours.iterdir():
        target = venv / "bin" / script.name
        if target.exists() or target.is_symlink() or script.name.startswith(("python", "activate")):
            continue
        first, _, rest = script.read_bytes().partition(b"\n") if script.is_file() else (b"", b"", b"")
        interpreter = (first[2:].split() or [b""])[0].decode(errors="replace") if first.startswith(b"#!") else ""
        if interpreter and Path(interpreter).parent == ours:  # a console script of this environment
            target.write_bytes(b"#!" + str(python).encode() + b"\n" + rest)
            target.chmod(0o755)
        else:
            target.symlink_to(script.resolve())
    return python


def _environment(copy: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}  # not an xdist worker
    env["PYTHONPATH"] = os.pathsep.join([str(copy), str(copy / "agent" / "src")])
    # A test database of its own: this run's may be in use by the run starting this one.
    env["DATABASE_TEST_NAME"] = f"{settings.DATABASES['default']['TEST']['NAME']}_anywhere"
    return env


def test_the_path_sensitive_tests_pass_from_a_checkout_under_tmp(checkout: Path) -> None:
    python = _venv(checkout)
    env = _environment(checkout)
    where = subprocess.run(
        [str(python), "-c", "import sys, apps, forest_agent, tests.console as c; "
         "print(sys.prefix, apps.__file__, forest_agent.__file__, c.console_script('forest-controller'))"],
        cwd=checkout, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert where.returncode == 0, where.stderr
    assert all(path.startswith(str(checkout)) for path in where.stdout.split()), (
        f"not everything comes from the copy: {where.stdout}")
    assert (checkout / ".venv" / "bin" / "forest-controller").is_file()

    run = subprocess.run([str(python), "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", *PATH_SENSITIVE],
                         cwd=checkout, env=env, capture_output=True, text=True, timeout=840, check=False)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert f"{len(PATH_SENSITIVE)} passed" in run.stdout, run.stdout[-2000:]
