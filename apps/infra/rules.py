"""Pure rules of the infra wrapper: preflight refusals and the plan-size check.

Everything here takes plain data (policy rows, a hostname, the JSON of ``show -json``) and either
returns a value or raises ``InfraRefusal``. Nothing runs an engine and nothing imports Django, so the
same rules serve the management command and the tests.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apps.infra.exceptions import InfraRefusal
from apps.infra.policy import MODE_PLAN_ONLY, ApplyPolicyRow, InfraPolicy, StateAuthorityEntry

ACTION_PLAN = "plan"
ACTION_APPLY = "apply"


def hostname_read(*, hostname_file: Path) -> str:
    """This machine's name as the environments' host guard sees it: the first line of ``hostname_file``.

    Falls back to the kernel's hostname only when the file is absent (macOS has no /etc/hostname), so
    the wrapper and the OpenTofu guard agree wherever the file exists.
    """
    try:
        text = hostname_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return socket.gethostname().strip().lower()
    lines = text.strip().splitlines()
    return lines[0].strip().lower() if lines else ""


@dataclass(frozen=True)
class Preflight:
    """What the policy allows for one environment on this machine, checked before any engine runs."""

    environment: str
    action: str
    row: ApplyPolicyRow
    state_authority: StateAuthorityEntry | None


def preflight_check(
    *,
    policy: InfraPolicy,
    environment: str,
    action: str,
    hostname: str,
    environments_dir: Path,
) -> Preflight:
    """Refuse (``InfraRefusal``) unless the policy lets ``hostname`` run ``action`` on ``environment``.

    The order is the order a person fixes things in: row, folder, host, mode, state.
    """
    row = policy.apply_policy.get(environment)
    if row is None:
        raise InfraRefusal(
            "infra.no_policy",
            f"environment {environment} has no row in infra/policy/apply-policy.yaml; add one in a reviewed PR.",
        )
    if not (environments_dir / environment).is_dir():
        raise InfraRefusal(
            "infra.no_environment",
            f"environment {environment} has a policy row but no folder {environments_dir / environment}.",
        )
    if hostname != row.host:
        raise InfraRefusal(
            "infra.wrong_host",
            f"environment {environment} may only run on {row.host}; this machine is {hostname or '(unnamed)'}.",
        )
    authority = policy.state_authority.get(environment)
    if action == ACTION_APPLY:
        if row.mode == MODE_PLAN_ONLY:
            raise InfraRefusal(
                "infra.plan_only",
                f"environment {environment} is plan-only in infra/policy/apply-policy.yaml; apply is refused.",
            )
        if authority is None:
            raise InfraRefusal(
                "infra.no_state_authority",
                f"environment {environment} has no entry in infra/policy/state-authority.yaml, so no host "
                "holds its state; add the entry before applying.",
            )
        if authority.host != hostname:
            raise InfraRefusal(
                "infra.state_elsewhere",
                f"the state of {environment} is held by {authority.host} ({authority.backend}: "
                f"{authority.location}); apply there, not on {hostname}.",
            )
    return Preflight(environment=environment, action=action, row=row, state_authority=authority)


@dataclass(frozen=True)
class PlanChanges:
    """Resource addresses a saved plan would create, update and destroy (a replace is both)."""

    creates: tuple[str, ...] = ()
    updates: tuple[str, ...] = ()
    destroys: tuple[str, ...] = ()
    outputs: Mapping[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        return f"{len(self.creates)} to create, {len(self.updates)} to update, {len(self.destroys)} to destroy"


def plan_changes_summarise(plan: Mapping[str, Any]) -> PlanChanges:
    """Count the managed-resource changes in the JSON of ``show -json PLANFILE``.

    Data-source reads and no-ops are not changes. An action this code does not know is counted as an
    update: a policy maximum must not be bypassed by a new engine verb.
    """
    creates: list[str] = []
    updates: list[str] = []
    destroys: list[str] = []
    for change in plan.get("resource_changes") or []:
        if change.get("mode", "managed") != "managed":
            continue
        address = change["address"]
        actions = set(change.get("change", {}).get("actions", []))
        if actions <= {"no-op", "read"}:
            continue
        if "create" in actions:
            creates.append(address)
        if "delete" in actions:
            destroys.append(address)
        if "update" in actions or not actions <= {"create", "delete"}:
            updates.append(address)
    outputs = {
        name: value.get("value")
        for name, value in ((plan.get("planned_values") or {}).get("outputs") or {}).items()
        if not value.get("sensitive")
    }
    return PlanChanges(tuple(creates), tuple(updates), tuple(destroys), outputs)


def plan_limits_breaches(*, changes: PlanChanges, row: ApplyPolicyRow) -> list[str]:
    """One sentence per maximum the plan exceeds, naming the offending addresses; empty when within."""
    breaches = []
    for kind, addresses, maximum in (
        ("creates", changes.creates, row.max_creates),
        ("updates", changes.updates, row.max_updates),
        ("destroys", changes.destroys, row.max_destroys),
    ):
        if len(addresses) > maximum:
            breaches.append(f"{len(addresses)} {kind} > max_{kind} {maximum}: {', '.join(addresses)}")
    return breaches


def plan_limits_check(*, changes: PlanChanges, row: ApplyPolicyRow) -> None:
    """Refuse (``infra.plan_exceeds_policy``) a plan larger than the environment's row allows."""
    breaches = plan_limits_breaches(changes=changes, row=row)
    if breaches:
        raise InfraRefusal(
            "infra.plan_exceeds_policy",
            f"apply of {row.environment} refused, the plan exceeds infra/policy/apply-policy.yaml: "
            + "; ".join(breaches),
        )
